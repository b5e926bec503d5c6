"""The load-generator child process: Locust in library mode, running the open-loop generator.

Started by :class:`drill.load.driver.LoadDriver` as
``python -m drill.load.child.locustfile --control-fd N --parent-pid P`` (one local
runner, or a master that starts its own workers) and by ``drill worker`` as
``python -m drill.load.child.locustfile --worker --master HOST:PORT``. This module imports
Locust first (:mod:`drill.load.child.distributed`, imported after it, is the only other one that
does), so gevent's monkey-patching precedes every other import of the process (``docs/dependencies.md`` §1.2: a
client created before patching deadlocks). ``drill/__init__`` and
``drill/load/__init__`` run before it (``-m`` imports the packages); they load
only the standard library and create no socket, thread or client.

Life of the child: read the plan from the control channel, build the schedule,
start Locust (one :class:`DrillUser` per generating process, whose task runs
:meth:`OpenLoop.run`), say ``ready``, report ``status`` every half second, obey
burst and stop commands, answer with the summary, exit. If the harness dies
(the control socket reaches EOF, or the parent PID changes), the child stops its
load and exits at once; distributed workers started here die with it through
``PR_SET_PDEATHSIG``. (The harness side does not rely on ``PR_SET_PDEATHSIG``
because it fires when the *thread* that forked the child exits.)

Diagnostics: with ``DRILL_LOAD_PROFILE=/path/prefix`` in the environment each load process
runs under cProfile and writes ``/path/prefix.<pid>`` when it exits.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import NoReturn

import gevent
import locust  # noqa: F401  (must stay the first import: gevent monkey-patching)
from gevent.event import AsyncResult
from locust import User, constant, task
from locust.env import Environment

from drill.load.child.bursts import BurstParams
from drill.load.child.distributed import AttemptListener, MasterController, run_worker
from drill.load.child.openloop import OpenLoop
from drill.load.child.sinks import FileSink
from drill.load.control import STATUS_INTERVAL_S, Channel, GeneratorPlan, Msg

__all__ = ["DrillUser", "LocalController", "main"]

_PARENT_POLL_S = 0.2
_LOOP = AsyncResult()  # the process's OpenLoop, set once the plan is known (module state of the child only)


class DrillUser(User):
    """The one Locust user per generating process. It only idles: the open-loop generator runs on a greenlet of
    its own (:func:`provide_loop`), because Locust may stop a user at any time — a master redistributes its users
    when a worker that missed heartbeats on a loaded machine comes back — and the arrivals must not die with it."""

    wait_time = constant(0)

    @task
    def generate(self) -> None:
        loop: OpenLoop = _LOOP.get()
        while not loop.stopping.is_set():
            loop.stopping.wait(3600)
        gevent.sleep(3600)


def provide_loop(loop: OpenLoop) -> None:
    """Start the process's generator on its own greenlet, whatever Locust does with :class:`DrillUser` (called
    once the plan is applied; the generator waits for the run's start itself)."""
    quiet_gc()
    _LOOP.set(loop)
    gevent.spawn(loop.run)


def quiet_gc() -> None:
    """Keep the cyclic garbage collector from pausing every stream at once.

    A full collection walks every tracked object: with Locust, gevent and the schedule loaded
    that stalls the event loop for tens of milliseconds, and every chunk arriving meanwhile
    gets a late timestamp. What start-up built is moved out of the collector's reach
    (``gc.freeze``) and young collections run less often (objects made per request are few
    and short-lived; reference counting frees them).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def locust_event(env: Environment) -> AttemptListener:
    """A callback feeding Locust's own statistics (one entry per attempt, named by pool)."""

    def fire(pool: str, e2e_ms: float, error: str | None) -> None:
        env.events.request.fire(
            request_type="POST",
            name=pool,
            response_time=e2e_ms,
            response_length=0,
            exception=Exception(error) if error else None,
            context={},
        )

    return fire


