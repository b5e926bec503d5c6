"""The stack's supervisor: ``python -m drill.stack.supervision.supervisor --plan PLAN.json``.

Started detached (its own session, so a terminal's Ctrl-C does not reach it) by
:func:`drill.stack.supervision.launcher.start_stack`, it applies a
:class:`~drill.stack.supervision.stack_plan.StackPlan`:
Toxiproxy (its own server, unless the plan names an external one), the proxies, the replicas
(local processes, or one container each), then the router. It then restarts any local replica or
router that exits (with a backoff from 0.2 s doubling to 5 s while it keeps dying young); Docker
restarts crashed containers itself (``restart_policy: on-failure``). On SIGTERM/SIGINT/SIGHUP it
stops everything it started and deletes its proxies, then exits 0.

It never leaves orphans: every child gets PR_SET_PDEATHSIG (SIGKILL) so it dies with the
supervisor even when the supervisor is SIGKILLed, and containers hold the supervisor's lifeline
socket (:mod:`drill.stack.supervision.container_entry`). Progress goes to ``supervisor.status.json`` in the
run directory (``starting`` → ``ready`` | ``failed`` → ``stopped``) and the log to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from drill.backends.toxiproxy import NewProxy, ToxiproxyClient, ToxiproxyServer
from drill.errors import DrillError
from drill.stack.config import Runtime
from drill.stack.interconnect.affinity import pinned_preexec
from drill.stack.lifeline import die_with_parent
from drill.stack.supervision.stack_plan import StackPlan

__all__ = ["Supervisor", "main"]

log = logging.getLogger("drill.stack.supervisor")
_TICK_S = 0.1
_BACKOFF_MIN_S, _BACKOFF_MAX_S, _YOUNG_S = 0.2, 5.0, 10.0
_STOP_GRACE_S = 5.0


@dataclass
class Child:
    """One supervised local process and its restart bookkeeping."""

    name: str
    argv: list[str]
    log_path: Path
    pid_file: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff_s: float = _BACKOFF_MIN_S
    restart_at: float | None = None
    own_group: bool = False  # in a process group of its own, whose rest dies with it (reap_group); drill supervise

    def spawn(self) -> None:
        """Start (or restart) the process, dying with the supervisor; writes the pid file."""
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),
                process_group=0 if self.own_group else None,
            )
        self.started_at, self.restart_at = time.monotonic(), None
        if self.pid_file is not None:
            self.pid_file.write_text(str(self.process.pid), encoding="utf-8")
        log.info("started %s (pid %d)", self.name, self.process.pid)

    def check(self, now: float) -> None:
        """Called every tick: notice an exit and restart after the backoff."""
        if self.restart_at is not None:
            if now >= self.restart_at:
                self.restarts += 1
                self.spawn()
            return
        if self.process is None or self.process.poll() is None:
            return
        self.reap_group()
        young = now - self.started_at < _YOUNG_S
        self.backoff_s = min(_BACKOFF_MAX_S, self.backoff_s * 2) if young else _BACKOFF_MIN_S
        self.restart_at = now + self.backoff_s
        log.warning("%s exited with code %s; restarting in %.1fs", self.name, self.process.returncode, self.backoff_s)

    def terminate(self) -> None:
        """Send SIGTERM (no wait)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def reap_group(self) -> None:
        """SIGKILL what is left of the exited process's group: the workers it started, which outlive it when it
        is SIGKILLed (vLLM's engine core after its API server's ``replica_crash``: still running, and on a GPU
        holding the memory the restarted server needs). A container's or a systemd unit's processes go with its
        main process the same way. Only for a child in a group of its own (``own_group``)."""
        if self.process is None or not self.own_group:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # nothing left in the group
            pass


