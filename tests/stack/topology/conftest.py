"""Fixtures of the topology tests: the real Toxiproxy server, and asyncio for ``@pytest.mark.anyio``."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture()
def stack_factory(tmp_path):
    """``start(config_dict, runtime="local", name=...)`` starts a stack under ``tmp_path``;
    every stack started is stopped after the test, even on failure."""
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack, stop_stack

    started: list[str] = []

    def start(config: dict, *, runtime: str = "local", name: str | None = None, timeout_s: float = 90):
        name = name or f"t{len(started)}-{tmp_path.name[-12:].lower().replace('_', '-')}"
        started.append(name)
        return start_stack(
            parse_stack_config(config), name=name, runtime=runtime, state_dir=tmp_path, timeout_s=timeout_s
        )

    yield start
    for name in started:
        stop_stack(name, state_dir=tmp_path)
