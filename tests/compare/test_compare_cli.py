"""``drill compare`` refuses before it starts anything: not exactly one variable changed, or bad input (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from drill.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
UNBOUNDED = str(REPO / "drills" / "unbounded-queue.yaml")
ADMISSION = "target.config.engine.max_num_queued_reqs=128"


def _compare(*args: str) -> Result:
    return CliRunner().invoke(cli, ["compare", *args], catch_exceptions=False)


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state directory of this test's own, so the active-run registry shows whether a run was started."""
    monkeypatch.setenv("DRILL_STATE_DIR", str(tmp_path / "state"))


def _nothing_started(out: Path) -> None:
    assert not out.exists(), f"a refused comparison made {sorted(out.rglob('*'))}"
    runs = Path(os.environ["DRILL_STATE_DIR"]) / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a refused comparison registered a run"


def test_two_changed_variables_are_refused_naming_both_and_nothing_starts(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = _compare(UNBOUNDED, "--set", ADMISSION, "--set", "phases.fault=130s", "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "differ in 2 variables" in result.output
    assert "target.config.engine.max_num_queued_reqs: null -> 128" in result.output
    assert 'phases.fault: "257s" -> "130s"' in result.output
    assert "one change:" not in result.output  # refused before the comparison began
    _nothing_started(out)


def test_baseline_and_candidate_files_differing_in_two_keys_are_refused(tmp_path: Path) -> None:
    text = Path(UNBOUNDED).read_text()
    baseline, candidate = tmp_path / "unbounded-queue.yaml", tmp_path / "candidate.yaml"
    baseline.write_text(text)
    changed = text.replace("max_num_queued_reqs: null", "max_num_queued_reqs: 128").replace(
        "rate_multiplier: 12.0", "rate_multiplier: 6.0"
    )
    assert changed.count("128") > text.count("128")
    candidate.write_text(changed.replace("name: unbounded-queue", "name: unbounded-queue-bounded"))  # a label
    out = tmp_path / "reports"
    result = _compare("--baseline", str(baseline), "--candidate", str(candidate), "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "faults[0].params.rate_multiplier: 12.0 -> 6.0" in result.output
    assert "target.config.engine.max_num_queued_reqs: null -> 128" in result.output
    assert "differ in 2 variables" in result.output
    assert "  name:" not in result.output  # the drill's name is a label, not a variable
    _nothing_started(out)


def test_no_change_at_all_is_refused_as_nothing_to_compare(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = _compare(UNBOUNDED, "--set", "seed=1337", "--out", str(out))  # the drill's own seed
    assert result.exit_code == 2 and "nothing to compare" in result.output, result.output
    _nothing_started(out)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((UNBOUNDED,), "DRILL needs the candidate's change: --set KEY=VALUE"),
        (("--baseline", UNBOUNDED), "give DRILL with --set KEY=VALUE, or both --baseline and --candidate"),
        ((UNBOUNDED, "--baseline", UNBOUNDED, "--set", ADMISSION), "not both"),
        ((UNBOUNDED, "--set", "phases.fault=nope"), "<--set>:1:"),  # located: the --set it came from
        ((UNBOUNDED, "--set", ADMISSION, "--set-both", "phases.warmup=-1s"), "<--set>:1:"),
        ((UNBOUNDED, "--set", ADMISSION, "--time-scale", "0"), "--time-scale must be a positive"),
    ],
)
def test_bad_input_is_a_located_error_exit_2_and_nothing_starts(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    out = tmp_path / "reports"
    result = _compare(*args, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert expected in result.output
    _nothing_started(out)


def test_a_differing_label_is_listed_but_is_not_a_variable(tmp_path: Path) -> None:
    from drill.compare.comparison import plan_comparison
    from drill.spec.loader import load_drill

    plan = plan_comparison(
        load_drill(UNBOUNDED), load_drill(UNBOUNDED, overrides=[ADMISSION, "title=admission control on"])
    )
    assert plan.change.path == "target.config.engine.max_num_queued_reqs"
    assert [d.path for d in plan.labels] == ["title"] and plan.labels[0].candidate == "admission control on"


def test_a_sweep_drill_is_refused_and_one_variant_against_another_is_compared(tmp_path: Path) -> None:
    sweep = str(REPO / "drills" / "tp-scaling.yaml")
    out = tmp_path / "reports"
    refused = _compare(sweep, "--set", "target.config.engine.tensor_parallel_size=2", "--out", str(out))
    assert refused.exit_code == 2 and "is a sweep" in refused.output, refused.output
    _nothing_started(out)
    from drill.compare.comparison import plan_comparison
    from drill.spec.loader import load_drill

    variant = ["sweep=null"]
    plan = plan_comparison(
        load_drill(sweep, overrides=variant),
        load_drill(sweep, overrides=[*variant, "target.config.engine.tensor_parallel_size=4"]),
    )
    assert plan.change.path == "target.config.engine.tensor_parallel_size" and plan.change.candidate == 4
