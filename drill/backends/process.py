"""Local process faults: SIGSTOP/SIGCONT, SIGKILL, found by PID, PID file or process name.

The fault-verification design of NVIDIA Dynamo (docs/fault-methods.md §1) reads a process's
state from ``/proc/<pid>/stat``: ``T`` while it is stopped, gone (or ``Z``) once it is killed.
Every wait here polls ``/proc`` and is bounded by ``timeout_s``; every failure raises
:class:`drill.errors.ProcessControlError` with the operation and a hint.

A process is identified by its PID *and* its start time (clock ticks since boot, field 22 of
``stat``), so a PID reused by another process after a crash is never signalled by mistake:
:class:`ProcessRef` carries both, and the signalling calls refuse a reference whose start time
no longer matches.
"""

from __future__ import annotations

import enum
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from drill.errors import ProcessControlError

__all__ = ["ProcState", "ProcessControl", "ProcessInfo", "ProcessRef", "read_pid_file"]

DEFAULT_TIMEOUT_S = 10.0
_POLL_S = 0.02
_PROC = Path("/proc")


class ProcState(str, enum.Enum):
    """The one-letter state of ``/proc/<pid>/stat`` (proc(5))."""

    RUNNING = "R"
    SLEEPING = "S"
    DISK_SLEEP = "D"
    STOPPED = "T"
    TRACING_STOP = "t"
    ZOMBIE = "Z"
    DEAD = "X"
    IDLE = "I"
    PARKED = "P"
    WAKEKILL = "K"
    WAKING = "W"

    @property
    def stopped(self) -> bool:
        """True for ``T`` (SIGSTOP) and ``t`` (ptrace stop)."""
        return self in (ProcState.STOPPED, ProcState.TRACING_STOP)

    @property
    def gone(self) -> bool:
        """True once the process has exited (a zombie waits only for its parent's ``wait``)."""
        return self in (ProcState.ZOMBIE, ProcState.DEAD)


@dataclass(frozen=True)
class ProcessRef:
    """A process that cannot be confused with a later one reusing its PID."""

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class ProcessInfo:
    """A snapshot of ``/proc/<pid>``: state, parent, start time (ticks), ``comm`` and command line."""

    pid: int
    state: ProcState
    ppid: int
    start_ticks: int
    comm: str
    cmdline: tuple[str, ...]

    @property
    def ref(self) -> ProcessRef:
        return ProcessRef(self.pid, self.start_ticks)


def read_stat(pid: int) -> ProcessInfo | None:
    """Parse ``/proc/<pid>/stat`` (and ``cmdline``); None when there is no such process."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
        cmdline = (_PROC / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as exc:
        raise ProcessControlError(f"read /proc/{pid}/stat: {exc}", operation="read stat") from exc
    head, _, tail = raw.rpartition(")")
    fields = tail.split()
    comm = head.split("(", 1)[1] if "(" in head else ""
    args = tuple(a.decode(errors="replace") for a in cmdline.split(b"\0") if a)
    return ProcessInfo(pid, _state(fields[0]), int(fields[1]), int(fields[19]), comm, args)


def _state(letter: str) -> ProcState:
    try:
        return ProcState(letter)
    except ValueError:
        return ProcState.SLEEPING


def read_pid_file(path: str | Path) -> int:
    """The PID written in ``path``; ProcessControlError when missing or not a number."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ProcessControlError(
            f"cannot read PID file {path}: {exc}",
            operation="read pid file",
            hint="is the replica running? the PID file is written when it starts",
        ) from exc
    if not text.isdigit():
        raise ProcessControlError(f"PID file {path} holds {text[:40]!r}, not a process id", operation="read pid file")
    return int(text)


