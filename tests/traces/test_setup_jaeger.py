"""scripts/setup.sh's setup_jaeger: idempotent, and a clear error without a recent enough Go."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _setup_jaeger(venv: Path, path: str) -> subprocess.CompletedProcess:
    env = {"PATH": path, "VENV": str(venv), "HOME": os.environ.get("HOME", "/tmp"), "DRILL_SETUP_OFFLINE": "1"}
    return subprocess.run(
        ["bash", "-c", "source scripts/setup.sh && setup_jaeger"],
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


def test_without_go_it_says_so_and_fails(tmp_path: Path) -> None:
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    done = _setup_jaeger(tmp_path / "venv", "/usr/bin:/bin")
    assert done.returncode == 1
    assert "Go is not installed: building Jaeger v1.76.0 needs Go >= 1.24.6" in done.stderr
    assert "JAEGER_BIN=/path/to/jaeger" in done.stderr


def test_an_old_go_is_refused_before_building(tmp_path: Path) -> None:
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    done = _setup_jaeger(tmp_path / "venv", _fake_go(tmp_path, "1.22.5"))
    assert done.returncode == 1
    assert "Go 1.22.5 is too old: building Jaeger v1.76.0 needs Go >= 1.24.6" in done.stderr


def test_a_built_jaeger_is_not_built_again(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "jaeger").write_text("#!/bin/sh\n")
    (venv / "bin" / "jaeger").chmod(0o755)
    (venv / ".jaeger-v1.76.0").touch()
    done = _setup_jaeger(venv, _fake_go(tmp_path, "1.22.5"))  # the old Go is never asked
    assert done.returncode == 0 and done.stderr == ""
