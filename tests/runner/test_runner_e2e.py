"""The runner end to end against the real reference stack, real Locust load, real Toxiproxy and Docker.

Covers the run directory, exit codes 0/1/4/130, and the guarantee that faults are reverted on every
exit path: normal end, SIGINT, SIGTERM (through the runner) and SIGKILL (through the watchdog).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from drill.backends.docker import DockerBackend
from drill.rundir.journal import read_journal

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

SCENARIO = {
    "seed": 11,
    "arrival": {"process": "poisson", "rate": 6},
    "pools": [
        {
            "name": "chat",
            "input_tokens": {"dist": "uniform", "min": 20, "max": 200},
            "output_tokens": {"dist": "fixed", "value": 16},
            "slo": {"ttft_p95": "2s"},
        }
    ],
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """One small reference stack shared by the module's runs (attached as an external target)."""
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack, stop_stack

    state_dir = tmp_path_factory.mktemp("stack")
    config = parse_stack_config({"replicas": 1, "engine": {"weight_load_time": "200ms"}})
    state = start_stack(config, name="runner-e2e", state_dir=state_dir, timeout_s=90)
    yield state
    stop_stack("runner-e2e", state_dir=state_dir)


def _write_drill(path: Path, target: dict, *, faults=(), checks=(), phases=None) -> Path:
    drill = {
        "name": "e2e",
        "target": target,
        "scenario": SCENARIO,
        "otlp": {"port": 0},
        "phases": phases or {"warmup": "1s", "baseline": "3s", "fault": "4s", "recovery": "2s", "replay": False},
        "faults": list(faults),
        "checks": list(checks),
    }
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    return path


def _external(stack, toxiproxy_url: str | None = None) -> dict:
    config = {"url": stack.router}
    if toxiproxy_url:
        config["toxiproxy_url"] = toxiproxy_url
    return {"kind": "openai", "config": config}


def _env(cwd: Path) -> dict:
    """Each test's runs get their own registry of active runs, so `drill cleanup` sees only them."""
    return {**os.environ, "DRILL_STATE_DIR": str(cwd / "state")}


def _drill(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "drill", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(cwd),
    )


def _cleanup(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "drill", "cleanup", "--reports", str(cwd / "out")],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_env(cwd),
    )


def _run_dir(out: Path) -> Path:
    (run_dir,) = list(out.glob("e2e/*"))
    return run_dir


def _events(run_dir: Path) -> list:
    return list(read_journal(run_dir / "journal.jsonl"))


