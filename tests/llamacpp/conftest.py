"""A real llama.cpp ``llama-server`` for the tests in this folder: its binary, a tiny model, a running server.

Fixtures (names are stable; other test files build on them):

- ``llama_server_bin`` (session): the ``llama-server`` binary. ``LLAMA_SERVER_BIN`` when set, else the cached build of
  ``scripts/llama_server.py``; a build still running (``./dev test`` starts one in the background) is waited for,
  none at all is built now. A failed build fails the tests with its log's tail (and is not retried); they never
  skip.
- ``llama_model`` (session): :class:`tests.llamacpp.model.ModelFiles` of the ``gpt2-1024`` tokenizer's model.
- ``llama_server`` (session): a server on a free loopback port, under ``drill supervise`` (it comes back after a
  crash), with ``--metrics``, ``--slots``, 4 slots, 8192 tokens of context and ``--ignore-eos`` (a random model
  would otherwise stop at a random end-of-turn token). A test that crashes or pauses it leaves it healthy.
- ``llama_server_factory`` (session): ``start(tokenizer="llama3-1280", parallel=2, ctx=4096)`` for another server;
  servers are kept per configuration for the session and stopped at its end.

These tests run last (``./dev test`` builds the binary meanwhile) and are marked ``llamacpp`` and ``integration``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from drill.stack.lifeline import die_with_parent
from tests.llamacpp.model import ModelFiles, make_model

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BUILD_WAIT_S = 2400.0  # a cold build at nice 19 beside the rest of the suite on two cores
START_TIMEOUT_S = 60.0


def _build_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llama_server_build", REPO / "scripts" / "llama_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


# -- ordering and markers --------------------------------------------------------------------------------------


def _here(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).resolve().parents


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """This folder's tests run last, so a background build has the whole suite's time; the first waits for it."""
    ours = [item for item in items if _here(item)]
    if not ours:
        return
    items[:] = [item for item in items if not _here(item)] + ours
    for item in ours:
        item.add_marker(pytest.mark.llamacpp)
        item.add_marker(pytest.mark.integration)
    ours[0].add_marker(pytest.mark.timeout(BUILD_WAIT_S + 300))


# -- the binary --------------------------------------------------------------------------------------------------


def _say(config: pytest.Config, message: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"[llamacpp] {message}")


@pytest.fixture(scope="session")
def llama_server_bin(pytestconfig: pytest.Config) -> Path:
    given = os.environ.get("LLAMA_SERVER_BIN")
    if given:
        if not os.access(given, os.X_OK):
            pytest.fail(f"LLAMA_SERVER_BIN={given} is not an executable file", pytrace=False)
        return Path(given)
    script = _build_script()
    cache = script.Cache.here()
    try:
        if cache.built():
            return cache.binary
        if cache.building() or cache.status().get("state") == "queued":
            _say(pytestconfig, f"waiting for the llama-server build running in the background (log {cache.log})")
            started = time.monotonic()
            binary = script.wait(cache, BUILD_WAIT_S)
            _say(pytestconfig, f"llama-server built after a {time.monotonic() - started:.0f} s wait")
            return binary
        if cache.status().get("state") == "failed":  # not retried here: it would fail again, minutes later
            raise script.BuildError(
                f"the llama-server build failed: {cache.status().get('error')}\n{cache.log_tail()}\n"
                "fix the cause, then ./dev setup (or python3 scripts/llama_server.py build) builds it again"
            )
        _say(pytestconfig, f"building llama-server now (about 7 minutes of CPU; log {cache.log})")
        return script.build(cache)
    except script.BuildError as exc:
        pytest.fail(f"no llama-server for the llama.cpp tests: {exc}", pytrace=False)


# -- the model ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def llama_models(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], ModelFiles]:
    """``model(tokenizer_name)``: the model files of one tokenizer of :data:`tests.llamacpp.model.TOKENIZERS`."""
    made: dict[str, ModelFiles] = {}
    folder = tmp_path_factory.mktemp("llamacpp-models")

    def model(tokenizer: str) -> ModelFiles:
        if tokenizer not in made:
            made[tokenizer] = make_model(folder, tokenizer)
        return made[tokenizer]

    return model


@pytest.fixture(scope="session")
def llama_model(llama_models: Callable[[str], ModelFiles]) -> ModelFiles:
    return llama_models("gpt2-1024")


# -- the server --------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LlamaServer:
    """One supervised ``llama-server``: where it listens, its PID file, its model and logs."""

    url: str
    port: int
    pid_file: Path
    log: Path  # the server's own output, across restarts
    model: ModelFiles
    process: subprocess.Popen[bytes]  # the supervisor (``drill supervise``)
    parallel: int
    ctx: int

    @property
    def pid(self) -> int:
        """The server's current PID (it changes when the supervisor restarts it)."""
        return int(self.pid_file.read_text(encoding="utf-8"))

    @property
    def model_path(self) -> Path:
        return self.model.gguf

    @property
    def tokenizer_json(self) -> Path:
        return self.model.tokenizer_json

    @property
    def alias(self) -> str:
        """The model name the server reports and answers to."""
        return f"tiny-{self.model.tokenizer.name}"

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2.0, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Seconds until ``/health`` answers 200; fails the test with the log's tail when it does not."""
        start = time.monotonic()
        while not self.healthy():
            if self.process.poll() is not None:
                pytest.fail(f"drill supervise exited ({self.process.returncode}):\n{self.log_tail()}", pytrace=False)
            if time.monotonic() - start > timeout_s:
                pytest.fail(f"llama-server not healthy after {timeout_s:g} s:\n{self.log_tail()}", pytrace=False)
            time.sleep(0.05)
        return time.monotonic() - start

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {self.log})"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def server_command(binary: Path, model: ModelFiles, port: int, parallel: int, ctx: int) -> list[str]:
    return [
        str(binary),
        "--model",
        str(model.gguf),
        "--alias",
        f"tiny-{model.tokenizer.name}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(ctx),
        "--parallel",
        str(parallel),
        "--threads",
        "1",
        "--threads-batch",
        "1",
        "--metrics",
        "--slots",
        "--ignore-eos",
        "--no-webui",
        "--no-warmup",
    ]


