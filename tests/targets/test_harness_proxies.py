"""Harness-made proxies for real: the real Toxiproxy server, a real upstream server, real ``drill`` processes.

The target makes its proxies (and its own Toxiproxy server) and removes them at stop; a drill SIGKILLed
together with its watchdog leaves them behind, and ``drill cleanup`` removes them from the journal; a drill
SIGKILLed alone has them removed by its watchdog.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from drill.api import TargetContext
from drill.backends.process import ProcessControl, ProcessRef, read_stat
from drill.backends.toxiproxy import ToxiproxyClient, ToxiproxyServer
from drill.rundir.journal import read_journal
from drill.targets.openai import OpenAITarget, OpenAITargetParams
from drill.targets.proxies import HarnessProxyPlan, proxy_name

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCENARIO = {
    "arrival": {"process": "poisson", "rate": 3},
    "pools": [
        {"name": "chat", "input_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 2}}
    ],
}


def _wait(predicate: Callable[[], object], timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s:g} s"
        time.sleep(0.05)
    return time.monotonic() - start


def _alive(ref: ProcessRef) -> bool:
    info = read_stat(ref.pid)
    return info is not None and info.start_ticks == ref.start_ticks and not info.state.gone


def _server_ref(run_dir: Path) -> ProcessRef:
    state = json.loads((run_dir / "toxiproxy" / "server.json").read_text())
    return ProcessRef(state["pid"], state["start_ticks"])


def test_the_target_makes_its_proxies_and_server_and_removes_them_at_stop(tmp_path: Path, upstream: str) -> None:
    params = OpenAITargetParams.model_validate({"replicas": [{"name": "r0", "upstream": upstream}]})
    target = OpenAITarget(params, TargetContext(f"t-{uuid.uuid4().hex[:6]}", str(tmp_path)))
    plan = HarnessProxyPlan.model_validate(target.teardown_data())
    info = target.start()
    try:
        server = _server_ref(tmp_path)
        assert os.getsid(server.pid) == server.pid, "the harness's server runs in a session of its own"
        with ToxiproxyClient(plan.url) as client:
            (proxy,) = client.proxies().values()
        assert proxy.name == plan.proxies[0].name and proxy.upstream == upstream
        assert info.base_url == f"http://{proxy.listen}" and info.toxiproxy_url == plan.url
        assert httpx.get(f"{info.base_url}/health", trust_env=False).status_code == 200  # through the proxy
    finally:
        target.stop()
    assert not _alive(server) and not (tmp_path / "toxiproxy" / "server.json").exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{info.base_url}/health", trust_env=False, timeout=2)
    target.stop()  # idempotent


# -- SIGKILL ---------------------------------------------------------------------------------------------


def _start_run(tmp_path: Path, config: dict) -> tuple[subprocess.Popen, Path]:
    drill = {
        "name": "killed",
        "target": {"kind": "openai", "config": config},
        "scenario": SCENARIO,
        "phases": {"warmup": "0s", "baseline": "500ms", "fault": "60s", "recovery": "0s", "replay": False},
        "otlp": {"port": 0},
        "faults": [
            {"name": "slow", "kind": "slow_replica", "start": "0s", "duration": "60s", "params": {"latency_ms": 50}}
        ],
    }
    path = tmp_path / "killed.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "drill", "run", str(path), "--out", str(out), "--no-progress"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait(lambda: list(out.glob("killed/*/journal.jsonl")), 30, "the run directory")
    (run_dir,) = [p.parent for p in out.glob("killed/*/journal.jsonl")]
    return proc, run_dir


def _plan(run_dir: Path) -> HarnessProxyPlan | None:
    for entry in read_journal(run_dir / "journal.jsonl"):
        if entry.event == "target_starting":
            return HarnessProxyPlan.model_validate(entry.get("teardown"))
    return None


def _faulted_proxy(run_dir: Path) -> tuple[HarnessProxyPlan, str]:
    """Waits until the run's proxy carries the fault's toxic; returns the plan and the proxy's name."""
    _wait(lambda: _plan(run_dir), 30, "the proxy plan in the journal")
    plan = _plan(run_dir)
    assert plan is not None
    name = proxy_name(run_dir.name, "r0")
    assert [p.name for p in plan.proxies] == [name]

    def toxic_on() -> bool:
        try:
            with ToxiproxyClient(plan.url, timeout_s=1) as client:
                return bool(client.toxics(name))
        except Exception:  # noqa: BLE001 - not made yet
            return False

    _wait(toxic_on, 60, "the slow_replica toxic on the run's proxy")
    return plan, name


