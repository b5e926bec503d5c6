"""``drill fault inject``: one fault by hand, journaled and reverted like a drill's — at the end of ``--for``, on
Ctrl-C, by the watchdog when the command is SIGKILLed, and by ``drill cleanup`` when both are gone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from drill.backends.process import ProcessControl
from drill.backends.toxiproxy import ToxiproxyClient
from drill.rundir.journal import read_journal
from tests.faults.conftest import RunningStack, wait_healthy

pytestmark = pytest.mark.integration


def _env(tmp_path: Path) -> dict:
    """A private registry of active runs for each test, so `drill cleanup` sees only its runs."""
    return {**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")}


def _inject(stack: RunningStack, tmp_path: Path, *args: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "drill", "fault", "inject", *args, "--out", str(tmp_path / "reports")]
    if "--target" not in args:
        argv += ["--target", f"stack:{stack.name}", "--state-dir", str(stack.state_dir)]
    return subprocess.Popen(
        argv, cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _run_dir(tmp_path: Path, timeout_s: float = 30) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = list((tmp_path / "reports" / "manual").glob("*/journal.jsonl"))
        if found and any(e.event == "fault_verified" for e in read_journal(found[0])):
            return found[0].parent
        time.sleep(0.05)
    raise AssertionError("the fault was not verified in time")


def _toxics(stack: RunningStack) -> list[str]:
    with ToxiproxyClient(stack.info.toxiproxy_url) as client:
        return [t.name for t in client.toxics(stack.info.replicas[0].proxy)]


def _events(run_dir: Path) -> list[str]:
    return [e.event for e in read_journal(run_dir / "journal.jsonl")]


def test_the_fault_holds_for_its_time_then_is_reverted_and_the_run_unregistered(local_stack, tmp_path) -> None:
    wait_healthy(local_stack.state.router)
    start = time.monotonic()
    proc = _inject(
        local_stack, tmp_path, "slow_replica", "--param", "latency_ms=300", "--for", "2s", "--name", "manual-slow"
    )
    run_dir = _run_dir(tmp_path)
    assert _toxics(local_stack) == ["drill-manual-slow-latency-downstream"]
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert time.monotonic() - start >= 2.0
    assert _toxics(local_stack) == []
    assert "landed: toxic(s) drill-manual-slow-latency-downstream" in output and "reverted manual-slow" in output
    assert _events(run_dir) == [
        "run_started",
        "revert_registered",
        "fault_injected",
        "fault_verified",
        "fault_reverted",
        "run_finished",
    ]
    assert run_dir.parent.name == "manual" and not list((tmp_path / "state" / "runs").glob("*.json"))


def test_ctrl_c_reverts_at_once_and_exits_130(local_stack, tmp_path) -> None:
    proc = _inject(local_stack, tmp_path, "partition", "--param", "mode=refuse", "--for", "60s")
    run_dir = _run_dir(tmp_path)
    with ToxiproxyClient(local_stack.info.toxiproxy_url) as client:
        assert client.proxy(local_stack.info.replicas[0].proxy).enabled is False
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 130, output
        assert client.proxy(local_stack.info.replicas[0].proxy).enabled is True
    assert "interrupted by SIGINT" in output and "signal" in _events(run_dir)


def test_a_sigkilled_injection_is_reverted_by_its_watchdog(local_stack, tmp_path) -> None:
    proc = _inject(
        local_stack, tmp_path, "slow_replica", "--param", "latency_ms=100", "--for", "60s", "--name", "killed"
    )
    run_dir = _run_dir(tmp_path)
    proc.kill()
    proc.wait(10)
    killed = time.monotonic()
    while _toxics(local_stack):
        assert time.monotonic() - killed < 5.0, "the watchdog did not revert within 5 s"
        time.sleep(0.05)
    # the watchdog journals fault_reverted once the revert returned: a moment after the toxic is gone
    while not (reverted := [e for e in read_journal(run_dir / "journal.jsonl") if e.event == "fault_reverted"]):
        assert time.monotonic() - killed < 10.0, "the watchdog did not journal its revert"
        time.sleep(0.05)
    assert [e.by for e in reverted] == ["watchdog"]
    cleanup = subprocess.run(
        [sys.executable, "-m", "drill", "cleanup", "--reports", str(tmp_path / "reports")],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cleanup.returncode == 0 and cleanup.stdout.strip() == "nothing to clean up"


def test_drill_cleanup_finds_a_manual_injection_in_the_active_registry(local_stack, tmp_path) -> None:
    """Both the command and its watchdog die: `drill cleanup` (from the registry alone) reverts the fault."""
    proc = _inject(
        local_stack, tmp_path, "slow_replica", "--param", "latency_ms=100", "--for", "60s", "--name", "orphan"
    )
    run_dir = _run_dir(tmp_path)
    control = ProcessControl(timeout_s=10)
    watchdog = control.find(process_name=f"drill.runner.watchdog --run-dir {run_dir}")
    control.kill(watchdog.ref)
    proc.kill()
    proc.wait(10)
    time.sleep(1.0)
    assert _toxics(local_stack) == ["drill-orphan-latency-downstream"], "nothing else may have reverted it"
    elsewhere = tmp_path / "elsewhere"  # no reports dir here: only the registry knows the run
    elsewhere.mkdir()
    cleanup = subprocess.run(
        [sys.executable, "-m", "drill", "cleanup"],
        cwd=elsewhere,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    assert "reverted orphan" in cleanup.stdout and _toxics(local_stack) == []


def test_a_fault_that_cannot_land_exits_1_and_leaves_nothing_registered(local_stack, tmp_path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    target = tmp_path / "target.yaml"
    target.write_text(
        yaml.safe_dump(
            {
                "target": {
                    "kind": "openai",
                    "config": {
                        "url": local_stack.state.router,
                        "toxiproxy_url": f"http://127.0.0.1:{dead}",
                        "replicas": [{"name": "r0", "url": local_stack.state.replicas[0].url, "proxy": "r0"}],
                    },
                }
            }
        )
    )
    proc = _inject(local_stack, tmp_path, "link_reset", "--target", str(target), "--for", "30s")
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, output
    assert "NOT LANDED: ToxiproxyError" in output and "cannot reach Toxiproxy" in output
    (journal,) = (tmp_path / "reports" / "manual").glob("*/journal.jsonl")
    assert "fault_inject_failed" in _events(journal.parent) and "fault_reverted" in _events(journal.parent)
    assert not list((tmp_path / "state" / "runs").glob("*.json"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["slow_replca", "--for", "5s"], "did you mean 'slow_replica'?"),
        (["slow_replica", "--param", "latency_ms=300"], "Missing option '--for'"),
        (["slow_replica", "--param", "latency_ms=fast", "--for", "5s"], "params.latency_ms: expected an integer"),
        (["slow_replica", "--param", "latency_ms=3", "--selector", "replicas=[5]", "--for", "5s"], "no replica 5"),
        (["slow_replica", "--param", "method=docker_cpu", "--param", "cpus=1", "--for", "5s"], "needs docker"),
        (["queue_flood", "--for", "5s"], "use it in `drill run`"),
        (["link_reset", "--for", "0s"], "must be a positive duration"),
        (
            ["slow_replica", "--param", "latency_ms=.inf", "--for", "5s"],
            "<--param>:1:1: error: '.inf' is not a finite number",
        ),
        (
            [
                "slow_replica",
                "--param",
                "{a: &a [x, x, x, x, x, x, x, x, x, x], "
                + ", ".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]" for p, c in zip("abcdefgh", "bcdefghi"))
                + "}",
                "--for",
                "5s",
            ],
            "expands to more than",
        ),
    ],
)
def test_bad_input_is_refused_before_anything_is_touched(local_stack, tmp_path, args, message) -> None:
    proc = _inject(local_stack, tmp_path, *args)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, output
    assert message in output
    assert not (tmp_path / "reports").exists()


def test_an_embedded_target_in_a_drill_file_is_refused_with_a_hint(local_stack, tmp_path) -> None:
    drill = tmp_path / "d.yaml"
    drill.write_text(yaml.safe_dump({"name": "x", "target": {"kind": "embedded", "config": {"replicas": 1}}}))
    proc = _inject(local_stack, tmp_path, "link_reset", "--target", str(drill), "--for", "5s")
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "drill stack up" in output
