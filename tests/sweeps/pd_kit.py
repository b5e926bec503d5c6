"""Sweeps of P/D splits written by hand: ``sweep.json`` and one variant run directory per split, each with a
journal (a 10 s baseline phase) and the requests the load generator would have written, one every 0.5 s, each
with the TTFT given for its split (and a fixed TPOT), or failed."""

from __future__ import annotations

import json
from pathlib import Path

T0 = 1_800_000_000.0
BASELINE_S = 10.0
TOKENS = 8
TPOT_MS = 75.0
SLO = {"ttft_p95": "2s", "tpot_p95": "150ms"}


def _journal() -> str:
    events = [
        {"seq": 1, "event": "phase_started", "ts": T0, "phase": "baseline", "planned_s": BASELINE_S},
        {"seq": 2, "event": "phase_ended", "ts": T0 + BASELINE_S, "phase": "baseline", "elapsed_s": BASELINE_S},
    ]
    return "".join(json.dumps({"mono": e["ts"] - T0, "by": "runner", **e}) + "\n" for e in events)


def _request(n: int, ttft_ms: float | None, prompt: int) -> str:
    start = T0 + 0.25 + n * 0.5
    record: dict = {
        "request_id": f"r{n}-1",
        "logical_id": f"docs-{n}",
        "pool": "docs",
        "attempt": 1,
        "intended_ts": start,
        "sent_ts": start,
        "schedule_lag_ms": 0.0,
        "planned_input_tokens": prompt,
        "planned_output_tokens": TOKENS,
        "payload_digest": f"sha256:{n:04d}",
    }
    if ttft_ms is None:
        record.update(status=None, error="timeout")
    else:
        offsets = [ttft_ms + i * TPOT_MS for i in range(TOKENS)]
        record.update(
            status=200,
            ttft_ms=ttft_ms,
            e2e_ms=offsets[-1],
            chunk_offsets_ms=offsets,
            prompt_tokens=prompt,
            completion_tokens=TOKENS,
        )
    return json.dumps(record)


def write_split(
    root: Path, split: tuple[int, int], ttfts: list[float | None], *, prompt: int = 1600, kind: str = "embedded"
) -> dict:
    """One split's run directory under ``root/variants/``; returns its ``sweep.json`` entry."""
    prefill, decode = split
    label = f"pd-{prefill}p_{decode}d"
    run_dir = root / "variants" / label / "pd-ratio" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "journal.jsonl").write_text(_journal())
    (run_dir / "requests.jsonl").write_text("".join(_request(i, t, prompt) + "\n" for i, t in enumerate(ttfts)))
    config = {
        "model": "llama-3-8b",
        "gpu": "l4",
        "engine": {"max_num_seqs": 8},
        "topology": {"prefill": prefill, "decode": decode},
    }
    resolved = {
        "drill": {"target": {"kind": kind, "config": config}, "faults": []},
        "scenario": {"pools": [{"name": "docs", "slo": SLO}]},
        "target_params": config,
    }
    (run_dir / "resolved.json").write_text(json.dumps(resolved))
    return {
        "label": label,
        "value": f"{prefill}P:{decode}D",
        "run_dir": str(run_dir.relative_to(root)),
        "status": "completed",
        "exit_code": 0,
        "skipped_faults": [],
    }


def write_pd_sweep(root: Path, splits: dict[tuple[int, int], list[float | None]], **kwargs: object) -> Path:
    """A sweep over ``target.config.topology.ratio`` with ``{(prefill, decode): [TTFT ms or None (failed), ...]}``."""
    root.mkdir(parents=True, exist_ok=True)
    entries = [write_split(root, split, ttfts, **kwargs) for split, ttfts in splits.items()]  # type: ignore[arg-type]
    record = {"variable": "target.config.topology.ratio", "values": [e["value"] for e in entries], "variants": entries}
    (root / "sweep.json").write_text(json.dumps(record))
    return root
