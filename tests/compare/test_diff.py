"""The resolved-configuration diff: nested keys, lists, defaults, labels; one difference runs, zero or two refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.compare.diff import ABSENT, Difference, diff_configs, diff_drills, effective_config, require_one
from drill.errors import InputError
from drill.spec.loader import load_drill

REPO = Path(__file__).resolve().parents[2]
UNBOUNDED = REPO / "drills" / "unbounded-queue.yaml"
ADMISSION = "target.config.engine.max_num_queued_reqs=128"


def test_nested_keys_give_dotted_paths_with_both_values() -> None:
    a = {"target": {"config": {"engine": {"max_num_queued_reqs": None, "max_num_seqs": 256}}}}
    b = {"target": {"config": {"engine": {"max_num_queued_reqs": 128, "max_num_seqs": 256}}}}
    assert diff_configs(a, b) == [Difference("target.config.engine.max_num_queued_reqs", None, 128)]


def test_lists_are_compared_item_by_item_and_a_missing_item_is_absent() -> None:
    a = {"faults": [{"params": {"rate": 2}}, {"name": "x"}], "hosts": ["a"]}
    b = {"faults": [{"params": {"rate": 3}}], "hosts": ["a", "b"]}
    assert diff_configs(a, b) == [
        Difference("faults[0].params.rate", 2, 3),
        Difference("faults[1]", {"name": "x"}, ABSENT),
        Difference("hosts[1]", ABSENT, "b"),
    ]


def test_a_key_one_side_lacks_is_a_difference_and_equal_numbers_are_not() -> None:
    assert diff_configs({"a": 1}, {"a": 1.0}) == []
    assert diff_configs({"a": True}, {"a": 1}) == [Difference("a", True, 1)]  # a flag is not a number
    assert diff_configs({"a": {"b": 1}}, {"a": {}}) == [Difference("a.b", 1, ABSENT)]
    assert Difference("a.b", 1, ABSENT).describe() == "a.b: 1 -> (absent)"


def test_plugin_params_scenario_and_time_scale_replace_what_the_file_wrote_and_labels_are_left_out() -> None:
    resolved = {
        "drill": {
            "name": "d",
            "title": "t",
            "predicts": {},
            "target": {"kind": "k", "config": {}},
            "scenario": "s.yaml",
            "faults": [{"kind": "f", "params": {}}],
            "checks": [{"kind": "c"}],
        },
        "scenario": {"pools": []},
        "time_scale": 0.5,
        "target_params": {"replicas": 2},
        "fault_params": [{"rate": 1.0}],
        "check_params": [{"max": 0.1}],
    }
    assert effective_config(resolved) == {
        "target": {"kind": "k", "config": {"replicas": 2}},
        "scenario": {"pools": []},
        "faults": [{"kind": "f", "params": {"rate": 1.0}}],
        "checks": [{"kind": "c", "params": {"max": 0.1}}],
        "time_scale": 0.5,
    }


def test_one_change_to_a_real_drill_is_one_difference() -> None:
    baseline = load_drill(UNBOUNDED)
    candidate = load_drill(UNBOUNDED, overrides=[ADMISSION])
    found = diff_drills(baseline, candidate)
    assert found == [Difference("target.config.engine.max_num_queued_reqs", None, 128)]
    assert require_one(found) is found[0]


def test_writing_out_a_default_or_changing_a_label_is_no_difference() -> None:
    baseline = load_drill(UNBOUNDED)
    same = load_drill(
        UNBOUNDED,
        overrides=["target.config.engine.max_num_seqs=256", "title=another title", "predicts.fast_failure=PASS"],
    )
    assert diff_drills(baseline, same) == []


def test_zero_differences_are_refused_nothing_to_compare() -> None:
    with pytest.raises(InputError, match="same configuration: nothing to compare") as raised:
        require_one(diff_drills(load_drill(UNBOUNDED), load_drill(UNBOUNDED)))
    assert raised.value.exit_code == 2


def test_two_differences_are_refused_with_a_message_naming_both() -> None:
    candidate = load_drill(UNBOUNDED, overrides=[ADMISSION, "faults[0].params.rate_multiplier=6"])
    with pytest.raises(InputError) as raised:
        require_one(diff_drills(load_drill(UNBOUNDED), candidate))
    message = str(raised.value)
    assert raised.value.exit_code == 2
    assert "differ in 2 variables" in message and "nothing was started" in message
    assert "target.config.engine.max_num_queued_reqs: null -> 128" in message
    assert "faults[0].params.rate_multiplier: 12.0 -> 6.0" in message


def test_a_secret_valued_difference_is_listed_with_its_value_redacted() -> None:
    toxic = REPO / "tests" / "fixtures" / "drills" / "toxic.yaml"
    a = load_drill(toxic, overrides=["target.config.api_key=sk-old-secret-123456"])
    b = load_drill(toxic, overrides=["target.config.api_key=sk-new-secret-654321"])
    found = diff_drills(a, b)
    assert found == [Difference("target.config.api_key", "[redacted]", "[redacted]")]
    with pytest.raises(InputError) as raised:
        require_one([*found, Difference("seed", 1, 2)])
    assert "sk-old-secret" not in str(raised.value) and "target.config.api_key" in str(raised.value)
