"""Distributed load: a Locust master with N worker processes (one per core), or remote workers.

Runs inside the load-generator child only (imported by
:mod:`drill.load.child.locustfile` after Locust). The master never generates load:
it binds its ZeroMQ port, starts ``plan.workers`` local workers (and waits for
``plan.expect_remote_workers`` more started with ``drill worker --master
HOST:PORT``), then sends each worker the plan, its share of the schedule
(round robin by worker, :meth:`Schedule.partition`) and the common start time
(wall clock, shared by every process on a host; NTP-close across hosts).

Records travel to the master with ``events.report_to_master`` every
``REPORT_INTERVAL_S`` and, at stop, in one final ``drill_drained`` message per
worker that also carries how many records the worker made, so the master can
tell whether any were lost (``docs/dependencies.md`` §1.5: custom request fields
are not forwarded by Locust itself).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import locust.runners
from gevent.event import Event
from locust.env import Environment
from locust.rpc.protocol import Message
from locust.runners import WorkerRunner

from drill.load.child.bursts import BurstParams
from drill.load.child.openloop import OpenLoop
from drill.load.child.sinks import BatchSink, FileSink
from drill.load.control import GeneratorPlan
from drill.load.tokenizing import shapes_from_text

__all__ = ["MasterController", "run_worker", "REPORT_INTERVAL_S"]

#: How often workers ship records to the master (s); Locust's default is 3 s.
REPORT_INTERVAL_S = 0.5
_CONNECT_TIMEOUT_S = 60.0  # local workers
_REMOTE_CONNECT_TIMEOUT_S = 600.0  # when remote workers are expected (someone has to start them)
_FINAL_MARGIN_S = 15.0
_log = logging.getLogger("drill.load")


class MasterController:
    """The master side: starts workers, forwards commands, writes the records they ship."""

    def __init__(self, plan: GeneratorPlan, user_class: type) -> None:
        self.plan = plan
        self.env = Environment(user_classes=[user_class])
        host, _, port = plan.master_bind.rpartition(":")
        self.runner = self.env.create_master_runner(host or "127.0.0.1", int(port or 0))
        self.sink = FileSink(Path(plan.run_dir))
        self.received: Counter = Counter()
        self.latest: dict[str, dict] = {}
        self.finals: dict[str, dict] = {}
        self.all_drained = Event()
        self.env.events.worker_report.add_listener(self._on_report)
        self.runner.register_message("drill_drained", self._on_drained)
        self.procs = [self._spawn_worker(i) for i in range(plan.workers)]
        self.clients = self._await_workers(plan.workers + plan.expect_remote_workers)
        self.t0 = time.time() + plan.start_lead_s + 0.2
        self._send_plans()
        gevent.spawn(self.runner.start, len(self.clients), len(self.clients))

    @property
    def port(self) -> int:
        return self.runner.server.port

    def _spawn_worker(self, index: int) -> subprocess.Popen:
        log = open(Path(self.plan.run_dir) / f"load-worker-{index}.log", "ab")
        cmd = [
            sys.executable,
            "-m",
            "drill.load.child.locustfile",
            "--worker",
            "--master",
            f"127.0.0.1:{self.port}",
            "--parent-pid",
            str(os.getpid()),
        ]
        try:
            return subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        finally:
            log.close()

    def _await_workers(self, count: int) -> list[str]:
        limit = _REMOTE_CONNECT_TIMEOUT_S if self.plan.expect_remote_workers else _CONNECT_TIMEOUT_S
        deadline = time.monotonic() + limit
        while self.runner.worker_count < count:
            if time.monotonic() > deadline:
                self.abort()
                raise RuntimeError(
                    f"only {self.runner.worker_count} of {count} load workers connected to the master "
                    f"on port {self.port} within {limit:g}s"
                )
            if any(p.poll() is not None for p in self.procs):
                self.abort()
                raise RuntimeError("a load worker exited before connecting; see load-worker-*.log in the run directory")
            gevent.sleep(0.05)
        return sorted(self.runner.clients)

    def _send_plans(self) -> None:
        # The fitted prompts travel with the plan: a remote worker cannot read this machine's run directory.
        prompts = Path(self.plan.prompts_file).read_text(encoding="utf-8") if self.plan.prompts_file else None
        for index, client_id in enumerate(self.clients):
            self.runner.send_message(
                "drill_plan",
                {
                    "plan": self.plan.to_dict(),
                    "prompts": prompts,
                    "partition": [index, len(self.clients)],
                    "t0": self.t0,
                    "worker": f"w{index}",
                },
                client_id=client_id,
            )

    def ready_info(self) -> dict:
        return {"t0": self.t0, "workers": len(self.clients), "master_port": self.port}

    def _on_report(self, client_id: str, data: dict) -> None:
        payload = data.get("drill")
        if payload:
            self._absorb(client_id, payload)

    def _on_drained(self, environment: Environment, msg: Message, **kwargs: Any) -> None:  # a locust message handler
        self._absorb(msg.node_id, msg.data)
        self.finals[msg.node_id] = msg.data
        if set(self.clients) <= set(self.finals):
            self.all_drained.set()

    def _absorb(self, client_id: str, payload: dict) -> None:
        records, samples = payload.get("records") or [], payload.get("samples") or []
        self.sink.add_many(records, samples)
        self.received[client_id] += len(records)
        self.latest[client_id] = payload

    def status(self) -> dict:
        counters: Counter = Counter()
        errors: Counter = Counter()
        for payload in self.latest.values():
            c = payload.get("counters") or {}
            errors.update(c.get("errors") or {})
            counters.update({k: v for k, v in c.items() if k != "errors"})
        return {
            "counters": {**counters, "errors": dict(errors)},
            "bursts": self._bursts(),
            "offset_s": time.time() - self.t0,
        }

    def _bursts(self) -> dict:
        merged: dict[str, dict] = {}
        for payload in self.latest.values():
            for burst_id, st in (payload.get("bursts") or {}).items():
                m = merged.setdefault(burst_id, {"active": 0, "sent": 0, "offered_rate": 0.0})
                m["active"] = max(m["active"], st["active"])
                m["sent"] += st["sent"]
                m["offered_rate"] = round(m["offered_rate"] + st["offered_rate"], 3)
        return merged

    def start_burst(self, params: BurstParams) -> None:
        self.runner.send_message("drill_burst", {"action": "start", **params.__dict__, "pools": list(params.pools)})

    def end_burst(self, burst_id: str) -> None:
        self.runner.send_message("drill_burst", {"action": "end", "burst_id": burst_id})

    def burst_status(self, burst_id: str) -> dict:
        """As of the workers' latest reports (at most ``REPORT_INTERVAL_S`` old)."""
        return self._bursts().get(burst_id, {"active": 0, "sent": 0, "offered_rate": 0.0})

    def stop(self, drain_s: float) -> dict:
        self.runner.send_message("drill_drain", {"drain_s": drain_s})
        if not self.all_drained.wait(drain_s + _FINAL_MARGIN_S):
            _log.error("workers %s sent no final report", sorted(set(self.clients) - set(self.finals)))
        self.runner.quit()
        self.sink.close()
        self._reap()
        return self._summary()

    def _summary(self) -> dict:
        status = self.status()
        made = sum(int((f.get("counters") or {}).get("records", 0)) for f in self.finals.values())
        missing = [c for c in self.clients if c not in self.finals]
        made += sum(int((self.latest.get(c, {}).get("counters") or {}).get("records", 0)) for c in missing)
        return {
            "counters": status["counters"],
            "cancelled": sum(int(f.get("cancelled", 0)) for f in self.finals.values()),
            "records_written": self.sink.written,
            "samples_written": self.sink.samples_written,
            "records_lost": max(0, made - sum(self.received.values())),
            "elapsed_s": time.time() - self.t0,
            "workers": len(self.clients),
            "workers_without_final_report": len(missing),
            "bursts": self._bursts(),
        }

    def _reap(self) -> None:
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def abort(self) -> None:
        """Emergency stop: kill the local workers, keep what arrived."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        self.sink.flush()


AttemptListener = Callable[[str, float, str | None], None]  # OpenLoop's on_attempt: pool, e2e ms, error class


def run_worker(
    host: str,
    port: int,
    user_class: type,
    provide_loop: Callable[[OpenLoop], None],
    locust_event: Callable[[Environment], AttemptListener],
) -> int:
    """Connect to the master at ``host:port`` and generate this worker's share until the master quits."""
    locust.runners.WORKER_REPORT_INTERVAL = REPORT_INTERVAL_S
    env = Environment(user_classes=[user_class])
    runner = env.create_worker_runner(host, port)
    state = _WorkerState(env, runner, provide_loop, locust_event)
    runner.register_message("drill_plan", state.on_plan)
    runner.register_message("drill_burst", state.on_burst)
    runner.register_message("drill_drain", state.on_drain, concurrent=True)
    env.events.report_to_master.add_listener(state.on_report)
    runner.greenlet.join()
    return 0