class ProcessControl:
    """Signals local processes and watches their state; every wait is bounded by ``timeout_s`` seconds."""

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    def close(self) -> None:
        """Nothing to release (kept for the FaultContext backend protocol)."""

    # -- finding ---------------------------------------------------------------------------------
    @staticmethod
    def ref(pid: int, start_ticks: int) -> ProcessRef:
        """A reference rebuilt from saved numbers (e.g. by a revert that runs from the journal)."""
        return ProcessRef(pid, start_ticks)

    def info(self, pid: int) -> ProcessInfo | None:
        """A fresh snapshot of ``pid``; None once it no longer exists."""
        return read_stat(pid)

    def find(
        self, *, pid: int | None = None, pid_file: str | None = None, process_name: str | None = None
    ) -> ProcessInfo:
        """The one live process named by ``pid``, else ``pid_file``, else ``process_name``.

        ``process_name`` matches ``comm`` or the base name of ``argv[0]`` exactly, else a
        substring of the command line (like ``pgrep -f``); of a matching parent and its matching
        children, the parent is the one. Raises ProcessControlError when nothing (or, by name,
        more than one process) matches.
        """
        if pid is None and pid_file:
            pid = read_pid_file(pid_file)
        if pid is not None:
            return self._alive(pid, f"PID file {pid_file}" if pid_file else f"PID {pid}")
        if process_name:
            return self._by_name(process_name)
        raise ProcessControlError(
            "no PID, PID file or process name to find the process by",
            operation="find process",
            hint="give the replica a pid_file or process_name",
        )

    def _alive(self, pid: int, source: str) -> ProcessInfo:
        info = read_stat(pid)
        if info is None or info.state.gone:
            raise ProcessControlError(
                f"process {pid} (from {source}) is not running",
                operation="find process",
                hint="the replica may have exited; check that it is up",
            )
        return info

    def _by_name(self, name: str) -> ProcessInfo:
        me = os.getpid()
        live = [i for i in _all_processes() if i.pid != me and not i.state.gone]
        found = [i for i in live if _named(i, name)] or [i for i in live if _mentions(i, name)]
        if not found:
            raise ProcessControlError(
                f"no running process matches name {name!r}",
                operation="find process",
                hint="match is on comm, argv[0] or the command line (like pgrep -f)",
            )
        roots = [i for i in found if i.ppid not in {f.pid for f in found}]
        if len(roots) > 1:
            pids = ", ".join(str(i.pid) for i in roots[:8])
            raise ProcessControlError(
                f"{len(roots)} processes match name {name!r} (PIDs {pids})",
                operation="find process",
                hint="use a PID file, or a more specific name",
            )
        return roots[0]

    # -- signals ---------------------------------------------------------------------------------
    def send(self, ref: ProcessRef, sig: signal.Signals) -> bool:
        """Send ``sig`` to ``ref`` if it is still that process; False when it is gone (nothing sent)."""
        info = read_stat(ref.pid)
        if info is None or info.start_ticks != ref.start_ticks or info.state.gone:
            return False
        try:
            os.kill(ref.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError as exc:
            raise ProcessControlError(
                f"not allowed to send {sig.name} to process {ref.pid}: {exc}",
                operation=f"send {sig.name}",
                hint="run as the process's user or root",
            ) from exc
        return True

    def stop(self, ref: ProcessRef) -> ProcessInfo:
        """SIGSTOP ``ref`` and wait until ``/proc`` shows state ``T``; returns that snapshot."""
        if not self.send(ref, signal.SIGSTOP):
            raise ProcessControlError(f"process {ref.pid} is not running; nothing to stop", operation="SIGSTOP")
        info = self._wait(ref, lambda i: i is not None and i.state.stopped, "stopped (state T)")
        if info is None:  # the condition waited for needs a snapshot; _wait raises on timeout
            raise ProcessControlError(f"process {ref.pid} vanished while stopping", operation="SIGSTOP")
        return info

    def cont(self, ref: ProcessRef) -> bool:
        """SIGCONT ``ref`` and wait until it leaves state ``T``. Idempotent: False when it is gone."""
        if not self.send(ref, signal.SIGCONT):
            return False
        self._wait(ref, lambda i: i is None or not i.state.stopped, "running again (not state T)")
        return True

    def kill(self, ref: ProcessRef, sig: signal.Signals = signal.SIGKILL) -> bool:
        """Send ``sig`` (default SIGKILL) and wait until the process is gone; False if it already was."""
        if not self.send(ref, sig):
            return False
        if sig == signal.SIGKILL:
            self.send(ref, signal.SIGCONT)  # a stopped process dies of SIGKILL anyway; be explicit
        self.wait_gone(ref)
        return True

    # -- waiting ---------------------------------------------------------------------------------
    def wait_gone(self, ref: ProcessRef, timeout_s: float | None = None) -> None:
        """Wait until ``ref`` has exited (gone, zombie, or its PID reused)."""
        self._wait(ref, lambda i: i is None or i.state.gone or i.start_ticks != ref.start_ticks, "gone", timeout_s)

    def wait_new(
        self,
        old: ProcessRef,
        *,
        pid_file: str | None = None,
        process_name: str | None = None,
        timeout_s: float | None = None,
    ) -> ProcessInfo:
        """Wait until a live process other than ``old`` is found by ``pid_file``/``process_name``.

        Called after a kill to see the supervisor bring the replica back with a new PID.
        """
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        last = "nothing found"
        while True:
            try:
                info = self.find(pid_file=pid_file, process_name=process_name)
                if info.ref != old:
                    return info
                last = f"still the old process {old.pid}"
            except ProcessControlError as exc:
                last = exc.message
            if time.monotonic() >= deadline:
                raise ProcessControlError(
                    f"no new process replaced {old.pid} within {self._span(timeout_s):g}s ({last})",
                    operation="wait for restart",
                    hint="is a supervisor restarting it? (target capability 'supervisor')",
                )
            time.sleep(_POLL_S * 5)

    def _span(self, timeout_s: float | None) -> float:
        return self.timeout_s if timeout_s is None else timeout_s

    def _wait(
        self, ref: ProcessRef, done: Callable[[ProcessInfo | None], bool], what: str, timeout_s: float | None = None
    ) -> ProcessInfo | None:
        deadline = time.monotonic() + self._span(timeout_s)
        while True:
            info = read_stat(ref.pid)
            if done(info):
                return info
            if time.monotonic() >= deadline:
                state = info.state.value if info else "gone"
                raise ProcessControlError(
                    f"process {ref.pid} is not {what} after {self._span(timeout_s):g}s (state {state})",
                    operation=f"wait until {what}",
                )
            time.sleep(_POLL_S)


def _all_processes() -> list[ProcessInfo]:
    found = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            info = read_stat(int(entry.name))
            if info is not None:
                found.append(info)
    return found


def _named(info: ProcessInfo, name: str) -> bool:
    """Exact match on ``comm`` or the base name of ``argv[0]``."""
    return info.comm == name or bool(info.cmdline) and os.path.basename(info.cmdline[0]) == name


def _mentions(info: ProcessInfo, name: str) -> bool:
    """``name`` appears in the command line (``pgrep -f``); used when nothing is named exactly."""
    return bool(info.cmdline) and name in " ".join(info.cmdline)
