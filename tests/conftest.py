"""Shared fixtures. Test-only plugins are registered the way a plugin author would, without packaging."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compare.compare_run import ComparedPair, unbounded_queue_pair

REPO = Path(__file__).resolve().parent.parent

TEST_PLUGINS = ";".join(
    [
        "drill.faults:test_toxic_latency=tests.plugins.faults:ToxicLatency",
        "drill.faults:test_docker_pause=tests.plugins.faults:DockerPause",
        "drill.faults:test_raising_revert=tests.plugins.faults:RaisingRevert",
    ]
)


@pytest.fixture(autouse=True, scope="session")
def _test_environment(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Test plugins on, a private state directory, and the repository importable by child processes."""
    os.environ["DRILL_EXTRA_PLUGINS"] = TEST_PLUGINS
    os.environ["DRILL_STATE_DIR"] = str(tmp_path_factory.mktemp("drill-state"))
    paths = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


@pytest.fixture(autouse=True)
def _no_docker_engine_unless_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that is not marked ``docker`` gets no Docker engine, even where one runs: a test that needs one
    but lacks the marker fails everywhere, not only under ``-m "not docker"`` on a machine without Docker."""
    if request.node.get_closest_marker("docker") is None:
        monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/llm-drill-test-not-marked-docker.sock")


@pytest.fixture(scope="module")
def toxiproxy_server():
    """The real toxiproxy-server on a free port, stopped after the module even on failure."""
    from drill.backends.toxiproxy import ToxiproxyServer

    server = ToxiproxyServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def toxiproxy(toxiproxy_server) -> Iterator:
    """A client whose server is emptied of proxies after each test."""
    client = toxiproxy_server.client()
    try:
        yield client
    finally:
        for name in client.proxies():
            client.delete_proxy(name)
        client.close()


@pytest.fixture(scope="session")
def unbounded_queue_compare(tmp_path_factory: pytest.TempPathFactory) -> ComparedPair:
    """The flagship's comparison (tests/compare/compare_run.py's ``unbounded_queue_pair``), made once: its verdicts
    are tests/e2e/test_drill_verdicts.py's, its baseline's report.html is opened in Chromium by
    tests/report/test_html_in_chromium.py. A test taking it needs ``COMPARE_TIMEOUT_S`` of time-out."""
    return unbounded_queue_pair(tmp_path_factory.mktemp("unbounded-queue-compare"))
