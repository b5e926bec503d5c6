"""A ``pd-ratio`` sweep's figures: each prefill:decode split of the same workers, under the same load.

Read from the sweep's run directory alone (``sweep.json``, each variant's run directory), so ``pd_ratio.json``, the
report and the ``pd_ratio`` check see the same figures. A sweep is a P/D sweep when every measured variant's
target is a disaggregated stack (its resolved ``target_params`` has a ``topology``).

Per variant, over its **baseline phase** (the load at the drill's offered rate; ``fault`` and ``recovery`` may be
0 s): every logical request whose intended start falls in it counts, wherever it ended — a request still queued at
the end of the phase finishes in the drain or times out, so an overloaded split is charged its backlog:

- ``offered_rps``: those requests over the window's length; ``requests``/``served``/``failed``;
- ``ttft_p50_ms``/``ttft_p95_ms``, ``tpot_p50_ms``/``tpot_p95_ms`` of the served ones (vLLM bench's definitions);
- ``goodput_rps``: requests that met their pool's TTFT and TPOT SLO, per second of the window (a failed request
  meets none); ``slo_ratio``: the worst of the pool's SLO percentiles over its bound (TTFT p95 / ttft_p95 ...), the
  headroom that breaks a tie on goodput.

The **model** (embedded stack only; :mod:`drill.stack.inference.cost_model`) says which side is the bottleneck, at
the measured offered rate and mean planned lengths:

- prefill is compute-bound on the prompt: a prefill worker is busy ``compute(prompt)`` per request (a prefill batch
  shares the weight reads, not the FLOPs), so ``prefill_load = rate x compute(prompt) / P``;
- decode is memory-bound per step and batched: one step serves every sequence in the batch, and each request holds
  a batch slot for its whole output, so by Little's law a decode worker needs ``rate x output x step / D`` slots of
  its ``max_num_seqs``: ``decode_load = rate x output x step(batch) / (D x max_num_seqs)``.

Above 1 a side cannot keep up and its queue grows (on the prefill side TTFT waits for a prefill; on the decode side
for a batch slot). The predicted winner is the split whose busier side is least loaded. TTFT p50 is split into the
modelled prefill of the mean prompt, the modelled KV transfer (``prompt x KV bytes per token x 8 / link_gbps``),
the first decode step, and waiting (the rest, measured).

Where the run has spans (the stack exports them by default), the TTFT is also split as measured, per request
(medians over the window's requests): the router's ``POST prefill`` span (the prefill leg: the prefill worker's
queue and the prefill), its ``kv_transfer`` span (the decode worker's load of the blocks), and the decode worker's
queue (``gen_ai.latency.time_in_queue`` of its ``llm_request``: waiting for a batch slot).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from drill.rundir.evidence import PhaseWindow, RunEvidence
from drill.rundir.files import inside
from drill.rundir.records import RequestRecord
from drill.stack.config import StackConfig, parse_stack_config
from drill.stack.inference.cost_model import BatchShape, CostModel
from drill.stats import percentile
from drill.sweeps.scaling import read_sweep_record
from drill.traces.overhead import ROUTER_SERVICE
from drill.traces.run_traces import run_traces

__all__ = [
    "PD_RATIO_SCHEMA",
    "PdModel",
    "PdRatioTable",
    "PdVariant",
    "PdTtftSpans",
    "is_pd_sweep",
    "measure_pd_sweep",
    "model_pd",
]

PD_RATIO_SCHEMA = "llm-drill/pd-ratio/v1"
_MS = 1000.0
#: What a failed request's TTFT and TPOT count as in a percentile: over any bound (an hour).
_FAILED_MS = 3_600_000.0


@dataclass(frozen=True)
class PdModel:
    """The cost model's view of one split at the measured rate and mean lengths (see the module docstring)."""

    prefill_s: float  # one mean prompt's prefill step, alone
    prefill_busy_s: float  # what one request costs a prefill worker in a batch: its compute
    decode_step_s: float  # one decode step at the batch the split needs
    decode_batch: int
    kv_transfer_s: float
    prefill_load: float
    decode_load: float

    @property
    def bottleneck(self) -> str:
        return "prefill" if self.prefill_load >= self.decode_load else "decode"

    @property
    def peak_load(self) -> float:
        return max(self.prefill_load, self.decode_load)


