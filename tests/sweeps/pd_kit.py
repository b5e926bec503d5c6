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
        "trace_id": f"{n + 1:032x}",
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


def _span(trace: str, n: int, service: str, name: str, start: float, ms: float, **attributes: object) -> str:
    start_ns = int(start * 1e9)
    return json.dumps(
        {
            "trace_id": trace,
            "span_id": f"{n:016x}",
            "parent_span_id": None,
            "name": name,
            "kind": "INTERNAL",
            "service": service,
            "start_ns": start_ns,
            "end_ns": start_ns + int(ms * 1e6),
            "duration_ms": ms,
            "status": {"code": "UNSET", "message": None},
            "attributes": attributes,
        }
    )


def write_spans(root: Path, entry: dict, prefill_leg_ms: float, decode_queue_ms: float) -> None:
    """The router's prefill leg and KV transfer spans and the decode worker's ``llm_request`` (with its time in
    queue) for every request of one split's run directory (``entry``: its ``sweep.json`` entry)."""
    run_dir = root / entry["run_dir"]
    lines = []
    for line in (run_dir / "requests.jsonl").read_text().splitlines():
        request = json.loads(line)
        trace, start, n = request["trace_id"], request["intended_ts"], 3 * len(lines)
        lines += [
            _span(trace, n + 1, "drill-router", "POST prefill", start, prefill_leg_ms),
            _span(trace, n + 2, "drill-router", "kv_transfer", start + prefill_leg_ms / 1e3, 2.0),
            _span(
                trace,
                n + 3,
                "drill-replica-3",
                "llm_request",
                start + prefill_leg_ms / 1e3,
                decode_queue_ms + 600.0,
                **{"gen_ai.request.max_tokens": TOKENS, "gen_ai.latency.time_in_queue": decode_queue_ms / 1e3},
            ),
        ]
    (run_dir / "spans.jsonl").write_text("\n".join(lines) + "\n")


def write_pd_sweep(root: Path, splits: dict[tuple[int, int], list[float | None]], **kwargs: object) -> Path:
    """A sweep over ``target.config.topology.ratio`` with ``{(prefill, decode): [TTFT ms or None (failed), ...]}``."""
    root.mkdir(parents=True, exist_ok=True)
    entries = [write_split(root, split, ttfts, **kwargs) for split, ttfts in splits.items()]  # type: ignore[arg-type]
    record = {"variable": "target.config.topology.ratio", "values": [e["value"] for e in entries], "variants": entries}
    (root / "sweep.json").write_text(json.dumps(record))
    return root
