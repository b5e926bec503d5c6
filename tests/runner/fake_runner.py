"""A stand-in for the runner's fault path, to test the watchdog with real mechanisms.

It does exactly what the runner does before injecting (journal the revert record, fsync), injects
the faults given on the command line, starts the watchdog, prints READY and waits to be killed.
Usage: python -m tests.runner.fake_runner RUN_DIR TOXIPROXY_URL PROXY CONTAINER
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from drill import registry
from drill.api import FaultContext, FaultTargets, TargetInfo
from drill.rundir.journal import Event, Journal, process_start_time
from drill.runner import active
from drill.runner.reverts import RevertRecord, RevertStack
from drill.runner.watchdog import Watchdog


def main() -> None:
    run_dir, toxiproxy_url, proxy, container = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    journal = Journal(run_dir / "journal.jsonl")
    journal.write(Event.RUN_STARTED, run_id=run_dir.name, pid=os.getpid(), pid_start=process_start_time(os.getpid()))
    active.register(run_dir.name, run_dir)
    Watchdog(run_dir, heartbeat_timeout_s=60, lease_grace_s=600)
    target = TargetInfo(kind="openai", base_url="http://127.0.0.1:1", toxiproxy_url=toxiproxy_url)
    stack = RevertStack(journal)
    faults = [
        ("latency", "test_toxic_latency", {"proxy": proxy, "latency_ms": 50}),
        ("pause", "test_docker_pause", {"container": container}),
    ]
    for fault_id, kind, params in faults:
        cls = registry.faults.get(kind)
        fault = cls(cls.Params.model_validate(params))
        ctx = FaultContext(fault_id, target, FaultTargets())
        stack.push(
            RevertRecord(
                fault_id=fault_id,
                kind=kind,
                params=params,
                target=target,
                targets=FaultTargets(),
                planned_end_ts=time.time() + 600,
            ),
            lambda f=fault, c=ctx: f.revert(c),
        )
        fault.inject(ctx)
        journal.write(Event.FAULT_INJECTED, fault_id=fault_id, kind=kind)
        fault.verify(ctx)
    print("READY", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