@dataclass(frozen=True)
class PdTtftSpans:
    """Medians over the window's requests of where their TTFT went, from their spans (ms)."""

    traces: int  # requests of the window with a trace
    prefill_leg_ms: float | None  # the router's POST prefill span: prefill queue + prefill
    kv_transfer_ms: float | None  # the router's kv_transfer span
    decode_queue_ms: float | None  # the decode worker's wait for a batch slot


@dataclass(frozen=True)
class PdVariant:
    label: str
    value: Any
    run_dir: str
    status: str
    prefill: int
    decode: int
    window_s: float | None
    requests: int
    served: int
    failed: int
    offered_rps: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    goodput_rps: float | None = None
    slo_ratio: float | None = None  # worst p95 over its SLO bound (< 1: every bound held)
    mean_prompt_tokens: float | None = None
    mean_output_tokens: float | None = None
    model: PdModel | None = None
    spans: PdTtftSpans | None = None

    @property
    def split(self) -> str:
        return f"{self.prefill}P:{self.decode}D"

    @property
    def waiting_ms(self) -> float | None:
        """TTFT p50 less the modelled prefill, KV transfer and first decode step: time spent queued (measured)."""
        if self.ttft_p50_ms is None or self.model is None:
            return None
        m = self.model
        return max(0.0, self.ttft_p50_ms - (m.prefill_s + m.kv_transfer_s + m.decode_step_s) * _MS)


@dataclass(frozen=True)
class PdRatioTable:
    variable: str
    variants: tuple[PdVariant, ...]
    notes: tuple[str, ...] = ()

    def find(self, split: str) -> PdVariant | None:
        return next((v for v in self.variants if v.split == split), None)

    @property
    def predicted(self) -> PdVariant | None:
        """The split whose busier side the model loads least (None: no model for some variant)."""
        if not self.variants or any(v.model is None for v in self.variants):
            return None
        return min(self.variants, key=lambda v: v.model.peak_load if v.model else 0.0)

    def to_json(self) -> dict:
        predicted = self.predicted
        return {
            "schema": PD_RATIO_SCHEMA,
            "variable": self.variable,
            "predicted": predicted.split if predicted else None,
            "variants": [
                {
                    **asdict(v),
                    "split": v.split,
                    "waiting_ms": _round(v.waiting_ms),
                    "bottleneck": v.model.bottleneck if v.model else None,
                }
                for v in self.variants
            ],
            "notes": list(self.notes),
        }


def is_pd_sweep(run_dir: Path) -> bool:
    """True when every variant with a run directory ran a disaggregated embedded stack."""
    record = read_sweep_record(run_dir) or {}
    dirs = [inside(run_dir, str(v["run_dir"])) for v in record.get("variants") or [] if v.get("run_dir")]
    return bool(dirs) and all(_topology_config(RunEvidence(d)) is not None for d in dirs)


def measure_pd_sweep(run_dir: Path) -> PdRatioTable:
    """The figures of every variant in ``run_dir/sweep.json`` that ran a P/D stack."""
    record = read_sweep_record(run_dir) or {}
    variants, notes = [], []
    for item in record.get("variants") or []:
        path = inside(run_dir, str(item["run_dir"])) if item.get("run_dir") else None
        evidence = RunEvidence(path) if path is not None and (path / "journal.jsonl").is_file() else None
        config = _topology_config(evidence) if evidence is not None else None
        if evidence is None or config is None:
            notes.append(f"{item['label']}: no P/D run directory to measure ({item.get('status', 'not run')})")
            continue
        variants.append(_measure(item, evidence, config))
    return PdRatioTable(record.get("variable", ""), tuple(variants), tuple(notes))


