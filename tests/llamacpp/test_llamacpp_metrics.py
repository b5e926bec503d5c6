"""A real ``llama-server``: its per-request ``timings`` kept in the records and used as server truth (it exports no
spans), its ``llamacpp:*`` metrics read by quantity in stop conditions, and a quantity it does not export said to
be "not available", never read as 0.

One short ``drill run`` (about 10 s of phases) with two ``metric`` stop conditions: ``generation_tokens_per_s``
(llama.cpp's ``llamacpp:tokens_predicted_total``) fires in the fault phase; ``preemptions`` (llama.cpp has no such
counter) would fire on any value, 0 included, and must not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from drill.rundir.journal import read_journal
from drill.rundir.records import read_records
from tests.llamacpp.conftest import LlamaServer

pytestmark = [pytest.mark.llamacpp, pytest.mark.integration]


def _drill(server: LlamaServer) -> dict:
    return {
        "name": "llamacpp-metrics",
        "seed": 5,
        "target": {"kind": "openai", "config": {"url": server.url, "model": server.alias}},
        "scenario": {
            "seed": 3,
            "tokenizer": "words",  # prompt lengths do not matter here
            "pools": [
                {
                    "name": "chat",
                    "stream": True,
                    "arrival": {"process": "poisson", "rate": 5},
                    "input_tokens": {"dist": "fixed", "value": 48},
                    "output_tokens": {"dist": "fixed", "value": 16},
                    "timeout": "15s",
                    "retry": {"attempts": 0},
                    "slo": {"ttft_p95": "2s"},
                }
            ],
        },
        "phases": {"warmup": "1s", "baseline": "3s", "fault": "6s", "recovery": "1s", "replay": False},
        "stop_conditions": [
            {"kind": "metric", "metric": "preemptions", "above": -1, "for": "1s"},
            {"kind": "metric", "metric": "generation_tokens_per_s", "above": 1, "for": "1s"},
        ],
        "checks": [{"kind": "slo", "params": {"phase": "baseline", "min_requests": 5}}],
        "otlp": {"host": "127.0.0.1", "port": 0},
    }


def test_timings_kept_metrics_by_quantity_and_what_llamacpp_lacks(llama_server: LlamaServer, tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(_drill(llama_server), sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "drill", "run", str(path), "--out", str(tmp_path / "out"), "--no-progress"],
        cwd=tmp_path,
        env={**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    (run_dir,) = list((tmp_path / "out").glob("llamacpp-metrics/*"))
    journal = list(read_journal(run_dir / "journal.jsonl"))
    assert done.returncode in (0, 1), done.stdout + done.stderr

    # a quantity llama.cpp does not export: said once, never triggered (a 0 would have, above -1)
    notes = [
        e.get("message") for e in journal if e.event == "note" and "preemptions: not available" in e.get("message")
    ]
    assert len(notes) == 1 and "vllm:num_preemptions_total" in notes[0], notes
    assert (done.stdout + done.stderr).count("preemptions: not available") == 1  # and in the run's output
    stops = [e for e in journal if e.event == "stop_condition"]
    assert len(stops) == 1, stops
    # llama.cpp's own name, read by quantity
    assert stops[0].get("observed").startswith("generation_tokens_per_s (llamacpp:tokens_predicted_total) = ")
    assert stops[0].get("condition").startswith("generation_tokens_per_s above 1")

    # the server's timings in every successful record, consistent with its usage
    records = [r for r in read_records(run_dir / "requests.jsonl") if r.ok]
    assert len(records) >= 10
    for r in records:
        t = r.server_timings
        assert t is not None, r.request_id
        assert t.predicted_n == r.completion_tokens and t.prompt_n + (t.cache_n or 0) == r.prompt_tokens
        assert t.prompt_ms > 0 and t.predicted_ms > 0
        # the client cannot see its first token before the server finished the prompt (1 ms of clock rounding)
        assert r.ttft_ms - (r.schedule_lag_ms or 0) >= t.prompt_ms - 1.0, (r.ttft_ms, r.schedule_lag_ms, t)

    # no spans, so the measurement truth is client - server from those timings
    slo = next(v for v in json.loads((run_dir / "verdicts.json").read_text())["checks"] if v["kind"] == "slo")
    observed = slo["observed"]
    baseline = [r for r in records if r.server_timings is not None]
    assert 5 <= observed["measurement_truth.joined"] <= len(baseline)
    p50 = observed["measurement_truth.ttft_diff_ms.p50"]
    assert 0 <= p50 < 1000, observed
    assert any("with the server's own timings" in n for n in slo["notes"]), slo["notes"]
    print(f"client - server TTFT p50 {p50:.1f} ms over {observed['measurement_truth.joined']} requests")
