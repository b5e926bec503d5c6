"""A run directory "from another machine" for the hostile-input tests, and a way to run ``drill`` on it as a user
would: a child process, its exit code, output, wall time and peak memory (``ru_maxrss`` of that child alone).

``received_run(folder)`` writes a small but complete run directory (``resolved.json`` with checks that read the
journal, the request records and the spans; ``journal.jsonl``, ``requests.jsonl``, ``spans.jsonl``,
``verdicts.json``, ``env.json``, ``runbook.md``) that ``drill judge`` and ``drill report`` read end to end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from drill.rundir.records import RequestRecord

__all__ = ["Ran", "T0", "received_run", "run_drill", "run_python", "span_line"]

T0 = 1_700_000_000.0
REPO = Path(__file__).resolve().parents[2]


def _event(seq: int, event: str, at: float, **data: object) -> str:
    return json.dumps({"seq": seq, "event": event, "ts": T0 + at, "mono": at, "by": "runner", **data})


def span_line(i: int, *, start_ns: int | None = None, attributes: object = None) -> str:
    start = int((T0 + _at(i)) * 1e9) if start_ns is None else start_ns
    return json.dumps(
        {
            "trace_id": f"{i:032x}",
            "span_id": f"{i + 1:016x}",
            "parent_span_id": None,
            "name": "llm_request",
            "kind": "SERVER",
            "service": "drill-replica-0",
            "start_ns": start,
            "end_ns": start + 50_000_000,
            "status": {"code": "UNSET", "message": None},
            "attributes": {"i": i} if attributes is None else attributes,
        }
    )


def _at(i: int) -> float:
    """Request ``i`` of a run: 8 in the 1 s baseline, the rest in the 10 s fault phase."""
    return 0.1 * (i + 1) if i < 8 else 1 + (i - 8) * 0.1 % 10


def _record(i: int) -> str:
    at = _at(i)
    record = RequestRecord(
        request_id=f"r{i}",
        logical_id=f"l{i}",
        pool="chat",
        attempt=1,
        intended_ts=T0 + at,
        sent_ts=T0 + at,
        schedule_lag_ms=0.1,
        status=200,
        ttft_ms=50.0,
        e2e_ms=100.0,
        trace_id=f"{i:032x}",
    )
    return record.to_json()


def received_run(folder: Path, requests: int = 20) -> Path:
    """Write the run directory ``folder`` (created) and return it."""
    folder.mkdir(parents=True)
    checks = [
        {"kind": "error_rate", "name": "errors", "params": {"phase": "fault", "max": 0.2, "min_requests": 5}},
        {"kind": "first_abnormal_span", "name": "spans", "params": {}},
    ]
    resolved = {
        "drill": {
            "name": "received",
            "title": "A received run",
            "faults": [],
            "slo": {},
            "checks": checks,
            "runbook": "runbook.md",
            "target": {"kind": "openai"},
        },
        "scenario": {"pools": [{"name": "chat", "slo": {"ttft_p95": "1s"}}]},
        "check_params": [c["params"] for c in checks],
        "drill_file": "drills/received.yaml",
    }
    (folder / "resolved.json").write_text(json.dumps(resolved))
    events = [
        _event(1, "run_started", 0, run_id=folder.name, pid=1, pid_start=None, drill="received"),
        _event(2, "phase_started", 0, phase="baseline", planned_s=1),
        _event(3, "phase_ended", 1, phase="baseline"),
        _event(4, "phase_started", 1, phase="fault", planned_s=10),
        _event(5, "phase_ended", 11, phase="fault"),
        _event(6, "run_finished", 11, status="completed", stopped_by=None),
    ]
    (folder / "journal.jsonl").write_text("".join(e + "\n" for e in events))
    (folder / "requests.jsonl").write_text("".join(_record(i) + "\n" for i in range(requests)))
    (folder / "spans.jsonl").write_text("".join(span_line(i) + "\n" for i in range(requests)))
    (folder / "verdicts.json").write_text(json.dumps({"schema": "llm-drill/verdicts/v1", "checks": []}))
    (folder / "env.json").write_text(json.dumps({"run_id": folder.name}))
    (folder / "runbook.md").write_text("# Runbook\n\n## Mitigation\nBound admission.\n")
    return folder


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str
    seconds: float
    max_rss_mb: float
    timed_out: bool

    @property
    def text(self) -> str:
        return self.out + self.err


#: Runs ``argv[2:]`` and writes its ``ru_maxrss`` (KiB) into the file ``argv[1]``. The drill child is forked from
#: this small process, not from the test process: Linux carries the peak resident size of the process that forks
#: into the exec-ed child (``setmax_mm_hiwater_rss``), so a child forked from a large pytest would inherit its size.
_MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


#: Seconds of wall time after which a child is killed as blocked. A guard against a hang, not a speed bound: a
#: command blocked on a FIFO never returns, while one that runs beside other jobs (``./dev test`` runs the parallel
#: part at nice 19 beside the serial part's drills) can take many times its usual 1-2 s to import and finish.
BLOCKED_AFTER_S = 60.0


def run_drill(*args: str, timeout: float = BLOCKED_AFTER_S, cwd: Path | None = None, env: dict | None = None) -> Ran:
    """``python -m drill ARGS`` as a child process, with its own peak resident memory (``wait4``).

    A command still running after ``timeout`` seconds is killed (``timed_out``).
    """
    return run_python("-m", "drill", *args, timeout=timeout, cwd=cwd, env=env)


def run_python(*args: str, timeout: float = BLOCKED_AFTER_S, cwd: Path | None = None, env: dict | None = None) -> Ran:
    """``python ARGS`` as :func:`run_drill` runs it."""
    folder = Path(tempfile.mkdtemp(prefix="drill-run-"))
    out_path, err_path, rss_path = folder / "out", folder / "err", folder / "rss"
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})}
    start = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", _MEASURE, str(rss_path), *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
        )
        try:
            code = child.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            code = child.wait()
            timed_out = True
    seconds = time.monotonic() - start
    texts = [p.read_text(errors="replace") for p in (out_path, err_path)]
    rss_kib = int(rss_path.read_text()) if rss_path.exists() else 0
    shutil.rmtree(folder)
    return Ran(code, texts[0], texts[1], seconds, rss_kib / 1024, timed_out)
