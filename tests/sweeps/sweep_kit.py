"""Sweep run directories written by hand: ``sweep.json`` and one variant run directory per value, each with a
journal (a 10 s baseline, then a fault phase whose fault is injected at its start and reverted at its end) and
the requests the load generator would have written, served at a TPOT given per link state."""

from __future__ import annotations

import json
from pathlib import Path

T0 = 1_800_000_000.0
PHASE_S = 10.0
TTFT_MS = 100.0
TOKENS = 8
EMBEDDED_L4 = {"model": "llama-3-8b", "gpu": "l4", "replicas": 1, "links": {"replica_proxies": False}}
LINK_FAULT = {"name": "tp-links", "kind": "nccl_degradation", "params": {}}
LINK_PARAMS = {"method": "toxiproxy", "latency_ms": 1, "direction": "downstream", "link_kinds": ["tp"]}


def _event(seq: int, event: str, ts: float, **data) -> str:
    return json.dumps({"seq": seq, "event": event, "ts": ts, "mono": ts - T0, "by": "runner", **data})


def _journal(faulted: bool) -> str:
    lines = [
        _event(1, "phase_started", T0, phase="baseline", planned_s=PHASE_S),
        _event(2, "phase_ended", T0 + PHASE_S, phase="baseline", elapsed_s=PHASE_S),
        _event(3, "phase_started", T0 + PHASE_S, phase="fault", planned_s=PHASE_S),
    ]
    if faulted:
        lines += [
            _event(4, "fault_injected", T0 + PHASE_S, fault_id="tp-links", kind="nccl_degradation"),
            _event(5, "fault_verified", T0 + PHASE_S + 0.01, fault_id="tp-links", summary="toxics listed"),
            _event(6, "fault_reverted", T0 + 2 * PHASE_S, fault_id="tp-links"),
        ]
    lines.append(_event(7, "phase_ended", T0 + 2 * PHASE_S, phase="fault", elapsed_s=PHASE_S))
    return "\n".join(lines) + "\n"


def _request(n: int, start: float, tpot_ms: float) -> str:
    offsets = [TTFT_MS + i * tpot_ms for i in range(TOKENS)]
    return json.dumps(
        {
            "request_id": f"r{n}-1",
            "logical_id": f"chat-{n}",
            "pool": "chat",
            "attempt": 1,
            "intended_ts": start,
            "sent_ts": start,
            "schedule_lag_ms": 0.0,
            "status": 200,
            "ttft_ms": TTFT_MS,
            "e2e_ms": offsets[-1],
            "chunk_offsets_ms": offsets,
            "prompt_tokens": 400,
            "completion_tokens": TOKENS,
            "payload_digest": f"sha256:{n:04d}",
        }
    )


def _requests(healthy_ms: float, degraded_ms: float, per_state: int) -> str:
    lines = []
    for state, (offset, tpot) in enumerate(((0.0, healthy_ms), (PHASE_S, degraded_ms))):
        for i in range(per_state):  # one a second from 0.5 s in: each served well inside its window
            lines.append(_request(state * 100 + i, T0 + offset + 0.5 + i * (8.0 / max(per_state, 1)), tpot))
    return "\n".join(lines) + "\n"


def write_variant(root: Path, label: str, tp: int, healthy_ms: float, degraded_ms: float, per_state: int = 8) -> dict:
    """One variant's run directory under ``root/variants/<label>/``; returns its ``sweep.json`` entry."""
    run_dir = root / "variants" / label / "drill" / "run"
    run_dir.mkdir(parents=True)
    faulted = tp > 1
    (run_dir / "journal.jsonl").write_text(_journal(faulted))
    (run_dir / "requests.jsonl").write_text(_requests(healthy_ms, degraded_ms, per_state))
    config = {**EMBEDDED_L4, "engine": {"tensor_parallel_size": tp}}
    resolved = {
        "drill": {
            "target": {"kind": "embedded", "config": config},
            "faults": [LINK_FAULT] if faulted else [],
            "slo": {"ttft_p95": "1s", "tpot_p95": "100ms"},
        },
        "scenario": {"pools": [{"name": "chat"}]},
        "target_params": config,
        "fault_params": [LINK_PARAMS] if faulted else [],
    }
    (run_dir / "resolved.json").write_text(json.dumps(resolved))
    skipped = [] if faulted else ["tp-links: fault 'nccl_degradation' needs toxiproxy.tp_link"]
    return {
        "label": label,
        "value": tp,
        "run_dir": str(run_dir.relative_to(root)),
        "status": "completed",
        "exit_code": 0,
        "skipped_faults": skipped,
    }


def write_sweep(root: Path, tpots: dict[int, tuple[float, float]], per_state: int = 8) -> Path:
    """A sweep over TP with ``{tp: (healthy TPOT ms, degraded TPOT ms)}``."""
    root.mkdir(parents=True, exist_ok=True)
    entries = [write_variant(root, f"tp-{tp}", tp, h, d, per_state) for tp, (h, d) in tpots.items()]
    record = {"variable": "target.config.engine.tensor_parallel_size", "values": list(tpots), "variants": entries}
    (root / "sweep.json").write_text(json.dumps(record))
    return root
