"""``./dev setup`` installs what is missing or stops at once with a message that says what to do.

The steps of scripts/setup.sh run here in a bash whose PATH holds only the tools they use (no Go, no C
compiler, no Toxiproxy), with ``DRILL_SETUP_OFFLINE=1`` so that nothing is downloaded or apt-installed:
what is tested is the stop, its exit status and its message. A fake ``go`` stands in for an old or a
new enough Go. ``./dev`` runs these steps under ``set -e``, so a step's status 1 is ./dev's exit 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS = (
    "bash",
    "sh",
    "sort",
    "head",
    "awk",
    "mktemp",
    "rmdir",
    "rm",
    "mv",
    "id",
    "uname",
    "cat",
    "printf",
    "dirname",
    "sed",
    "seq",
    "sleep",
    "tail",
)


def _bin(tmp_path: Path, go_version: str | None = None) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            (folder / tool).symlink_to(found)
    if go_version is not None:
        go = folder / "go"
        go.write_text(
            f'#!/bin/sh\nif [ "$1" = env ]; then echo go{go_version}; '
            f'else echo "go version go{go_version} linux/amd64"; fi\n'
            'if [ "$1" = install ]; then exit 3; fi\n'
        )
        go.chmod(0o755)
    return folder


def _step(tmp_path: Path, script: str, go_version: str | None = None) -> subprocess.CompletedProcess:
    env = {
        "PATH": str(_bin(tmp_path, go_version)),
        "HOME": str(tmp_path),
        "VENV": str(tmp_path / "venv"),
        "DRILL_SETUP_OFFLINE": "1",
    }
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source scripts/setup.sh; {script}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_go_toxiproxy_setup_stops_with_exit_1_and_says_what_to_do(tmp_path: Path) -> None:
    done = _step(tmp_path, "setup_toxiproxy; echo carried-on")
    assert done.returncode == 1, done
    assert "carried-on" not in done.stdout
    assert "Go is not installed: building the Toxiproxy server v2.12.0 needs Go >= 1.23.0" in done.stderr
    assert "https://go.dev/dl/" in done.stderr and "TOXIPROXY_BIN" in done.stderr


def test_debian_12s_go_1_19_is_too_old_for_toxiproxy_2_12(tmp_path: Path) -> None:
    done = _step(tmp_path, "setup_toxiproxy", go_version="1.19.8")
    assert done.returncode == 1, done
    assert "Go 1.19.8 is too old: building the Toxiproxy server v2.12.0 needs Go >= 1.23.0" in done.stderr


@pytest.mark.parametrize(
    "version, ok",
    [("1.23.0", True), ("1.23.4", True), ("1.24.6", True), ("1.22.12", False), ("1.9", False), ("1.100.0", True)],
)
def test_the_go_version_is_compared_as_a_version(tmp_path: Path, version: str, ok: bool) -> None:
    done = _step(tmp_path, 'setup_go "$TOXIPROXY_MIN_GO"', go_version=version)
    assert (done.returncode == 0) is ok, done


def test_a_failed_go_install_stops_setup(tmp_path: Path) -> None:
    done = _step(tmp_path, "setup_toxiproxy; echo carried-on", go_version="1.24.6")  # the fake go install exits 3
    assert done.returncode == 1 and "carried-on" not in done.stdout, done
    assert "go install of the Toxiproxy server failed" in done.stderr


def test_without_a_c_compiler_setup_stops_with_exit_1(tmp_path: Path) -> None:
    done = _step(tmp_path, "setup_cc; echo carried-on")
    assert done.returncode == 1 and "carried-on" not in done.stdout, done
    assert "no C compiler (cc, gcc or clang)" in done.stderr and "apt-get install gcc" in done.stderr


def test_a_c_compiler_on_path_is_found(tmp_path: Path) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "./dev setup provides a C compiler; this machine has none"
    done = _step(tmp_path, f"export CC={compiler}; setup_cc && c_compiler")
    assert done.returncode == 0 and done.stdout.strip() == compiler, done


def test_docker_that_cannot_be_had_stops_setup(tmp_path: Path) -> None:
    if os.path.exists("/usr/sbin/dockerd"):
        pytest.skip("this machine has /usr/sbin/dockerd; the no-engine branch cannot be reached here")
    done = _step(tmp_path, "docker_up() { false; }; setup_docker; echo carried-on")
    assert done.returncode == 1 and "carried-on" not in done.stdout, done
    assert "no Docker engine" in done.stderr and "DRILL_SKIP_DOCKER=1" in done.stderr


def test_dev_runs_its_steps_under_set_e() -> None:
    text = (REPO / "dev").read_text()
    assert "set -euo pipefail" in text
    for step in ("setup_toxiproxy", "setup_cc", "setup_docker"):
        assert step in text


def test_the_gpu_tests_fail_rather_than_skip_without_a_c_compiler(tmp_path: Path, monkeypatch) -> None:
    from tests.faults.gpu_fakes import build_fake_cudart

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("DRILL_ALLOW_NO_CC", raising=False)
    with pytest.raises(pytest.fail.Exception, match="no C compiler"):
        build_fake_cudart(tmp_path / "lib")
    monkeypatch.setenv("DRILL_ALLOW_NO_CC", "1")  # asked for by name: a visible skip
    with pytest.raises(pytest.skip.Exception):
        build_fake_cudart(tmp_path / "lib")


def test_dev_setup_on_a_machine_without_go_stops_with_exit_1(tmp_path: Path) -> None:
    """The acceptance test: ``./dev setup`` itself, with a virtualenv already made (so nothing is pip-installed)
    and no Go, no Toxiproxy, nothing downloadable: exit 1 and a message that says what to do."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ".llm-drill-installed").touch()
    os.utime(venv / ".llm-drill-installed", (2**31, 2**31))  # newer than pyproject.toml: no reinstall
    env = {"PATH": str(_bin(tmp_path)), "HOME": str(tmp_path), "VENV": str(venv), "DRILL_SETUP_OFFLINE": "1"}
    done = subprocess.run([str(REPO / "dev"), "setup"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert "Go is not installed: building the Toxiproxy server v2.12.0 needs Go >= 1.23.0" in done.stderr
    assert "https://go.dev/dl/" in done.stderr


def test_the_go_toolchain_installer_checks_zips_the_way_the_go_command_does() -> None:
    """scripts/go_toolchain.py verifies a downloaded toolchain with Go's dirhash h1; here it must reproduce the
    hash the go command itself recorded for a module zip it downloaded (Toxiproxy's, which set-up installs)."""
    import importlib.util
    import zipfile

    gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    at = Path(gomodcache) / "cache/download/github.com/!shopify/toxiproxy/v2/@v"
    assert (at / "v2.12.0.zip").exists(), "./dev setup installs Toxiproxy with go install, which keeps this zip"
    spec = importlib.util.spec_from_file_location("go_toolchain", REPO / "scripts" / "go_toolchain.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with zipfile.ZipFile(at / "v2.12.0.zip") as archive:
        assert module.hash1(archive) == (at / "v2.12.0.ziphash").read_text().strip()


def test_the_debian_packages_install_in_one_background_apt_run_that_the_steps_wait_for(tmp_path: Path) -> None:
    """./dev test: one ``apt-get update`` and one install for chromium and prometheus, started before the Go builds;
    setup_chromium and setup_prometheus, after ``wait_debian_packages``, find what it installed and install nothing."""
    folder = _bin(tmp_path)
    calls = tmp_path / "apt-calls"
    apt = folder / "apt-get"
    apt.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\nsleep 0.3\n'
        f'case "$*" in *install*) for p in "$@"; do case "$p" in chromium|prometheus) '
        f'printf "#!/bin/sh\\n" > {folder}/"$p"; chmod +x {folder}/"$p";; esac; done;; esac\n'
    )
    apt.chmod(0o755)
    (folder / "sudo").symlink_to(shutil.which("env"))
    (folder / "env").symlink_to(shutil.which("env"))
    (folder / "chmod").symlink_to(shutil.which("chmod"))
    env = {"PATH": str(folder), "HOME": str(tmp_path), "VENV": str(tmp_path / "venv")}
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    script = (
        'start_debian_packages; [ -n "$DEBIAN_INSTALL_PID" ]; echo started; '
        "wait_debian_packages; setup_chromium; setup_prometheus; echo done"
    )
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source scripts/setup.sh; {script}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.split() == ["started", "done"], done
    lines = calls.read_text().splitlines()
    assert [line for line in lines if "update" in line] == ["update -qq"], lines
    assert len([line for line in lines if "install" in line]) == 1, lines
    assert "chromium prometheus" in lines[-1] and "docker.io" not in lines[-1], lines


def test_setup_python_caches_the_projects_bytecode_where_python_would_not(tmp_path: Path) -> None:
    """With PYTHONDONTWRITEBYTECODE set, every process of a drill compiled the project's modules again: the set-up
    compiles them once (``compile_project``), after an install it did not need to redo."""
    project, venv = tmp_path / "project", tmp_path / "venv"
    for module in ("drill/stack/router.py", "faults/slow.py"):
        (project / module).parent.mkdir(parents=True, exist_ok=True)
        (project / module).write_text("VALUE = 1\n")
    (project / "pyproject.toml").write_text("")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ".llm-drill-installed").touch()  # newer than pyproject.toml: no pip install
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {REPO / 'scripts' / 'setup.sh'}; setup_python"],
        cwd=project,
        env={"PATH": os.environ["PATH"], "VENV": str(venv), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    tag = sys.implementation.cache_tag
    assert (project / "drill" / "stack" / "__pycache__" / f"router.{tag}.pyc").is_file()
    assert (project / "faults" / "__pycache__" / f"slow.{tag}.pyc").is_file()
