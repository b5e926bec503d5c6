"""What the real-server tests share (tests/llamacpp with llama.cpp's ``llama-server``, tests/vllm with vLLM's CPU
build): the tool from its machine-wide cache (scripts/cached_build.py), a server on a free loopback port under
``drill supervise`` (so a crash fault sees it come back), its health wait and stop, and running their folders last.

Those folders' tests run after the rest of the suite, so the background build or install ``./dev test`` starts has
the whole suite's time; the first of them waits for it (:func:`run_last`).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import httpx
import pytest

from drill.stack.lifeline import die_with_parent

REPO = Path(__file__).resolve().parents[1]


class ServerError(Exception):
    """The tool is not there, or a server did not come up; the message says why."""


# -- the tool ------------------------------------------------------------------------------------------------------


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py, imported for its cache's key, paths and wait."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def tool(variable: str, script: ModuleType, make: str, wait_s: float, say: Callable[[str], None] | None = None) -> Path:
    """``$variable`` when set, else the script's cached product: waited for while a background process makes it,
    made now (``script.<make>``) when none does; a recorded failure raises at once with its log's tail."""
    given = os.environ.get(variable)
    if given:
        if not os.access(given, os.X_OK):
            raise ServerError(f"{variable}={given} is not an executable file")
        return Path(given)
    cache = script.Cache.here()
    try:
        return script.cached_build.obtain(cache, lambda: getattr(script, make)(cache), wait_s, say)
    except script.cached_build.CacheError as exc:
        raise ServerError(f"no {cache.title} for these tests: {exc}\n{cache.what_to_do}".rstrip()) from exc


# -- a supervised server -------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


@dataclass
class SupervisedServer:
    """One server under ``drill supervise``: where it listens, its PID file and log. A subclass sets how long it
    may take to start and to stop."""

    url: str
    port: int
    pid_file: Path
    log: Path  # the server's own output, across restarts
    process: subprocess.Popen[bytes]  # the supervisor (``drill supervise``)

    start_timeout_s: ClassVar[float] = 60.0
    poll_s: ClassVar[float] = 0.05
    stop_timeout_s: ClassVar[float] = 15.0

    @property
    def pid(self) -> int:
        """The server's current PID (it changes when the supervisor restarts it)."""
        return int(self.pid_file.read_text(encoding="utf-8"))

    @property
    def upstream(self) -> str:
        return f"127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2.0, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float | None = None) -> float:
        """Seconds until ``/health`` answers 200; ServerError with the log's tail when it does not."""
        limit = self.start_timeout_s if timeout_s is None else timeout_s
        start = time.monotonic()
        while not self.healthy():
            if self.process.poll() is not None:
                raise ServerError(f"drill supervise exited ({self.process.returncode}):\n{self.log_tail()}")
            if time.monotonic() - start > limit:
                raise ServerError(f"{self.log.stem} not healthy after {limit:g} s:\n{self.log_tail()}")
            time.sleep(self.poll_s)
        return time.monotonic() - start

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log, lines)

    def stop(self) -> float:
        """SIGTERM to the supervisor (it stops the server the same way); seconds until it was gone."""
        start = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return time.monotonic() - start


def start_supervised(
    command: list[str], folder: Path, name: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``drill supervise -- COMMAND`` with its PID file ``<name>.pid`` and log ``<name>.log`` in ``folder``; not
    waited for. The supervisor and the server die with the test process (``die_with_parent``)."""
    folder.mkdir(parents=True, exist_ok=True)
    pid_file, log = folder / f"{name}.pid", folder / f"{name}.log"
    supervise = [sys.executable, "-m", "drill", "supervise", "--pid-file", str(pid_file), "--log", str(log), "--"]
    with open(folder / f"{name}.supervise.log", "ab") as out:
        process = subprocess.Popen(
            supervise + command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            preexec_fn=die_with_parent(),
        )
    return process, pid_file, log


# -- the folders' place in the run ---------------------------------------------------------------------------------


def run_last(items: list[pytest.Item], folder: Path, marks: tuple[pytest.MarkDecorator, ...], first_s: float) -> None:
    """Move the tests under ``folder`` to the end, in their order, mark them, and give the first ``first_s`` of
    time-out (it waits for the tool)."""
    ours = [item for item in items if folder in Path(str(item.path)).resolve().parents]
    if not ours:
        return
    moved = set(ours)
    items[:] = [item for item in items if item not in moved] + ours
    for item in ours:
        for mark in marks:
            item.add_marker(mark)
    ours[0].add_marker(pytest.mark.timeout(first_s))


def say(config: pytest.Config, tag: str, message: str) -> None:
    """A line in the terminal report (``[tag] message``), between the tests' dots."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"[{tag}] {message}")
