"""The runner's replay phase end to end: a real embedded stack refuses a queue flood, recovers, and the
refused requests plus the baseline controls are replayed and judged by ``recovery_replay``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from drill.rundir.journal import read_journal
from drill.rundir.records import read_records
from drill.rundir.replay_results import read_replay
from drill.rundir.samples import read_samples

pytestmark = pytest.mark.integration

DRILL = {
    "name": "replay-e2e",
    "seed": 21,
    "target": {
        "kind": "embedded",
        "config": {"replicas": 1, "engine": {"weight_load_time": "200ms", "max_num_seqs": 4, "max_num_queued_reqs": 4}},
    },
    "scenario": {
        "seed": 3,
        "arrival": {"process": "poisson", "rate": 4},
        "pools": [
            {
                "name": "chat",
                "input_tokens": {"dist": "fixed", "value": 40},
                "output_tokens": {"dist": "fixed", "value": 8},
                "slo": {"ttft_p95": "5s"},
            }
        ],
    },
    "otlp": {"port": 0},
    "phases": {
        "warmup": "1s",
        "baseline": "4s",
        "fault": "3s",
        "recovery": "3s",
        "replay": {"controls": 4, "max_samples": 8, "timeout": "30s"},
    },
    "faults": [
        {"name": "flood", "kind": "queue_flood", "start": "0.2s", "duration": "2s", "params": {"rate_multiplier": 40.0}}
    ],
    "checks": [{"kind": "recovery_replay"}],
}


def test_the_replay_phase_replays_refused_requests_and_controls(tmp_path: Path) -> None:
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(DRILL, sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "drill", "run", str(path), "--out", str(tmp_path / "out"), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    (run_dir,) = list((tmp_path / "out").glob("replay-e2e/*"))
    assert done.returncode in (0, 1), done.stdout + done.stderr
    samples = list(read_samples(run_dir / "failing_samples.jsonl"))
    assert samples, "the flood must have been refused"
    lines = list(read_replay(run_dir / "replay.jsonl"))
    originals = [line for line in lines if line.set == "original"]
    controls = [line for line in lines if line.set == "control"]
    assert 0 < len(originals) <= 8 and len({o.logical_id for o in originals}) == len(originals)
    assert len(controls) == 8 and {c.repetition for c in controls} == {1, 2}
    by_sample = {s.request_id: s for s in samples}
    records = {r.request_id: r for r in read_records(run_dir / "requests.jsonl")}
    for line in originals:
        assert line.payload_digest == by_sample[line.original_request_id].payload_digest
    for line in controls:
        baseline = records[line.original_request_id]
        assert line.payload_digest == baseline.payload_digest and baseline.output_digest
        assert line.output_digest == baseline.output_digest  # greedy: the same text as in the baseline
    ended = [
        e for e in read_journal(run_dir / "journal.jsonl") if e.event == "phase_ended" and e.get("phase") == "replay"
    ]
    summary = ended[0].get("summary")
    assert summary["originals"] == len(originals) and summary["controls"] == 4 and summary["rate"] > 1
    verdicts = {v["kind"]: v for v in json.loads((run_dir / "verdicts.json").read_text())["checks"]}
    replay = verdicts["recovery_replay"]
    assert replay["status"] == "PASS", replay
    assert replay["observed"]["originals_passed"] == len(originals)
