"""A stand-in for the runner's fault path against a P/D stack, for the crash matrix of the KV faults.

It does what the runner does before each injection (journal the revert record, fsync), injects the faults named
in FAULTS.json against the target in TARGET.json, starts the watchdog, prints READY and waits to be killed.
Usage: python tests/stack/pd/pd_fake_runner.py RUN_DIR TARGET.json FAULTS.json
(FAULTS.json: a list of ``[fault_id, kind, params]``.)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from drill import registry
from drill.api import FaultContext, Selector, TargetInfo
from drill.rundir.journal import Event, Journal
from drill.runner import active
from drill.runner.fault_schedule import resolve_targets
from drill.runner.reverts import RevertRecord, RevertStack
from drill.runner.watchdog import Watchdog


def main() -> None:
    run_dir, target_file, faults_file = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    target = TargetInfo.model_validate_json(target_file.read_text())
    journal = Journal(run_dir / "journal.jsonl")
    journal.write(
        Event.RUN_STARTED, run_id=run_dir.name, pid=os.getpid(), pid_start=active.process_start_time(os.getpid())
    )
    active.register(run_dir.name, run_dir)
    Watchdog(run_dir, heartbeat_timeout_s=60, lease_grace_s=600)
    stack = RevertStack(journal)
    for fault_id, kind, params in json.loads(faults_file.read_text()):
        cls = registry.faults.get(kind)
        fault = cls(cls.Params.model_validate(params))
        targets = resolve_targets(fault, Selector(), target, 0)
        ctx = FaultContext(fault_id, target, targets)
        ctx.saved = fault.prepare(ctx)
        record = RevertRecord(
            fault_id=fault_id,
            kind=kind,
            params=params,
            target=target,
            targets=targets,
            saved=ctx.saved.model_dump(mode="json"),
            planned_end_ts=time.time() + 600,
        )
        stack.push(record, lambda f=fault, c=ctx: f.revert(c))
        fault.inject(ctx)
        journal.write(Event.FAULT_INJECTED, fault_id=fault_id, kind=kind)
        fault.verify(ctx)
    print("READY", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
