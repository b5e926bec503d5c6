"""A real OpenAI-compatible server for the target tests: one replica process of the embedded stack."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.stack.replica_kit import ReplicaLauncher


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a running replica (``python -m drill.stack.replica.api_server``), killed after the module."""
    launcher = ReplicaLauncher(tmp_path_factory.mktemp("upstream"))
    try:
        yield launcher().url.split("://", 1)[1]
    finally:
        launcher.kill_all()
