"""``replica_crash`` and ``replica_pause`` through process signals, in ``drill run`` against a real ``llama-server``.

The server runs under ``drill supervise`` (tests/llamacpp/conftest.py), which keeps its PID file and starts it
again after a crash; the drill's ``kind: openai`` target names that PID file and says ``supervised: true``. The
server exports ``llamacpp:*`` metrics, which the reports map to quantities, and no spans, so the checks that need
spans are INCONCLUSIVE and say so (and ``retry_budget``, which only adds spans to the client's view, says what it
could not see). Each drill is short (12 s of phases, about 20 s in all).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from drill.report.quantities import metric_used, phase_quantities
from drill.rundir.evidence import RunEvidence
from drill.rundir.journal import read_journal
from drill.rundir.records import RequestRecord
from drill.serving_metrics import QUANTITIES
from tests.llamacpp.conftest import LlamaServer

pytestmark = [pytest.mark.llamacpp, pytest.mark.integration]

NO_SPANS = "the target exported no spans"
PHASES = {"cold_start": {"timeout": "30s"}, "warmup": "1s", "baseline": "3s", "fault": "5s", "recovery": "3s"}


def _drill(name: str, server: LlamaServer, fault: dict, checks: list[dict], replay: bool = False) -> dict:
    return {
        "schema": "drill/v1",
        "name": name,
        "seed": 5,
        "target": {
            "kind": "openai",
            "config": {
                "url": server.url,
                "model": server.alias,
                "supervised": True,
                "startup_timeout": "30s",
                "replicas": [{"name": "llama-0", "url": server.url, "pid_file": str(server.pid_file)}],
            },
        },
        "scenario": {
            "name": f"{name}-chat",
            "seed": 3,
            "tokenizer": "words",  # prompt lengths do not matter here; token-exact prompts: test_token_exact.py
            "pools": [
                {
                    "name": "chat",
                    "endpoint": "chat",
                    "stream": True,
                    "arrival": {"process": "poisson", "rate": 10},
                    "input_tokens": {"dist": "fixed", "value": 64},
                    "output_tokens": {"dist": "fixed", "value": 24},
                    "timeout": "15s",
                    "retry": {"attempts": 0},
                    "slo": {"ttft_p95": "1s"},
                }
            ],
        },
        "phases": {**PHASES, "replay": replay},
        "faults": [fault],
        "checks": checks,
        "otlp": {"host": "127.0.0.1", "port": 0},
        "allowed_hosts": [],
    }


def _run(drill: dict, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path, float]:
    path = tmp_path / f"{drill['name']}.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    env = {**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "drill", "run", str(path), "--out", str(tmp_path / "out"), "--no-progress"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    took = time.monotonic() - start
    runs = list((tmp_path / "out").glob(f"{drill['name']}/*"))
    assert len(runs) == 1, done.stdout + done.stderr
    return done, runs[0], took


def _verdicts(run_dir: Path) -> dict[str, dict]:
    return {v["name"]: v for v in json.loads((run_dir / "verdicts.json").read_text())["checks"]}


def _events(run_dir: Path, kind: str) -> list:
    return [e for e in read_journal(run_dir / "journal.jsonl") if e.event == kind]


def _ttfts(records: list[RequestRecord]) -> list[float]:
    return [r.ttft_ms for r in records if r.ok and r.ttft_ms is not None]


def test_replica_crash_kills_the_server_the_supervisor_restarts_it_and_the_drill_judges_it(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    before = llama_server.pid
    fault = {
        "name": "kill",
        "kind": "replica_crash",
        "start": "1s",
        "duration": "3s",
        "params": {"method": "process", "signal": "SIGKILL", "expect_restart": True, "restart_timeout": "20s"},
    }
    checks = [
        {"kind": "slo", "name": "baseline-slo", "params": {"phase": "baseline", "min_requests": 10}},
        {"kind": "error_rate", "name": "recovered", "params": {"phase": "recovery", "max": 0.05}},
        {"kind": "first_abnormal_span"},
        {"kind": "duplicate_side_effects"},
        {"kind": "retry_budget"},
    ]
    done, run_dir, took = _run(_drill("llamacpp-crash", llama_server, fault, checks), tmp_path)
    print(f"crash drill: {took:.1f} s")
    verdicts = _verdicts(run_dir)
    assert verdicts["fault_landed"]["status"] == "PASS", done.stdout + done.stderr
    (verified,) = _events(run_dir, "fault_verified")
    assert f"process {before} killed (SIGKILL); back as pid" in verified.get("summary"), verified
    print(f"crash verified: {verified.get('summary')}")
    assert [e.get("fault_id") for e in _events(run_dir, "fault_reverted")] == ["kill"]
    assert llama_server.pid != before
    llama_server.wait_healthy()
    assert verdicts["baseline-slo"]["status"] == "PASS", verdicts["baseline-slo"]
    assert verdicts["recovered"]["status"] == "PASS", verdicts["recovered"]
    for name in ("first_abnormal_span", "duplicate_side_effects"):
        assert verdicts[name]["status"] == "INCONCLUSIVE", verdicts[name]
        assert NO_SPANS in verdicts[name]["message"], verdicts[name]
    budget = verdicts["retry_budget"]  # judged from the client's records, saying what it could not see
    assert budget["status"] == "PASS" and any(NO_SPANS in note for note in budget["notes"]), budget
    evidence = RunEvidence(run_dir)
    fault_phase = evidence.requests_in("fault")
    assert any(not r.ok for r in fault_phase), "the kill failed no request in flight"
    assert done.returncode == 1, done.stdout + done.stderr  # exit 1: checks that are not PASS (the two above)


def test_replica_pause_stops_the_server_ttft_grows_by_the_pause_and_recovers(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    fault = {"name": "freeze", "kind": "replica_pause", "start": "1s", "duration": "3s"}
    fault["params"] = {"method": "process"}
    checks = [
        {"kind": "slo", "name": "baseline-slo", "params": {"phase": "baseline", "min_requests": 10}},
        {"kind": "slo", "name": "recovery-slo", "params": {"phase": "recovery", "min_requests": 10}},
    ]
    done, run_dir, took = _run(_drill("llamacpp-pause", llama_server, fault, checks), tmp_path)
    print(f"pause drill: {took:.1f} s")
    verdicts = _verdicts(run_dir)
    assert verdicts["fault_landed"]["status"] == "PASS", done.stdout + done.stderr
    (verified,) = _events(run_dir, "fault_verified")
    assert "process stopped (state T)" in verified.get("summary")
    (reverted,) = _events(run_dir, "fault_reverted")
    evidence = RunEvidence(run_dir)
    baseline, fault_phase = _ttfts(evidence.requests_in("baseline")), _ttfts(evidence.requests_in("fault"))
    recovery = _ttfts(evidence.requests_in("recovery"))
    base_p50, worst, rec_p50 = statistics.median(baseline), max(fault_phase), statistics.median(recovery)
    print(f"TTFT p50 baseline {base_p50:.1f} ms, worst in the pause {worst:.0f} ms, p50 recovery {rec_p50:.1f} ms")
    assert worst > 1500, "a request sent during a 3 s SIGSTOP waited less than 1.5 s for its first token"
    assert worst > 20 * base_p50
    assert rec_p50 < max(5 * base_p50, 200), "TTFT did not come back after SIGCONT"
    assert verdicts["baseline-slo"]["status"] == "PASS" and verdicts["recovery-slo"]["status"] == "PASS", verdicts
    assert done.returncode == 0, done.stdout + done.stderr
    assert reverted.get("fault_id") == "freeze" and llama_server.healthy()
    _assert_llamacpp_metrics(evidence)


def _assert_llamacpp_metrics(evidence: RunEvidence) -> None:
    """The run's scrapes of llama-server's /metrics, read by quantity through the llama.cpp names."""
    used = {q: metric_used(evidence, q) for q in QUANTITIES}
    assert used == {
        "queue_depth": "llamacpp:requests_deferred",
        "running": "llamacpp:requests_processing",
        "kv_cache_usage": None,  # this llama.cpp exports no KV-cache share: not available, never 0
        "prefix_cache_hit_rate": None,
        "preemptions": None,
        "ttft_seconds": None,
        "admission_rejections": None,  # llama.cpp has no admission control
        "queue_time_seconds": None,
        "generation_tokens_per_s": "llamacpp:tokens_predicted_total",
        # no KV connector: llama.cpp serves aggregated
        "kv_transfer_seconds": None,
        "kv_transfer_bytes": None,
        "kv_transfer_failures": None,
        "kv_transfers_pending": None,
    }
    figures = phase_quantities(evidence)
    print({phase: {q: v for q, v in by.items() if v is not None} for phase, by in figures.items()})
    # 10 requests/s of 24 tokens each: well above zero in the baseline, and never more slots busy than there are
    assert figures["baseline"]["generation_tokens_per_s"] > 30
    assert figures["baseline"]["kv_cache_usage"] is None
    assert 0 <= figures["baseline"]["running"] <= 4
