"""Fixtures of the fault-library tests: real reference stacks (one per module), as drill targets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from drill.api import TargetInfo


@dataclass(frozen=True)
class RunningStack:
    """A started stack: its state (URLs, token) and the TargetInfo a drill would see."""

    state: object
    info: TargetInfo
    state_dir: Path

    @property
    def name(self) -> str:
        return self.state.name


def start_embedded(config: dict, state_dir: Path, *, runtime: str = "local") -> RunningStack:
    """Start a stack as `drill stack up` does and describe it as the embedded target does."""
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack
    from drill.targets.embedded import EmbeddedStack, info_from_state

    parsed = parse_stack_config({**config, "runtime": runtime})
    name = f"f{uuid.uuid4().hex[:8]}"
    state = start_stack(parsed, name=name, state_dir=state_dir, timeout_s=120)
    return RunningStack(state, info_from_state(state, EmbeddedStack.static_capabilities(parsed)), state_dir)


def stop_embedded(stack: RunningStack) -> None:
    from drill.stack.supervision.launcher import stop_stack

    stop_stack(stack.name, state_dir=stack.state_dir)


@pytest.fixture(scope="session")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fault-stacks")


def wait_healthy(url: str, timeout_s: float = 30.0) -> None:
    """Poll ``url``/health until it answers 200; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            code = httpx.get(f"{url}/health", timeout=1.0).status_code
            if code == 200:
                return
            last = f"HTTP {code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.1)
    raise AssertionError(f"{url} is not healthy after {timeout_s:g}s ({last})")


@pytest.fixture(scope="session")
def local_stack(stack_dir: Path) -> Iterator[RunningStack]:
    """One replica with TP=2 (one proxied TP link), local processes, fast health checks.

    Shared by the fault tests of the session (started on first use, stopped at the end even on failure);
    every test leaves it as it found it (the contract checks that).
    """
    stack = start_embedded(
        {
            "replicas": 1,
            "engine": {"tensor_parallel_size": 2, "weight_load_time": "300ms"},
            "router": {"health_check_interval": "250ms"},
        },
        stack_dir,
    )
    try:
        yield stack
    finally:
        stop_embedded(stack)
