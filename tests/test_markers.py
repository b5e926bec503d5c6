"""Test markers tell the truth: a test marked ``integration`` uses real components, never a mock transport.

(The other direction, a test that needs Docker without the ``docker`` marker, is caught at run time:
``tests/conftest.py`` gives unmarked tests no Docker engine.)
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _marks(obj: object) -> set[str]:
    found = getattr(obj, "pytestmark", [])
    found = found if isinstance(found, list) else [found]
    return {m.name for m in found}


def _test_functions():
    for path in sorted(TESTS.rglob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"_markers_{path.stem}_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception:  # noqa: BLE001 - a module that does not import here is not this test's business
            continue
        module_marks = _marks(module)
        for name, func in vars(module).items():
            if name.startswith("test_") and inspect.isfunction(func):
                yield path, name, func, module_marks | _marks(func)


def integration_tests_with_a_mock_transport() -> list[str]:
    return [
        f"{path.relative_to(TESTS)}::{name}"
        for path, name, func, marks in _test_functions()
        if "integration" in marks and "MockTransport" in inspect.getsource(func)
    ]


def test_no_integration_test_uses_a_mock_transport() -> None:
    assert integration_tests_with_a_mock_transport() == []


def test_the_marker_check_finds_a_mislabelled_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "test_fake.py").write_text(
        "import pytest, httpx\npytestmark = pytest.mark.integration\n"
        "def test_mocked():\n    httpx.MockTransport(lambda r: httpx.Response(200))\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "TESTS", tmp_path)
    assert integration_tests_with_a_mock_transport() == ["test_fake.py::test_mocked"]


def test_an_unmarked_test_gets_no_docker_engine() -> None:
    """What a test without the ``docker`` marker sees: Docker clients fail to connect, whatever the machine."""
    assert os.environ["DOCKER_HOST"].startswith("unix:///nonexistent/")
    from drill.backends.docker import DockerBackend
    from drill.errors import DockerError, NotAvailableError

    with pytest.raises((DockerError, NotAvailableError)):
        DockerBackend(timeout_s=1).info("anything")


@pytest.mark.docker
def test_a_docker_marked_test_keeps_the_machines_engine() -> None:
    assert not os.environ.get("DOCKER_HOST", "").startswith("unix:///nonexistent/")
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('DOCKER_HOST', ''))"], capture_output=True, text=True
    )
    assert "nonexistent" not in done.stdout