def _topology_config(evidence: RunEvidence) -> StackConfig | None:
    resolved = evidence.resolved
    target = (resolved.get("drill") or {}).get("target") or {}
    params = resolved.get("target_params")
    if target.get("kind") != "embedded" or not isinstance(params, dict) or not params.get("topology"):
        return None
    return parse_stack_config(params)


def _last_attempts(records: list[RequestRecord], window: PhaseWindow) -> list[RequestRecord]:
    """Each logical request that was meant to start in the window, as its last attempt ended."""
    meant = {r.logical_id for r in records if r.attempt == 1 and window.contains(r.intended_ts)}
    last: dict[str, RequestRecord] = {}
    for r in records:
        if r.logical_id in meant and (r.logical_id not in last or r.attempt > last[r.logical_id].attempt):
            last[r.logical_id] = r
    return list(last.values())


def _measure(item: dict, evidence: RunEvidence, config: StackConfig) -> PdVariant:
    assert config.topology is not None  # _topology_config
    window = evidence.phases.get("baseline")
    base = dict(
        label=item["label"],
        value=item.get("value"),
        run_dir=item["run_dir"],
        status=item.get("status", ""),
        prefill=config.topology.prefill,
        decode=config.topology.decode,
    )
    if window is None or window.length_s <= 0:
        return PdVariant(**base, window_s=None, requests=0, served=0, failed=0)
    requests = _last_attempts(evidence.requests, window)
    served = [r for r in requests if r.ok]
    ttfts = [r.ttft_ms for r in served if r.ttft_ms is not None]
    tpots = [t for r in served if (t := r.tpot_ms) is not None]
    slo = _pool_slo(evidence, requests)
    rate = len(requests) / window.length_s
    prompt = _mean([r.planned_input_tokens or r.prompt_tokens for r in requests])
    output = _mean([r.planned_output_tokens or r.completion_tokens for r in requests])
    return PdVariant(
        **base,
        window_s=round(window.length_s, 3),
        requests=len(requests),
        served=len(served),
        failed=len(requests) - len(served),
        offered_rps=_round(rate, 3),
        ttft_p50_ms=_round(percentile(ttfts, 50)),
        ttft_p95_ms=_round(percentile(ttfts, 95)),
        tpot_p50_ms=_round(percentile(tpots, 50)),
        tpot_p95_ms=_round(percentile(tpots, 95)),
        goodput_rps=_round(sum(1 for r in served if _met(r, slo)) / window.length_s, 3),
        slo_ratio=_round(_slo_ratio(slo, ttfts, tpots, len(requests) - len(served)), 3),
        mean_prompt_tokens=_round(prompt, 1),
        mean_output_tokens=_round(output, 1),
        model=model_pd(config, rate, prompt, output) if prompt and output else None,
        spans=_span_split(evidence, requests),
    )


def _span_split(evidence: RunEvidence, requests: list[RequestRecord]) -> PdTtftSpans | None:
    """The measured split of TTFT from the requests' spans (None: the run has none)."""
    wanted = {r.trace_id for r in requests if r.trace_id}
    table = run_traces(evidence).table
    if not wanted or len(table) == 0:
        return None
    legs: dict[str, list[float]] = {"prefill": [], "kv": [], "queue": []}
    seen = set()
    for row in range(len(table)):
        span = table.span(row)
        if span.trace_id not in wanted:
            continue
        seen.add(span.trace_id)
        if span.service == ROUTER_SERVICE and span.name == "POST prefill":
            legs["prefill"].append(span.duration_ms)
        elif span.service == ROUTER_SERVICE and span.name == "kv_transfer":
            legs["kv"].append(span.duration_ms)
        elif span.name == "llm_request" and span.attributes.get("gen_ai.request.max_tokens") != 1:
            queue = span.attributes.get("gen_ai.latency.time_in_queue")
            if isinstance(queue, int | float):
                legs["queue"].append(queue * _MS)
    return PdTtftSpans(
        len(seen),
        _round(percentile(legs["prefill"], 50)),
        _round(percentile(legs["kv"], 50)),
        _round(percentile(legs["queue"], 50)),
    )


