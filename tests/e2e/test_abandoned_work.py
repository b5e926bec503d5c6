"""What abandoned work costs (issue 22): the flagship drill with ``abort_abandoned: false``, its flood in real time.

With abandoned requests aborted (vLLM's behaviour, the default) nothing of the flood is still queued 30 s after it
(the router's upstream timeout), so the recovery phase, 45 s after the flood, judges a recovered stack: the drill
predicts ``recovered: PASS`` (asserted at a CI time scale by ``test_drill_verdicts.py``, and measured at the default
scale in the README). Switched off, the replicas go on computing every request the router gave up on (504): the
backlog outlives the flood, the recovery phase's requests wait behind it and time out, and ``recovered`` FAILs —
the failure the drill showed before the stack aborted abandoned work.

The flood needs its own length (60 s against the router's 30 s), so the fault phase runs unscaled; warm-up,
baseline and recovery are shortened and the replay is off (not what this test proves). Measured on the project's
2-vCPU machine, shared: 3 minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import DrillRun, start_drill

pytestmark = [pytest.mark.integration, pytest.mark.slow]

UNBOUNDED = "drills/unbounded-queue.yaml"
REAL_TIME_FLOOD = (
    "phases.warmup=10s",
    "phases.baseline=30s",
    "phases.recovery=30s",
    "phases.replay=false",
)


def _phases(run: DrillRun) -> dict[str, tuple[float, float]]:
    windows: dict[str, list[float]] = {}
    for line in (run.run_dir / "journal.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "phase_started":
            windows[event["phase"]] = [event["ts"], event["ts"]]
        elif event["event"] == "phase_ended":
            windows[event["phase"]][1] = event["ts"]
    return {name: (start, end) for name, (start, end) in windows.items()}


def _waiting(run: DrillRun, start: float, end: float) -> float:
    """The most requests waiting at once (summed over the replicas' scrapes of one second) in ``[start, end)``."""
    by_second: dict[int, float] = {}
    for line in (run.run_dir / "metrics.jsonl").read_text().splitlines():
        scrape = json.loads(line)
        if scrape.get("ok") and start <= scrape["ts"] < end:
            waiting = sum(v for k, v in scrape["samples"].items() if k.startswith("vllm:num_requests_waiting"))
            by_second[int(scrape["ts"])] = by_second.get(int(scrape["ts"]), 0.0) + waiting
    return max(by_second.values(), default=0.0)


@pytest.mark.timeout(600)
def test_without_aborting_abandoned_work_the_flood_outlives_itself_and_recovery_fails(tmp_path: Path) -> None:
    started = start_drill(
        tmp_path / "off", UNBOUNDED, *REAL_TIME_FLOOD, "target.config.abort_abandoned=false", time_scale=1.0
    )
    run = started.finish()
    recovered = run.verdict("recovered")
    assert recovered["status"] == "FAIL", run.summary()
    phases = _phases(run)
    _, fault_end = phases["fault"]
    # the flood ran from 15 s to 75 s of the fault phase: 45 s later its backlog is still queued
    assert _waiting(run, fault_end - 10, fault_end) >= 50, run.summary()
    print(f"waiting at the fault phase's end: {_waiting(run, fault_end - 10, fault_end):.0f}; {recovered['message']}")
