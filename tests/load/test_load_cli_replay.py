"""``drill load`` end to end, its safety refusals, and the byte-for-byte replay of failed requests."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from loadkit import run_load, scenario

from drill.load.replay import replay_failing
from drill.load.schedule import build_schedule, with_total_rate
from drill.rundir.records import read_records
from drill.rundir.samples import read_samples
from drill.spec.loader import load_scenario

pytestmark = pytest.mark.integration

SCENARIO = """\
seed: 4
arrival: {process: poisson, rate: 10}
pools:
  - name: chat
    input_tokens: {dist: fixed, value: 30}
    output_tokens: {dist: fixed, value: 5}
    slo: {ttft_p95: 2s}
"""


def _drill(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drill", *args], capture_output=True, text=True, timeout=120)


def test_drill_load_prints_the_summary_as_json(sse_server, tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "run"
    result = _drill(
        "load",
        str(path),
        "--target",
        sse_server.url,
        "--duration",
        "1500ms",
        "--rate",
        "40",
        "--out",
        str(out),
        "--json",
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    expected = len(build_schedule(with_total_rate(load_scenario(path)[0], 40, 1.5), 1.5, 4).requests)
    assert doc["load"]["scheduled"] == doc["load"]["sent"] == expected > 30
    group = next(g for g in doc["report"]["groups"] if g["pool"] == "chat")
    assert group["ok"] == expected and group["slo"][0]["key"] == "ttft_p95" and group["slo"][0]["met"]
    assert group["ttft"]["percentiles"]["p99.9"] is not None
    assert len(list(read_records(out / "requests.jsonl"))) == expected
    assert json.loads((out / "load-summary.json").read_text())["load"] == doc["load"]
    assert doc["shortfall"] is None and "fewer requests than planned" not in result.stderr


def test_drill_load_warns_when_it_sent_fewer_requests_than_planned(start_sse_server, tmp_path: Path) -> None:
    server = start_sse_server(gap_ms=50)  # 20 tokens take 1 s: two in flight at once cannot keep up with 40/s
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("value: 5", "value: 20") + "max_in_flight: 2\n")
    out = tmp_path / "run"
    argv = ("load", str(path), "--target", server.url, "--duration", "1s", "--rate", "40", "--out", str(out))
    result = _drill(*argv, "--json", "--no-progress")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)  # the warning goes to stderr: stdout stays one JSON document
    drops = doc["load"]["client_drops"]
    assert drops > 10 and doc["load"]["sent"] + drops == doc["load"]["scheduled"]
    expected = f"sent fewer requests than planned: {doc['load']['sent']} of {doc['load']['scheduled']} planned"
    assert doc["shortfall"].startswith(expected) and f"{drops} dropped at max_in_flight" in doc["shortfall"]
    assert "warning: " + expected in result.stderr


def test_drill_load_refuses_bad_input_before_starting_anything(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "run"
    remote = _drill("load", str(path), "--target", "http://10.1.2.3:8000", "--out", str(out))
    assert remote.returncode == 2 and "--allow-host 10.1.2.3" in remote.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO.replace("rate: 10", "rate: fast"))
    invalid = _drill("load", str(bad), "--target", "http://127.0.0.1:9", "--out", str(out))
    assert invalid.returncode == 2 and f"{bad}:2:" in invalid.stderr
    replay = _drill("load", "azure-conv-replay", "--target", "http://127.0.0.1:9", "--rate", "5", "--out", str(out))
    assert replay.returncode == 2 and "speedup" in replay.stderr
    assert not out.exists()


def test_failed_requests_replay_byte_for_byte(sse_server, tmp_path: Path) -> None:
    sse_server.configure(fail_status=503, fail_every=1)
    run = run_load(sse_server.url, scenario(15, out=3), 1.0, tmp_path / "run")
    assert run.samples and len(run.samples) == len(run.records) == run.summary.errors["refused"]
    sse_server.configure(fail_status=0)
    before = len(sse_server.log())
    out = tmp_path / "run" / "replay.jsonl"
    summary = replay_failing(
        tmp_path / "run" / "failing_samples.jsonl", out, sse_server.url, concurrency=4, timeout_s=10, max_samples=1000
    )
    assert summary.replayed == len(run.samples) and summary.outcomes == {"ok": len(run.samples)}
    assert summary.reproduced == 0 and summary.skipped_digest_mismatch == 0
    replays = {e["request_id"]: e for e in sse_server.log()[before:]}
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    originals = {r.request_id: r for r in run.records}
    for line in lines:
        original = originals[line["original_request_id"]]
        entry = replays[line["request_id"]]
        assert line["request_id"] == original.request_id + "-replay"
        assert "sha256:" + entry["body_sha256"] == original.payload_digest  # the same bytes
        assert line["original_trace_id"] == original.trace_id != line["trace_id"]
        assert entry["traceparent"].split("-")[1] == line["trace_id"]
        assert entry["idempotency_key"] == original.idempotency_key + "-replay"
        assert line["chunks"] == 4 and line["completion_tokens"] == 3


def test_replay_can_reuse_the_key_and_skips_altered_samples(sse_server, tmp_path: Path) -> None:
    sse_server.configure(fail_status=503, fail_every=1)
    run = run_load(sse_server.url, scenario(10, out=2), 0.6, tmp_path / "run")
    samples_path = tmp_path / "run" / "failing_samples.jsonl"
    lines = samples_path.read_text().splitlines()
    tampered = json.loads(lines[0])
    tampered["body_b64"] = "e30="  # "{}": no longer the recorded digest
    samples_path.write_text("\n".join([json.dumps(tampered)] + lines[1:]) + "\n")
    before = len(sse_server.log())
    summary = replay_failing(
        samples_path,
        tmp_path / "replay.jsonl",
        sse_server.url,
        concurrency=2,
        timeout_s=10,
        max_samples=2,
        same_idempotency_key=True,
    )
    assert summary.skipped_digest_mismatch == 1 and summary.replayed == 2
    assert summary.outcomes == {"refused": 2} and summary.reproduced == 2
    keys = {e["idempotency_key"] for e in sse_server.log()[before:]}
    assert keys <= {s.idempotency_key for s in read_samples(samples_path)}
    assert hashlib.sha256(b"{}").hexdigest() not in {e["body_sha256"] for e in sse_server.log()[before:]}
    assert len(run.records) >= 3