def _pool_slo(evidence: RunEvidence, requests: list[RequestRecord]) -> dict[str, float]:
    """The SLO (seconds) of the pool most requests came from; a P/D sweep's scenario has one pool."""
    pools = [r.pool for r in requests]
    pool = max(set(pools), key=pools.count) if pools else ""
    return evidence.slo_by_pool.get(pool, {})


def _bound(slo: dict[str, float], metric: str) -> tuple[float, float] | None:
    """(percentile, bound ms) of the pool's first SLO on ``metric`` (``ttft_p95: 2s`` -> (95, 2000))."""
    for key, seconds in slo.items():
        name, _, pct = key.partition("_p")
        if name == metric and pct.isdigit():
            return float(pct), seconds * _MS
    return None


def _met(record: RequestRecord, slo: dict[str, float]) -> bool:
    ttft, tpot = _bound(slo, "ttft"), _bound(slo, "tpot")
    if ttft is not None and (record.ttft_ms is None or record.ttft_ms > ttft[1]):
        return False
    value = record.tpot_ms
    return not (tpot is not None and value is not None and value > tpot[1])


def _slo_ratio(slo: dict[str, float], ttfts: list[float], tpots: list[float], failed: int) -> float | None:
    """The worst SLO percentile over its bound; a failed request counts as over every bound."""
    ratios = []
    for metric, values in (("ttft", ttfts), ("tpot", tpots)):
        bound = _bound(slo, metric)
        observed = percentile(values + [_FAILED_MS] * failed, bound[0]) if bound is not None else None
        if bound is not None and observed is not None:
            ratios.append(min(observed, _FAILED_MS) / bound[1])
    return max(ratios) if ratios else None


def model_pd(config: StackConfig, rate: float, prompt: float, output: float) -> PdModel:
    """The cost model's loads of the two sides of ``config``'s split at ``rate`` requests/s (see the docstring)."""
    assert config.topology is not None
    topology = config.topology
    engine = config.engine_of(topology.prefill)  # a decode worker's (topology.decode_engine over engine)
    prefill_cost, cost = (  # each side at its own TP/PP: worker 0 is a prefill worker
        CostModel(config.model_preset, config.gpu_preset, e.tensor_parallel_size, e.pipeline_parallel_size)
        for e in (config.engine_of(0), engine)
    )
    alone = prefill_cost.step_cost(BatchShape.prefill([max(1, round(prompt))]))
    context = max(1, round(prompt + output / 2))
    batch, step = 1, cost.step_cost(BatchShape.decode(1, context)).total_s
    for _ in range(3):  # the batch a decode worker needs, at the step that batch makes
        batch = max(1, min(engine.max_num_seqs, round(rate * output * step / topology.decode)))
        step = cost.step_cost(BatchShape.decode(batch, context)).total_s
    kv_bits = prompt * config.model_preset.kv_bytes_per_token * 8
    return PdModel(
        prefill_s=round(alone.total_s, 6),
        prefill_busy_s=round(alone.compute_s, 6),
        decode_step_s=round(step, 6),
        decode_batch=batch,
        kv_transfer_s=round(kv_bits / (topology.kv_transfer.link_gbps * 1e9), 6),
        prefill_load=round(rate * alone.compute_s / topology.prefill, 3),
        decode_load=round(rate * output * step / (topology.decode * engine.max_num_seqs), 3),
    )


def _mean(values: list[int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _round(value: float | None, digits: int = 2) -> float | None:
    return round(value, digits) if value is not None else None