@dataclass
class Supervisor:
    """Applies one plan and watches it until told to stop."""

    plan: StackPlan
    children: list[Child] = field(default_factory=list)
    stopping: bool = False
    toxiproxy: ToxiproxyServer | None = None
    lifeline: socket.socket | None = None
    held: list[socket.socket] = field(default_factory=list)
    _docker: object | None = None

    def run(self) -> int:
        """Start everything, supervise until a stop signal, tear down. Returns the exit code."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        code = 0
        try:
            self._status("starting")
            self._start_all()
            self._status("ready")
            while not self.stopping:
                self._tick()
                time.sleep(_TICK_S)
        except Exception as exc:  # the process boundary: record any failure, then tear down
            log.exception("stack failed: %s", exc)
            self._status("failed", error=str(exc))
            code = 1
        finally:
            self._shutdown()
            self._status("stopped" if code == 0 else "failed", error=None if code == 0 else "see supervisor.log")
        return code

    def _on_signal(self, signum: int, frame: object) -> None:
        log.info("signal %s: stopping the stack", signal.Signals(signum).name)
        self.stopping = True

    def _status(self, state: str, error: str | None = None) -> None:
        path = self.plan.status_path
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"state": state, "error": error, "pid": os.getpid(), "updated": time.time()}))
        os.replace(tmp, path)

    # -- start ---------------------------------------------------------------------------------
    def _start_all(self) -> None:
        self._start_toxiproxy()
        self._make_proxies()
        if self.plan.state.runtime is Runtime.DOCKER:
            self._start_containers()
        else:
            for launch in self.plan.replica_launches:
                self._add_child(
                    launch.name,
                    [
                        self.plan.python,
                        "-m",
                        "drill.stack.replica.api_server",
                        "--launch",
                        str(self.plan.launch_path(launch.name)),
                    ],
                    self.plan.state.replicas[launch.index].pid_file,
                )
        self._add_child(
            "router",
            [self.plan.python, "-m", "drill.stack.router.gateway", "--launch", str(self.plan.launch_path("router"))],
            self.plan.run_dir / "router.pid",
        )

    def _add_child(self, name: str, argv: list[str], pid_file: Path | None) -> None:
        child = Child(name, argv, self.plan.run_dir / f"{name}.out.log", pid_file)
        child.spawn()
        self.children.append(child)

    def _start_toxiproxy(self) -> None:
        if self.plan.toxiproxy_port is None:
            return
        self.toxiproxy = ToxiproxyServer(
            port=self.plan.toxiproxy_port,
            host=self.plan.router_launch.host,
            log_path=self.plan.run_dir / "toxiproxy.log",
            preexec_fn=pinned_preexec(die_with_parent()),  # on the TP/PP links' CPU (interconnect.affinity)
        )
        self.toxiproxy.start()
        log.info("toxiproxy-server at %s (pid %s)", self.toxiproxy.url, self.toxiproxy.pid)

    def _make_proxies(self) -> None:
        if not self.plan.proxies:
            return
        with ToxiproxyClient(self.plan.state.toxiproxy_url) as client:
            client.populate(NewProxy(name=p.name, upstream=p.upstream, listen=p.listen) for p in self.plan.proxies)
        log.info("created %d proxies", len(self.plan.proxies))

    def _start_containers(self) -> None:
        # lazy: the Docker SDK (~0.3 s to import) loads only for a stack of containers
        from drill.backends.docker import DockerBackend
        from drill.stack.supervision.docker_runtime import start_replica_container

        assert self.plan.lifeline_port is not None
        self.lifeline = socket.create_server((self.plan.router_launch.host, self.plan.lifeline_port), backlog=64)
        self.lifeline.setblocking(False)
        backend = DockerBackend(timeout_s=30)
        self._docker = backend
        for launch in self.plan.replica_launches:
            info = start_replica_container(backend, self.plan, launch.index)
            self.plan.state.replicas[launch.index].pid_file.write_text(str(info.pid), encoding="utf-8")
            log.info("started container %s (pid %d)", info.name, info.pid)

    # -- watch ---------------------------------------------------------------------------------
    def _tick(self) -> None:
        now = time.monotonic()
        for child in self.children:
            child.check(now)
        self._accept_lifelines()

    def _accept_lifelines(self) -> None:
        while self.lifeline is not None:
            try:
                conn, _ = self.lifeline.accept()
            except BlockingIOError:
                return
            self.held.append(conn)  # held open: its closing tells the container we are gone

    # -- stop ----------------------------------------------------------------------------------
    def _shutdown(self) -> None:
        for child in self.children:
            child.terminate()
        self._reap_children()
        self._remove_containers()
        for conn in [*self.held, *([self.lifeline] if self.lifeline else [])]:
            conn.close()
        self._remove_proxies()
        if self.toxiproxy is not None:
            self.toxiproxy.stop()

    def _reap_children(self) -> None:
        deadline = time.monotonic() + _STOP_GRACE_S
        for child in self.children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM; killing it", child.name)
                child.process.kill()
                child.process.wait()
            child.reap_group()

    def _remove_containers(self) -> None:
        if self._docker is None:
            return
        # lazy: the Docker SDK (~0.3 s to import) loads only for a stack of containers
        from drill.stack.supervision.docker_runtime import remove_stack_containers

        try:
            remove_stack_containers(self._docker, self.plan.state.name)  # type: ignore[arg-type]
        except DrillError as exc:
            log.error("could not remove containers: %s", exc)

    def _remove_proxies(self) -> None:
        if self.toxiproxy is not None or not self.plan.proxies:
            return  # our own server goes away with its proxies
        try:
            with ToxiproxyClient(self.plan.state.toxiproxy_url) as client:
                for proxy in self.plan.proxies:
                    client.delete_proxy(proxy.name)
        except DrillError as exc:
            log.error("could not delete proxies: %s", exc)


def main(argv: list[str] | None = None) -> int:
    """Entry point: exit 0 after a clean stop, 1 when the stack failed to start."""
    parser = argparse.ArgumentParser(prog="python -m drill.stack.supervision.supervisor")
    parser.add_argument("--plan", required=True, type=Path, help="StackPlan JSON written by the launcher")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s supervisor %(levelname)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    plan = StackPlan.model_validate_json(args.plan.read_text(encoding="utf-8"))
    return Supervisor(plan).run()


if __name__ == "__main__":
    sys.exit(main())