def _sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def _cleanup(run_dir: Path) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "drill", "cleanup", "--run-dir", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - start


def _proxies(url: str) -> list[str]:
    with ToxiproxyClient(url) as client:
        return sorted(client.proxies())


@pytest.mark.parametrize("server", ["given", "own"])
def test_drill_cleanup_after_a_sigkill_removes_the_proxies_the_drill_made(
    tmp_path: Path, upstream: str, toxiproxy_server: ToxiproxyServer, server: str
) -> None:
    config: dict = {"replicas": [{"name": "r0", "upstream": upstream}]}
    if server == "given":
        config["toxiproxy_url"] = toxiproxy_server.url
    proc, run_dir = _start_run(tmp_path, config)
    try:
        plan, name = _faulted_proxy(run_dir)
        # the watchdog dies first, as when the machine is lost
        watchdog = ProcessControl().find(process_name=f"drill.runner.watchdog --run-dir {run_dir}")
        _sigkill(watchdog.pid)
        ProcessControl().wait_gone(watchdog.ref)
        _sigkill(proc.pid)
        proc.wait(10)
        assert name in _proxies(plan.url), "a SIGKILLed run and watchdog leave the proxy behind"
        own = _server_ref(run_dir) if server == "own" else None
        done, seconds = _cleanup(run_dir)
    finally:
        proc.kill()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reverted slow" in done.stdout and "tore down target target" in done.stdout
    if own is None:
        assert name not in _proxies(plan.url)
    else:
        assert not _alive(own), "drill cleanup stops the harness's own Toxiproxy server (and its proxies with it)"
    print(f"drill cleanup after SIGKILL ({server} Toxiproxy server): {seconds:.2f} s")
    again, _ = _cleanup(run_dir)
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_the_watchdog_removes_the_proxies_and_server_of_a_sigkilled_drill(tmp_path: Path, upstream: str) -> None:
    proc, run_dir = _start_run(tmp_path, {"replicas": [{"name": "r0", "upstream": upstream}]})
    try:
        _faulted_proxy(run_dir)
        own = _server_ref(run_dir)
        _sigkill(proc.pid)
        proc.wait(10)
        seconds = _wait(lambda: not _alive(own), 15, "the watchdog stopping the harness's Toxiproxy server")
    finally:
        proc.kill()
    print(f"watchdog removed the proxies {seconds:.2f} s after the SIGKILL")

    # the watchdog journals target_stopped once the teardown returned: a moment after the server is gone
    def stopped() -> list:
        return [e for e in read_journal(run_dir / "journal.jsonl") if e.event == "target_stopped"]

    _wait(stopped, 10, "the watchdog journalling target_stopped")
    assert [(e.by, e.get("reason")) for e in stopped()] == [("watchdog", "watchdog")]
    done, _ = _cleanup(run_dir)
    assert done.returncode == 0 and "nothing to do" in done.stdout


def test_cleanup_finds_the_harness_server_by_its_command_line_when_its_state_file_was_never_written(
    tmp_path: Path,
) -> None:
    from drill.targets.proxies import plan_proxies, remove_planned

    plan = plan_proxies("r", str(tmp_path), [("a", "127.0.0.1:1", None)], None).reserve()
    assert plan.server is not None
    server = ToxiproxyServer(host=plan.server.host, port=plan.server.port, preexec_fn=os.setsid).start()
    try:
        info = read_stat(server.pid or 0)
        assert info is not None and not Path(plan.server.state_file).exists()  # as if killed right after the start
        remove_planned(plan)
        assert not _alive(info.ref)
    finally:
        server.stop()
