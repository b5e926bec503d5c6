"""A real llama.cpp ``llama-server`` for the tests in this folder: its binary, a tiny model, a running server.

Fixtures (names are stable; other test files build on them):

- ``llama_server_bin`` (session): the ``llama-server`` binary. ``LLAMA_SERVER_BIN`` when set, else the cached build of
  ``scripts/llama_server.py``; a build still running (``./dev test`` starts one in the background) is waited for,
  none at all is built now (tests/supervised_server.py's ``tool``, as for vLLM). A failed build fails the tests
  with its log's tail (and is not retried); they never skip.
- ``llama_model`` (session): :class:`tests.llamacpp.model.ModelFiles` of the ``gpt2-1024`` tokenizer's model.
- ``llama_server`` (session): a server on a free loopback port, under ``drill supervise`` (it comes back after a
  crash), with ``--metrics``, ``--slots``, 4 slots, 8192 tokens of context and ``--ignore-eos`` (a random model
  would otherwise stop at a random end-of-turn token). A test that crashes or pauses it leaves it healthy.
- ``llama_server_factory`` (session): ``start(tokenizer="llama3-1280", parallel=2, ctx=4096)`` for another server;
  servers are kept per configuration for the session and stopped at its end.

These tests run last (``./dev test`` builds the binary meanwhile) and are marked ``llamacpp`` and ``integration``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.llamacpp.model import ModelFiles, make_model
from tests.supervised_server import (
    ServerError,
    SupervisedServer,
    free_port,
    load_script,
    run_last,
    say,
    start_supervised,
    tool,
)

HERE = Path(__file__).resolve().parent
BUILD_WAIT_S = 2400.0  # a cold build at nice 19 beside the rest of the suite on two cores


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """This folder's tests run last, so a background build has the whole suite's time; the first waits for it."""
    run_last(items, HERE, (pytest.mark.llamacpp, pytest.mark.integration), BUILD_WAIT_S + 300)


# -- the binary --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def llama_server_bin(pytestconfig: pytest.Config) -> Path:
    try:
        return tool("LLAMA_SERVER_BIN", load_script("llama_server"), "build", BUILD_WAIT_S,
                    lambda message: say(pytestconfig, "llamacpp", message))  # fmt: skip
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)


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


@dataclass
class LlamaServer(SupervisedServer):
    """One supervised ``llama-server`` and the model, slots and context it was started with."""

    model: ModelFiles
    parallel: int
    ctx: int

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

    def wait_healthy(self, timeout_s: float | None = None) -> float:
        """Seconds until ``/health`` answers 200; fails the test with the log's tail when it does not."""
        try:
            return super().wait_healthy(timeout_s)
        except ServerError as exc:
            pytest.fail(str(exc), pytrace=False)


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
    command = server_command(binary, model, port, parallel, ctx)
    process, pid_file, log = start_supervised(command, folder, f"llama-server-{port}")
    server = LlamaServer(f"http://127.0.0.1:{port}", port, pid_file, log, process, model, parallel, ctx)
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