class LocalController:
    """Commands of the harness applied to the single local runner."""

    def __init__(self, plan: GeneratorPlan) -> None:
        self.env = Environment(user_classes=[DrillUser])
        self.sink = FileSink(Path(plan.run_dir))
        self.loop = OpenLoop(plan, self.sink, on_attempt=locust_event(self.env))
        self.runner = self.env.create_local_runner()
        self.loop.set_start(time.time() + plan.start_lead_s)
        provide_loop(self.loop)
        self.runner.start(1, spawn_rate=1)
        self.started_mono = time.monotonic()

    def ready_info(self) -> dict:
        return {"t0": self.loop.t0_wall, "scheduled": self.loop.counters.scheduled, "workers": 0}

    def status(self) -> dict:
        bursts = {b: burst.status() for b, burst in self.loop.bursts.items()}
        return {"counters": self.loop.counters.snapshot(), "bursts": bursts, "offset_s": self.loop.offset_now()}

    def start_burst(self, params: BurstParams) -> None:
        self.loop.start_burst(params)

    def end_burst(self, burst_id: str) -> None:
        self.loop.end_burst(burst_id)

    def burst_status(self, burst_id: str) -> dict:
        return self.loop.burst_status(burst_id)

    def stop(self, drain_s: float) -> dict:
        cancelled = self.loop.drain(drain_s)
        self.runner.quit()
        self.sink.close()
        counters = self.loop.counters.snapshot()
        return {
            "counters": counters,
            "cancelled": cancelled,
            "records_written": self.sink.written,
            "samples_written": self.sink.samples_written,
            "records_lost": counters["records"] - self.sink.written,
            "elapsed_s": max(0.0, self.loop.offset_now()),
            "workers": 0,
            "bursts": {b: burst.status() for b, burst in self.loop.bursts.items()},
        }

    def abort(self) -> None:
        self.loop.stopping.set()
        self.sink.flush()


_Controller = LocalController | MasterController  # the harness's commands, for one process or for workers


def serve(channel: Channel, controller: _Controller) -> None:
    """Apply the harness's commands until ``stop``; then send the summary."""
    reporter = gevent.spawn(_report_status, channel, controller)
    while True:
        msg = channel.recv()
        if msg is None:
            _abandoned(controller, "the control channel closed")
        kind = Msg(msg["type"])
        if kind is Msg.START_BURST:
            controller.start_burst(BurstParams.from_dict(msg))
        elif kind is Msg.END_BURST:
            controller.end_burst(str(msg["burst_id"]))
        elif kind is Msg.BURST_STATUS:
            channel.send(Msg.REPLY, id=msg["id"], value=controller.burst_status(str(msg["burst_id"])))
        elif kind is Msg.STOP:
            summary = controller.stop(float(msg.get("drain_s", 30.0)))
            reporter.kill(block=False)
            channel.send(Msg.SUMMARY, **summary)
            return


def _report_status(channel: Channel, controller: _Controller) -> None:
    while True:
        gevent.sleep(STATUS_INTERVAL_S)
        try:
            channel.send(Msg.STATUS, **controller.status())
        except OSError:
            return


def _watch_parent(parent_pid: int, controller: _Controller) -> None:
    while True:
        gevent.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            _abandoned(controller, f"the parent process {parent_pid} is gone")


def _abandoned(controller: _Controller, why: str) -> NoReturn:
    """The harness is gone: stop generating load now and exit (no drain)."""
    logging.getLogger("drill.load").error("stopping load: %s", why)
    try:
        controller.abort()
    finally:
        os._exit(3)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """``prctl(PR_SET_PDEATHSIG, sig)`` on Linux: the kernel signals us when our parent exits."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, sig, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG


def _run_controlled(control_fd: int, parent_pid: int) -> int:
    channel = Channel(socket.socket(fileno=control_fd))
    msg = channel.recv()
    if msg is None or msg.get("type") != Msg.PLAN.value:
        return 2
    plan = GeneratorPlan.from_dict(msg["plan"])
    try:
        distributed = plan.workers > 0 or plan.expect_remote_workers > 0
        controller = MasterController(plan, DrillUser) if distributed else LocalController(plan)
    except Exception as exc:  # noqa: BLE001 - reported to the harness, which raises LoadError
        logging.getLogger("drill.load").exception("the load generator could not start")
        channel.send(Msg.ERROR, message=f"{type(exc).__name__}: {exc}")
        return 1
    gevent.spawn(_watch_parent, parent_pid, controller)
    channel.send(Msg.READY, **controller.ready_info())
    serve(channel, controller)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drill.load.child.locustfile")
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--parent-pid", type=int)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--master", help="HOST:PORT of the master (with --worker)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.worker:
        if args.parent_pid:
            die_with_parent()
            if os.getppid() != args.parent_pid:
                return 3
        host, _, port = (args.master or "").rpartition(":")
        return run_worker(host or "127.0.0.1", int(port), DrillUser, provide_loop, locust_event)
    if args.control_fd is None or args.parent_pid is None:
        parser.error("--control-fd and --parent-pid are required (or --worker --master HOST:PORT)")
    return _run_controlled(args.control_fd, args.parent_pid)


if __name__ == "__main__":
    if os.environ.get("DRILL_LOAD_PROFILE"):
        import cProfile

        prof = cProfile.Profile()
        code = prof.runcall(main)
        prof.dump_stats(os.environ["DRILL_LOAD_PROFILE"] + f".{os.getpid()}")
        sys.exit(code)
    sys.exit(main())
