"""``drill run`` against a real ``llama-server`` through proxies the harness makes: slow_replica's effect and revert.

The target names the server only by ``upstream``: the harness starts its own Toxiproxy server, puts a proxy in
front of the server, and the drill talks to the proxy (one server, no router). The fault's effect (client TTFT up by
about the injected latency) and its revert (TTFT back to the baseline's) are measured from the run's request
records; after the run the proxy and the harness's Toxiproxy server are gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import httpx
import pytest
import yaml

from drill.rundir.evidence import RunEvidence
from drill.rundir.journal import read_journal
from drill.targets.proxies import HarnessProxyPlan
from tests.llamacpp.conftest import LlamaServer

REPO = Path(__file__).resolve().parents[2]
LATENCY_MS = 400


def _drill(server: LlamaServer) -> dict:
    replica = {"name": "llama-0", "upstream": f"127.0.0.1:{server.port}", "pid_file": str(server.pid_file)}
    return {
        "name": "llamacpp-proxies",
        "target": {"kind": "openai", "config": {"model": server.alias, "replicas": [replica]}},
        "scenario": {
            "seed": 3,
            "arrival": {"process": "poisson", "rate": 3},
            "pools": [
                {
                    "name": "chat",
                    "input_tokens": {"dist": "fixed", "value": 24},
                    "output_tokens": {"dist": "fixed", "value": 4},
                }
            ],
        },
        "phases": {"warmup": "1s", "baseline": "5s", "fault": "5s", "recovery": "5s", "replay": False},
        "otlp": {"port": 0},
        "faults": [
            {
                "name": "slow",
                "kind": "slow_replica",
                "start": "0s",
                "duration": "5s",
                "params": {"latency_ms": LATENCY_MS},
            }
        ],
    }


def _ttft_median_ms(evidence: RunEvidence, phase: str) -> tuple[float, int]:
    ttfts = [r.ttft_ms for r in evidence.requests_in(phase) if r.status == 200 and r.ttft_ms is not None]
    assert len(ttfts) >= 5, f"only {len(ttfts)} good requests in {phase}"
    return median(ttfts), len(ttfts)


def test_slow_replica_through_harness_made_proxies_raises_ttft_and_reverts(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(_drill(llama_server), sort_keys=False))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "drill", "run", str(path), "--out", str(tmp_path / "out"), "--no-progress"],
        cwd=tmp_path,
        env={**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert "harness proxy: replica llama-0: the drill talks to 127.0.0.1:" in done.stderr  # printed at run start
    (run_dir,) = list((tmp_path / "out" / "llamacpp-proxies").iterdir())

    evidence = RunEvidence(run_dir, {})
    baseline, n_base = _ttft_median_ms(evidence, "baseline")
    faulted, n_fault = _ttft_median_ms(evidence, "fault")
    recovered, n_rec = _ttft_median_ms(evidence, "recovery")
    print(
        f"\nTTFT median: baseline {baseline:.1f} ms (n={n_base}), fault {faulted:.1f} ms (n={n_fault}), "
        f"recovery {recovered:.1f} ms (n={n_rec}); injected {LATENCY_MS} ms; drill run {wall_s:.1f} s"
    )
    assert 0.75 * LATENCY_MS <= faulted - baseline <= 1.5 * LATENCY_MS, "the fault adds about its latency to TTFT"
    assert recovered - baseline <= 0.25 * LATENCY_MS, "after the revert TTFT is back to the baseline's"

    entries = list(read_journal(run_dir / "journal.jsonl"))
    (starting,) = [e for e in entries if e.event == "target_starting"]
    plan = HarnessProxyPlan.model_validate(starting.get("teardown"))
    ready = next(e for e in entries if e.event == "target_ready")
    (replica,) = ready.get("target")["replicas"]
    assert replica["proxy"] == plan.proxies[0].name and replica["direct_url"] == llama_server.url
    assert [e.by for e in entries if e.event == "target_stopped"] == ["runner"]
    verdicts = {v["name"]: v["status"] for v in json.loads((run_dir / "verdicts.json").read_text())["checks"]}
    assert verdicts["fault_landed"] == "PASS"

    assert plan.server is not None and not (run_dir / "toxiproxy" / "server.json").exists()
    with pytest.raises(httpx.TransportError):  # the proxy (and its server) are gone
        httpx.get(f"{replica['url']}/health", trust_env=False, timeout=2)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{plan.url}/version", trust_env=False, timeout=2)
    assert llama_server.healthy()
