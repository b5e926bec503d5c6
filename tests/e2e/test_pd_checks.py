"""Issue 19's checks against a 1P:1D reference stack through ``drill run``: a stalled KV transfer with and without
a lease (``bounded_completion``), and unchecked corrupt blocks (``output_correctness``), all side by side.

Each drill is the same small one (a 1P:1D stack, one chat pool at 4 req/s, 3 s client timeout); only the fault and
the lease differ. Without a lease a stalled transfer keeps its request until the client gives up: a hang, and the
check names the decode worker's ``kv_transfer`` span; with a 1 s lease the same stall is a fast error. With block
versions unchecked, corrupt blocks are HTTP 200 with other tokens: ``error_rate`` passes, ``output_correctness``
fails, its golden answers from the control set (baseline bodies sent again after the baseline).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import start_drill

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _drill(path: Path, *, lease: str | None, fault: dict, checks: list[dict]) -> str:
    drill = {
        "schema": "drill/v1",
        "name": path.stem,
        "seed": 17,
        "hypothesis": "a KV-transfer fault is caught by the check that should catch it",
        "target": {
            "kind": "embedded",
            "config": {
                "model": "llama-3-8b",
                "gpu": "h100",
                "engine": {"weight_load_time": "200ms"},
                "router": {"health_check_interval": "250ms"},
                "topology": {"prefill": 1, "decode": 1, "kv_transfer": {"lease": lease, "check_block_versions": False}},
            },
        },
        "scenario": {
            "name": "pd-chat",
            "seed": 61,
            "pools": [
                {
                    "name": "chat",
                    "endpoint": "chat",
                    "stream": True,
                    "arrival": {"process": "poisson", "rate": 4},
                    "input_tokens": {"dist": "uniform", "min": 50, "max": 200},
                    "output_tokens": {"dist": "fixed", "value": 16},
                    "sampling": {"temperature": 0, "ignore_eos": True},
                    "timeout": "3s",
                    "retry": {"attempts": 0},
                }
            ],
        },
        "phases": {
            "cold_start": {"timeout": "120s"},
            "warmup": "1s",
            "baseline": "5s",
            "fault": "7s",
            "recovery": "3s",
            "replay": False,
        },
        "faults": [fault],
        "checks": checks,
    }
    path.write_text(yaml.safe_dump(drill))
    return str(path)


def test_stalls_and_corrupt_blocks_get_the_verdicts_their_configuration_predicts(tmp_path: Path) -> None:
    stall = {"name": "stall", "kind": "kv_transfer_stall", "start": "1s", "duration": "4s", "params": {}}
    corrupt = {
        "name": "corrupt",
        "kind": "kv_block_corrupt",
        "start": "0s",
        "duration": "6s",
        "params": {"corruption": "foreign", "share": 0.5},
    }
    bounded = [{"kind": "bounded_completion", "params": {"phases": ["fault"]}}]
    answers = [
        {"kind": "output_correctness", "params": {"control_share": 0.5}},
        {"kind": "error_rate", "params": {"max": 0.0, "min_requests": 5}},
    ]
    started = [
        start_drill(
            tmp_path / "no-lease",
            _drill(tmp_path / "no-lease.yaml", lease=None, fault=stall, checks=bounded),
            time_scale=1.0,
        ),
        start_drill(
            tmp_path / "lease", _drill(tmp_path / "lease.yaml", lease="1s", fault=stall, checks=bounded), time_scale=1.0
        ),
        start_drill(
            tmp_path / "corrupt",
            _drill(tmp_path / "corrupt.yaml", lease="2s", fault=corrupt, checks=answers),
            time_scale=1.0,
        ),
    ]
    no_lease, lease, corrupted = (run.finish() for run in started)

    hung = no_lease.verdict("bounded_completion")
    assert hung["status"] == "FAIL", no_lease.summary()
    assert hung["observed"]["hangs"] > 0 and set(hung["observed"]["waited_in"]) == {"kv_transfer"}
    assert "waited until the client's timeout; waited in kv_transfer" in hung["message"]
    assert lease.status("bounded_completion") == "PASS", lease.summary()

    wrong = corrupted.verdict("output_correctness")
    assert corrupted.status("error_rate") == "PASS", corrupted.summary()  # nothing errors ...
    assert wrong["status"] == "FAIL", corrupted.summary()  # ... and the answers are wrong
    assert wrong["observed"]["mismatched"] == wrong["observed"]["mismatched_http_200"] > 0