def start_server(binary: Path, model: ModelFiles, folder: Path, parallel: int = 4, ctx: int = 8192) -> LlamaServer:
    """``llama-server`` under ``drill supervise`` on a free port, healthy."""
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    pid_file, log = folder / f"llama-server-{port}.pid", folder / f"llama-server-{port}.log"
    supervise = [sys.executable, "-m", "drill", "supervise", "--pid-file", str(pid_file), "--log", str(log), "--"]
    with open(folder / f"supervise-{port}.log", "ab") as out:
        process = subprocess.Popen(
            supervise + server_command(binary, model, port, parallel, ctx),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            preexec_fn=die_with_parent(),  # a killed pytest leaves no server behind (the server dies with it too)
        )
    server = LlamaServer(f"http://127.0.0.1:{port}", port, pid_file, log, model, process, parallel, ctx)
    try:
        server.wait_healthy()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def llama_server_factory(
    llama_server_bin: Path, llama_models: Callable[[str], ModelFiles], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., LlamaServer]]:
    servers: dict[tuple[str, int, int], LlamaServer] = {}
    folder = tmp_path_factory.mktemp("llamacpp-servers")

    def start(tokenizer: str = "gpt2-1024", parallel: int = 4, ctx: int = 8192) -> LlamaServer:
        key = (tokenizer, parallel, ctx)
        if key not in servers:
            servers[key] = start_server(llama_server_bin, llama_models(tokenizer), folder, parallel, ctx)
        server = servers[key]
        server.wait_healthy()
        return server

    yield start
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="session")
def llama_server(llama_server_factory: Callable[..., LlamaServer]) -> LlamaServer:
    """The default server. A test that crashes or pauses it leaves it healthy again (``wait_healthy()``)."""
    return llama_server_factory()