class _WorkerState:
    def __init__(
        self,
        env: Environment,
        runner: WorkerRunner,
        provide_loop: Callable[[OpenLoop], None],
        locust_event: Callable[[Environment], AttemptListener],
    ) -> None:
        self.env, self.runner = env, runner
        self.provide_loop, self.locust_event = provide_loop, locust_event
        self.sink = BatchSink()
        self.loop: OpenLoop | None = None

    def on_plan(self, environment: Environment, msg: Message, **kwargs: Any) -> None:
        data = msg.data
        plan = GeneratorPlan.from_dict(data["plan"])
        prompts = data.get("prompts")
        self.loop = OpenLoop(
            plan,
            self.sink,
            partition=(int(data["partition"][0]), int(data["partition"][1])),
            worker=str(data["worker"]),
            on_attempt=self.locust_event(self.env),
            shapes=shapes_from_text(prompts) if prompts else None,
        )
        self.loop.set_start(float(data["t0"]))
        self.provide_loop(self.loop)

    def on_burst(self, environment: Environment, msg: Message, **kwargs: Any) -> None:
        if self.loop is None:
            return
        if msg.data["action"] == "start":
            self.loop.start_burst(BurstParams.from_dict(msg.data))
        else:
            self.loop.end_burst(str(msg.data["burst_id"]))

    def on_report(self, client_id: str, data: dict) -> None:
        if self.loop is not None:
            data["drill"] = self._payload()

    def on_drain(self, environment: Environment, msg: Message, **kwargs: Any) -> None:
        cancelled = self.loop.drain(float(msg.data["drain_s"])) if self.loop is not None else 0
        payload = self._payload() if self.loop is not None else {"records": [], "samples": [], "counters": {}}
        self.runner.send_message("drill_drained", {**payload, "cancelled": cancelled})

    def _payload(self) -> dict:
        assert self.loop is not None  # called once a plan has arrived
        records, samples = self.sink.take()
        bursts = {b: burst.status() for b, burst in self.loop.bursts.items()}
        return {"records": records, "samples": samples, "counters": self.loop.counters.snapshot(), "bursts": bursts}
