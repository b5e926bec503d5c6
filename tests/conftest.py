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


#: The marks of a test that runs in the serial part (``--part serial``): it starts real processes or a Docker engine's
#: containers, and its timings and ports assume nothing else of the suite runs beside it; or it is ``realtime``, and
#: passes only when its processes get the CPU as they ask for it. The parallel part runs at nice 19 beside the serial
#: part (``./dev test``), where a busy machine can starve it for seconds.
SERIAL_MARKS = ("integration", "docker", "realtime")

#: Fixtures that serve the reference stack in real time (tests/stack): a test that uses one is ``realtime``.
REALTIME_FIXTURES = frozenset({"start_replica", "spawn_replica", "stack_factory", "pd_pair"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        choices=("parallel", "serial"),
        default=None,
        help="run one part of the suite: 'parallel' the tests that may share the machine (not marked integration, "
        "docker or realtime; ./dev test runs them beside the serial part, at nice 19), 'serial' the others, one at a "
        "time",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """``--part``: keep one part of the suite. A wrapper, so it sees the marks the folders' own hooks add (tests/vllm,
    tests/llamacpp and tests/kubernetes mark their tests integration as they move them last). A test that uses a
    fixture serving the reference stack is marked ``realtime`` here, before the split."""
    yield
    for item in items:
        if REALTIME_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.realtime)
    part = config.getoption("--part")
    if part is None:
        return
    keep, drop = [], []
    for item in items:
        serial = any(item.get_closest_marker(mark) is not None for mark in SERIAL_MARKS)
        (keep if serial == (part == "serial") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


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