def test_embedded_run_writes_every_raw_file_and_never_reuses_a_directory(tmp_path: Path) -> None:
    drill = _write_drill(
        tmp_path / "d.yaml",
        {"kind": "embedded", "config": {"replicas": 1, "engine": {"weight_load_time": "200ms"}}},
        checks=[{"kind": "slo", "params": {"phase": "baseline", "min_requests": 5}}],
    )
    proc = _drill(["run", str(drill), "--out", str(tmp_path / "out"), "--no-progress"], tmp_path)
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, output
    run_dir = _run_dir(tmp_path / "out")
    for name in (
        "drill.yaml",
        "resolved.json",
        "env.json",
        "journal.jsonl",
        "requests.jsonl",
        "spans.jsonl",
        "metrics.jsonl",
        "verdicts.json",
        "summary.md",
    ):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "drill.yaml").read_text() == drill.read_text()
    env = json.loads((run_dir / "env.json").read_text())
    assert env["target"]["model"] == "llama-3-8b" and env["seeds"] == {"drill": 0, "scenario": 11}
    phases = [e.get("phase") for e in _events(run_dir) if e.event == "phase_started"]
    assert phases == ["cold_start", "warmup", "baseline", "fault", "recovery"]
    spans = [json.loads(x) for x in (run_dir / "spans.jsonl").read_text().splitlines()]
    assert any(s["name"] == "llm_request" for s in spans)
    verdicts = json.loads((run_dir / "verdicts.json").read_text())
    assert [v["status"] for v in verdicts["checks"]] == ["PASS"]
    assert verdicts["schema"] == "llm-drill/verdicts/v1"
    judged = subprocess.run(
        [sys.executable, "-m", "drill", "judge", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert judged.returncode == 0, judged.stderr
    assert json.loads(judged.stdout)["checks"] == verdicts["checks"], "drill judge must give the run's verdicts"
    from drill.stack.supervision.launcher import read_state

    assert read_state(f"drill-{run_dir.name.lower()}") is None, "the run's stack must be stopped"


def test_a_failed_check_exits_1_and_a_failed_revert_exits_4(tmp_path: Path, stack) -> None:
    drill = _write_drill(
        tmp_path / "d.yaml",
        _external(stack),
        faults=[{"kind": "test_raising_revert", "start": "1s", "duration": "1s"}],
        checks=[{"kind": "slo", "params": {"phase": "baseline", "min_requests": 1, "slo": {"ttft_p50": "1ms"}}}],
    )
    proc = _drill(["run", str(drill), "--out", str(tmp_path / "out"), "--no-progress"], tmp_path)
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 4, output
    assert "REVERT FAILED" in output and "drill cleanup" in output
    assert "FAIL" in output and "ttft_p50" in output
    retried = _cleanup(tmp_path)
    assert retried.returncode == 4 and "FAILED to revert test_raising_revert-0" in retried.stdout
    # Without the fault, only the check fails (exit 1); a stop condition that fires at once ends the fault
    # phase early, and the summary says so.
    proc = _drill(
        [
            "run",
            str(drill),
            "--out",
            str(tmp_path / "out2"),
            "--no-progress",
            "--set",
            "faults=[]",
            "--set",
            "stop_conditions=[{kind: latency, metric: ttft, percentile: 50, above: 1ms, for: 2s, min_requests: 1}]",
        ],
        tmp_path,
    )
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 1, output
    assert "the fault phase ended early: stop condition 'ttft p50 above 1ms for 2s' fired" in output
    run_dir = _run_dir(tmp_path / "out2")
    fault_end = next(e for e in _events(run_dir) if e.event == "phase_ended" and e.get("phase") == "fault")
    assert fault_end.get("stopped_by") and fault_end.get("elapsed_s") < 3.5
    assert "ended early" in (run_dir / "summary.md").read_text()


def test_a_target_that_never_answers_is_an_internal_error_with_a_log(tmp_path: Path) -> None:
    drill = _write_drill(
        tmp_path / "d.yaml", {"kind": "openai", "config": {"url": "http://127.0.0.1:1", "startup_timeout": "1s"}}
    )
    proc = _drill(["run", str(drill), "--out", str(tmp_path / "out"), "--no-progress"], tmp_path)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, output
    run_dir = _run_dir(tmp_path / "out")
    assert "target not healthy" in output and "TargetError" in (run_dir / "error.log").read_text()
    assert [e.get("status") for e in _events(run_dir) if e.event == "run_finished"] == ["error"]


def _start_faulted_run(tmp_path: Path, stack, toxiproxy_server, proxy_name: str, container: str) -> tuple:
    drill = _write_drill(
        tmp_path / "d.yaml",
        _external(stack, toxiproxy_server.url),
        faults=[
            {
                "name": "latency",
                "kind": "test_toxic_latency",
                "start": "0s",
                "params": {"proxy": proxy_name, "latency_ms": 50},
            },
            {"name": "pause", "kind": "test_docker_pause", "start": "0s", "params": {"container": container}},
        ],
        phases={"warmup": "0s", "baseline": "1s", "fault": "60s", "recovery": "1s", "replay": False},
    )
    out = tmp_path / "out"
    proc = _drill(["run", str(drill), "--out", str(out), "--no-progress"], tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = list(out.glob("e2e/*"))
        if runs and sum(e.event == "fault_verified" for e in _events(runs[0])) == 2:
            return proc, runs[0]
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read())
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("faults were not injected in time")


def _load_generators(runner_pid: int) -> list[int]:
    """Pids of the load generators a runner started: their command line carries ``--parent-pid <runner>``."""
    found = subprocess.run(
        ["pgrep", "-f", f"drill\\.load\\.child\\.locustfile .*--parent-pid {runner_pid}( |$)"],
        capture_output=True,
        text=True,
    ).stdout
    return [int(pid) for pid in found.split()]


def _alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie has ended)."""
    running = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            running.append(pid)
    return running


def _reverted(client, proxy_name: str, container: str) -> bool:
    return not client.toxics(proxy_name) and str(DockerBackend().info(container).state) == "running"


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_and_sigterm_revert_through_the_runner_and_exit_130(
    tmp_path: Path, stack, toxiproxy_server, proxy, container, sig
) -> None:
    client, proxy_name = proxy
    proc, run_dir = _start_faulted_run(tmp_path, stack, toxiproxy_server, proxy_name, container)
    assert not _reverted(client, proxy_name, container)
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert _reverted(client, proxy_name, container)
    events = _events(run_dir)
    assert [e.get("signal") for e in events if e.event == "signal"][0] == sig.name
    reverted = [e for e in events if e.event == "fault_reverted"]
    assert {e.get("fault_id") for e in reverted} == {"latency", "pause"} and all(e.by == "runner" for e in reverted)
    assert _cleanup(tmp_path).stdout.strip() == "nothing to clean up"


@pytest.mark.docker
def test_sigkill_of_the_runner_is_reverted_by_the_watchdog_within_5s(
    tmp_path: Path, stack, toxiproxy_server, proxy, container
) -> None:
    client, proxy_name = proxy
    proc, run_dir = _start_faulted_run(tmp_path, stack, toxiproxy_server, proxy_name, container)
    generators = _load_generators(proc.pid)
    assert generators, "the run's load generator must be found by what it carries (its --parent-pid)"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    killed = time.monotonic()
    while not _reverted(client, proxy_name, container):
        assert time.monotonic() - killed < 5.0, "the watchdog did not revert within 5 s"
        time.sleep(0.05)

    def by_watchdog() -> set:  # journalled once each revert returned: a moment after the state is back
        return {e.get("fault_id") for e in _events(run_dir) if e.event == "fault_reverted" and e.by == "watchdog"}

    while by_watchdog() != {"latency", "pause"} and time.monotonic() - killed < 10.0:
        time.sleep(0.05)
    assert by_watchdog() == {"latency", "pause"}
    result = _cleanup(tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "nothing to clean up"
    deadline = time.monotonic() + 10
    while _alive(generators) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(generators), f"the load generator must die with the runner: {_alive(generators)} still run"
    assert _load_generators(proc.pid) == []
