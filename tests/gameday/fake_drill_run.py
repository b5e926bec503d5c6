"""A stand-in for ``python -m drill run`` at the process seam, for the conductor's unit tests.

Invoked as ``fake_drill_run.py -m drill run DRILL --out OUT --time-scale F --no-progress [--set K=V]...``. The
plan in ``$FAKE_DRILL_PLAN`` (JSON: drill file stem -> {"exit": N, "checks": {name: status}, "hang": bool})
says how each drill ends; it writes a run directory the way ``drill run`` does (``journal.jsonl``,
``verdicts.json``, ``summary.md``) and appends its argv to ``$FAKE_DRILL_CALLS``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    args = sys.argv[1:]
    assert args[:3] == ["-m", "drill", "run"], args
    drill = Path(args[3])
    out = Path(args[args.index("--out") + 1])
    with open(os.environ["FAKE_DRILL_CALLS"], "a") as fh:
        fh.write(json.dumps(args) + "\n")
    plan = json.loads(os.environ["FAKE_DRILL_PLAN"]).get(drill.stem, {})
    run_dir = out / drill.stem / f"20260101T000000Z-{os.getpid():06x}"
    run_dir.mkdir(parents=True)
    (run_dir / "journal.jsonl").write_text("{}\n")
    print(f"running {drill.stem}", flush=True)
    if plan.get("hang"):
        stopped = []
        signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
        deadline = time.monotonic() + 60
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.05)
        print("reverted; interrupted", flush=True)
        return 130
    checks = [
        {
            "name": name,
            "kind": "error_rate",
            "status": status,
            "message": f"{name} was {status}",
            "observed": {"error_rate": 0.25 if status != "PASS" else 0.0},
            "units": {},
        }
        for name, status in plan.get("checks", {"errors": "PASS"}).items()
    ]
    if plan.get("exit", 0) != 3:
        (run_dir / "verdicts.json").write_text(json.dumps({"schema": "llm-drill/verdicts/v1", "checks": checks}))
        (run_dir / "summary.md").write_text(f"# {drill.stem}\n")
    if plan.get("exit") == 4:
        print("REVERT FAILED — run `drill cleanup`", flush=True)
    return int(plan.get("exit", 0))


if __name__ == "__main__":
    sys.exit(main())
