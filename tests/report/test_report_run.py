"""``drill run`` writes the report of a real run (the embedded stack, real Locust load, a real queue flood): its
last lines are the verdicts and the report's paths, and ``drill report`` later renders the same bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DRILL = {
    "name": "report-e2e",
    "runbook": "runbook.md",
    "target": {"kind": "embedded", "config": {"replicas": 2, "engine": {"weight_load_time": "200ms"}}},
    "scenario": {
        "seed": 5,
        "arrival": {"process": "poisson", "rate": 4},
        "pools": [
            {
                "name": "chat",
                "input_tokens": {"dist": "uniform", "min": 50, "max": 300},
                "output_tokens": {"dist": "fixed", "value": 20},
                "slo": {"ttft_p95": "1s"},
            }
        ],
    },
    "otlp": {"port": 0},
    "phases": {"warmup": "2s", "baseline": "5s", "fault": "4s", "recovery": "3s", "replay": False},
    "faults": [
        {"name": "flood", "kind": "queue_flood", "start": "1s", "duration": "3s", "params": {"rate_multiplier": 4}}
    ],
    "checks": [
        {"kind": "slo", "params": {"phase": "baseline", "min_requests": 5}},
        {"kind": "error_rate", "params": {"phase": "recovery", "min_requests": 5}},
    ],
}


def test_a_run_ends_with_its_verdicts_and_report_and_re_renders_byte_identical(tmp_path: Path) -> None:
    (tmp_path / "runbook.md").write_text("# Runbook: flood\n\n## Mitigation\nBound admission.\n")
    drill = tmp_path / "report-e2e.yaml"
    drill.write_text(yaml.safe_dump(DRILL, sort_keys=False))
    env = {**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")}
    run = subprocess.run(
        [sys.executable, "-m", "drill", "run", str(drill), "--out", str(tmp_path / "out"), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert run.returncode in (0, 1), run.stderr
    lines = run.stdout.strip().splitlines()
    [run_dir] = (tmp_path / "out" / "report-e2e").iterdir()
    assert lines[-2:] == [f"report: {run_dir / 'report.md'}", f"report: {run_dir / 'report.html'}"]
    assert lines[-3] == f"run directory: {run_dir}"
    verdicts = [line.split()[:2] for line in lines[-6:-3]]  # fault_landed is added to a drill with faults
    assert [name for _, name in verdicts] == ["fault_landed:", "slo:", "error_rate:"]
    assert all(status in ("PASS", "FAIL", "INCONCLUSIVE", "ERROR") for status, _ in verdicts)
    for name in ("report.md", "report.html", "junit.xml", "verdicts.json"):
        assert (run_dir / name).is_file(), f"every run writes {name}"
    md = (run_dir / "report.md").read_text()
    assert "### Mitigation" in md and "Bound admission." in md  # the runbook copied into the run directory
    assert (run_dir / "runbook.md").is_file()
    again = subprocess.run(
        [sys.executable, "-m", "drill", "report", str(run_dir), "--format", "md", "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout == md
