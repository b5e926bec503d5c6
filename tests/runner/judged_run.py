"""A small finished run, for the tests that judge one from its directory (``drill judge``, and ``evaluate_checks``
the way the runner calls it): a journal whose fault phase ran 10 s, client records, and a whole run directory."""

from __future__ import annotations

import json
from pathlib import Path

from drill.rundir.records import RequestRecord

T0 = 1_700_000_000.0  # the run's start (UNIX s)


def write_journal(path: Path) -> None:
    """A completed run: started at ``T0``, its fault phase from ``T0`` to ``T0 + 10`` s."""
    events = [
        ("run_started", {}),
        ("phase_started", {"phase": "fault", "planned_s": 10}),
        ("phase_ended", {"phase": "fault"}),
        ("run_finished", {"status": "completed", "stopped_by": None}),
    ]
    path.write_text(
        "".join(
            json.dumps(
                {"seq": i, "event": e, "ts": T0 + (0 if i <= 2 else 10) + i * 0.001, "mono": i, "by": "runner", **data}
            )
            + "\n"
            for i, (e, data) in enumerate(events, 1)
        )
    )


def record_line(i: int, error: str | None = None) -> str:
    """The ``requests.jsonl`` line of request ``i``, sent in the fault phase: a success, or HTTP 503 with ``error``
    as its error class (any string, so a test can write one no reader knows)."""
    record = RequestRecord(
        request_id=f"r{i}",
        logical_id=f"l{i}",
        pool="chat",
        attempt=1,
        intended_ts=T0 + 1 + i * 0.1,
        sent_ts=T0 + 1 + i * 0.1,
        schedule_lag_ms=0.1,
        status=200 if error is None else 503,
        ttft_ms=50.0,
        e2e_ms=100.0,
    )
    data = json.loads(record.to_json())
    data["error"] = error
    return json.dumps(data)


def write_run_dir(tmp_path: Path, records: list[str]) -> Path:
    """A run directory under ``tmp_path/reports`` as ``drill run`` leaves it: ``resolved.json`` (one error_rate
    check over the fault phase, at most 20 % errors from 5 requests on), the journal, ``records`` as requests.jsonl."""
    run = tmp_path / "reports" / "d" / "20261201T000000Z-abcdef"
    run.mkdir(parents=True)
    (run / "resolved.json").write_text(
        json.dumps(
            {
                "drill": {
                    "name": "d",
                    "faults": [],
                    "slo": {},
                    "checks": [{"kind": "error_rate", "name": "errors", "params": {"max": 0.2, "min_requests": 5}}],
                },
                "scenario": {"pools": [{"name": "chat", "slo": {"ttft_p95": "1s"}}]},
                "check_params": [{"phase": "fault", "max": 0.2, "min_requests": 5}],
            }
        )
    )
    write_journal(run / "journal.jsonl")
    (run / "requests.jsonl").write_text("\n".join(records) + "\n")
    return run
