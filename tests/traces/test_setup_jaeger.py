"""scripts/jaeger.sh's setup_jaeger and start_jaeger_build: a cached build is not built again, and a clear error
without a recent enough Go; scripts/jaeger_build.py's cache entry and its Go check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervised_server import load_script

REPO = Path(__file__).resolve().parents[2]


def _setup_jaeger(venv: Path, path: str, step: str = "setup_jaeger") -> subprocess.CompletedProcess:
    env = {
        "PATH": path,
        "VENV": str(venv),
        "HOME": os.environ.get("HOME", "/tmp"),
        "DRILL_SETUP_OFFLINE": "1",
        "JAEGER_DIR": str(venv.parent / "jaeger-cache"),  # never this machine's cached build
    }
    return subprocess.run(
        ["bash", "-c", f"source scripts/setup.sh && {step}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _fake_go(tmp_path: Path, version: str) -> str:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(
        f'#!/bin/sh\n[ "$1 $2" = "env GOVERSION" ] && echo go{version} && exit 0\necho "unexpected: $*" >&2; exit 9\n'
    )
    go.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


@pytest.mark.parametrize("step", ["setup_jaeger", "start_jaeger_build"])
def test_without_go_it_says_so_and_fails(tmp_path: Path, step: str) -> None:
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    done = _setup_jaeger(tmp_path / "venv", "/usr/bin:/bin", step)
    assert done.returncode == 1
    assert "Go is not installed: building Jaeger v1.76.0 needs Go >= 1.24.6" in done.stderr
    assert "JAEGER_BIN=/path/to/jaeger" in done.stderr


def test_an_old_go_is_refused_before_building(tmp_path: Path) -> None:
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    done = _setup_jaeger(tmp_path / "venv", _fake_go(tmp_path, "1.22.5"))
    assert done.returncode == 1
    assert "Go 1.22.5 is too old: building Jaeger v1.76.0 needs Go >= 1.24.6" in done.stderr


@pytest.mark.parametrize("step", ["setup_jaeger", "start_jaeger_build"])
def test_a_built_jaeger_is_not_built_again(tmp_path: Path, step: str, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    monkeypatch.setenv("JAEGER_DIR", str(tmp_path / "jaeger-cache"))
    cache = load_script("jaeger_build").Cache.here()
    cache.folder.mkdir(parents=True)
    cache.product.write_text("#!/bin/sh\n")
    cache.product.chmod(0o755)
    done = _setup_jaeger(venv, _fake_go(tmp_path, "1.22.5"), step)  # the old Go is never asked
    assert done.returncode == 0 and done.stderr == ""
    assert not cache.log.exists()  # no build started


def test_the_build_refuses_an_old_go_and_records_the_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("jaeger_build")
    monkeypatch.setenv("JAEGER_DIR", str(tmp_path / "jaeger-cache"))
    monkeypatch.setenv("PATH", _fake_go(tmp_path, "1.22.5"))
    monkeypatch.setattr(script.sys, "prefix", str(tmp_path))  # no virtualenv Go either
    monkeypatch.setattr(script, "OTHER_GOS", ())
    cache = script.Cache.here()
    too_old = r"1\.22\.5\) is too old: building Jaeger v1\.76\.0 needs Go >= 1\.24\.6"
    with pytest.raises(script.BuildError, match=too_old):
        script.build(cache)
    assert cache.status()["state"] == "failed"
    assert not cache.finished()


def test_setup_sh_asks_the_build_script_for_the_versions() -> None:
    script = load_script("jaeger_build")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "jaeger_build.py"), "versions"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.split() == [script.JAEGER, script.MIN_GO]
