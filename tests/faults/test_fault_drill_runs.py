"""Built-in faults in real drill runs (``drill run``, attached to a running stack).

Faults that land are verified, reverted by the runner, and the ``fault_landed`` check passes. A fault
whose mechanism is missing fails loudly: the drill reports it as not landed (``fault_landed`` FAILs,
exit code 1), never as a pass. And ``verify`` checks the target, not what ``inject`` said.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from drill import registry
from drill.api import FaultContext, FaultNotLanded, Selector
from drill.backends.toxiproxy import ToxiproxyClient
from drill.rundir.journal import read_journal
from drill.runner.fault_schedule import resolve_targets
from tests.faults.conftest import RunningStack, wait_healthy

pytestmark = pytest.mark.integration


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SCENARIO = {
    "arrival": {"process": "poisson", "rate": 2},
    "pools": [
        {"name": "chat", "input_tokens": {"dist": "fixed", "value": 10}, "output_tokens": {"dist": "fixed", "value": 4}}
    ],
}
PHASES = {"warmup": "0s", "baseline": "1s", "fault": "3s", "recovery": "1s", "replay": False}


def _run(drill: dict, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    path = tmp_path / f"{drill['name']}.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    env = {**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, "-m", "drill", "run", str(path), "--out", str(tmp_path / "out"), "--no-progress"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    (run_dir,) = list((tmp_path / "out").glob(f"{drill['name']}/*"))
    return done, run_dir


def test_faults_that_land_are_verified_reverted_and_pass_fault_landed(
    local_stack: RunningStack, tmp_path: Path
) -> None:
    wait_healthy(local_stack.state.router)
    replica = local_stack.state.replicas[0]
    drill = {
        "name": "landed",
        "scenario": SCENARIO,
        "phases": PHASES,
        "otlp": {"port": 0},
        "target": {
            "kind": "openai",
            "config": {
                "url": local_stack.state.router,
                "toxiproxy_url": local_stack.info.toxiproxy_url,
                "supervised": True,
                "replicas": [
                    {"name": "r0", "url": replica.url, "proxy": replica.proxy, "pid_file": str(replica.pid_file)}
                ],
            },
        },
        "faults": [
            {"name": "slow", "kind": "slow_replica", "start": "0s", "duration": "2s", "params": {"latency_ms": 200}},
            {"name": "crash", "kind": "replica_crash", "start": "1s", "duration": "2s"},
        ],
    }
    done, run_dir = _run(drill, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = json.loads((run_dir / "verdicts.json").read_text())["checks"]
    assert [(v["name"], v["status"]) for v in verdicts] == [("fault_landed", "PASS")]
    events = list(read_journal(run_dir / "journal.jsonl"))
    verified = {e.get("fault_id"): e.get("summary") for e in events if e.event == "fault_verified"}
    assert "listed on" in verified["slow"] and "killed (SIGKILL); back as pid" in verified["crash"]
    assert {e.get("fault_id") for e in events if e.event == "fault_reverted" and e.by == "runner"} == {"slow", "crash"}
    assert _toxics_left(local_stack) == []


def _toxics_left(stack: RunningStack) -> list[str]:
    with ToxiproxyClient(stack.info.toxiproxy_url) as client:
        return [t.name for p in client.proxies().values() if p.name.startswith(stack.name) for t in p.toxics]


@pytest.mark.docker  # replica_pause's docker method must reach a Docker engine to be told "no such container"
def test_missing_mechanisms_make_the_drill_report_not_landed_and_exit_1(
    local_stack: RunningStack, tmp_path: Path
) -> None:
    wait_healthy(local_stack.state.router)
    replica = local_stack.state.replicas[0]
    drill = {
        "name": "not-landed",
        "target": {
            "kind": "openai",
            "config": {
                "url": local_stack.state.router,
                "toxiproxy_url": f"http://127.0.0.1:{_dead_port()}",  # nobody there
                "replicas": [
                    {"name": "r0", "url": replica.url, "proxy": "r0", "container": "llm-drill-no-such-container"}
                ],
            },
        },  # wrong name
        "scenario": SCENARIO,
        "phases": PHASES,
        "otlp": {"port": 0},
        "faults": [
            {"name": "slow", "kind": "slow_replica", "params": {"latency_ms": 200}},
            {"name": "pause", "kind": "replica_pause", "params": {"method": "docker"}},
        ],
    }
    done, run_dir = _run(drill, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = {v["name"]: v for v in json.loads((run_dir / "verdicts.json").read_text())["checks"]}
    landed = verdicts["fault_landed"]
    assert landed["status"] == "FAIL" and "slow" in landed["message"] and "pause" in landed["message"]
    assert "cannot reach Toxiproxy" in landed["observed"]["slow"]
    assert "no such container" in landed["observed"]["pause"]
    events = [e.event for e in read_journal(run_dir / "journal.jsonl")]
    assert events.count("fault_inject_failed") == 2 and "fault_verified" not in events
    assert "fault_landed" in done.stdout and "FAIL" in done.stdout


def test_verify_looks_at_the_target_not_at_what_inject_did(local_stack: RunningStack) -> None:
    """A toxic removed behind the fault's back (here: Toxiproxy's panic button) is reported as not landed."""
    fault_cls = registry.faults.get("slow_replica")
    fault = fault_cls(fault_cls.Params(latency_ms=100))
    ctx = FaultContext("behind-its-back", local_stack.info, resolve_targets(fault, Selector(), local_stack.info, 0))
    try:
        fault.inject(ctx)
        assert fault.verify(ctx).summary
        with ToxiproxyClient(local_stack.info.toxiproxy_url) as toxiproxy:
            toxiproxy.delete_toxic(local_stack.info.replicas[0].proxy, "drill-behind-its-back-latency-downstream")
        with pytest.raises(FaultNotLanded, match="is not on proxy"):
            fault.verify(ctx)
    finally:
        fault.revert(ctx)
        ctx.close()


def test_a_revert_tolerates_a_toxiproxy_that_is_not_running_but_not_one_that_hangs() -> None:
    """Refused: no server, so no toxic can be left. No answer: the toxic may be there, so the revert fails."""
    from drill.api import ReplicaRef, TargetInfo, ToxiproxyError

    fault_cls = registry.faults.get("slow_replica")
    fault = fault_cls(fault_cls.Params(latency_ms=100))
    replica = ReplicaRef(name="r0", index=0, url="http://127.0.0.1:9", proxy="r0")
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)  # accepts into the backlog, never answers
        cases = ((f"http://127.0.0.1:{_dead_port()}", False), (f"http://127.0.0.1:{hung.getsockname()[1]}", True))
        for url, fails in cases:
            target = TargetInfo(kind="openai", base_url="http://127.0.0.1:9", replicas=[replica], toxiproxy_url=url)
            ctx = FaultContext("hung", target, resolve_targets(fault, Selector(), target, 0), timeout_s=0.5)
            if fails:
                with pytest.raises(ToxiproxyError, match="did not answer within 0.5s"):
                    fault.revert(ctx)
            else:
                fault.revert(ctx)
            ctx.close()
