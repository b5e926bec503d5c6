"""A sweep's figures: each variant in its two link states, beside the embedded stack's cost model.

Read from the sweep's run directory alone (``sweep.json`` and each variant's run directory), so ``scaling.json``,
the report and the ``tp_scaling`` check all see the same figures and a past sweep can be measured again.

Two states per variant, each a window of its run:

- **healthy**: the baseline phase (no fault);
- **degraded**: the fault window (the first injection to the last revert); a variant whose faults were left out
  (at TP=1 there is no TP link) is measured over its fault phase and marked as having no link to degrade.

In each window only requests served *entirely* inside it count for TPOT and TTFT (intended start and last byte
both in it), so no request mixes the two states. Per window:

- ``tpot_p50_ms``/``tpot_p95_ms`` and ``ttft_*``: the client's TPOT and TTFT (vLLM bench's definitions);
- ``stream_tokens_per_s``: one request's decode speed, ``1000 / tpot_p50_ms`` (what TP buys a user);
- ``output_tokens_per_s``: output tokens delivered in the window (every streamed chunk whose arrival falls in
  it): open-loop load delivers what it offers until the replica saturates, so equal figures mean "kept up";
- ``goodput_rps``: requests per second served entirely in the window that met their pool's TTFT and TPOT SLO;
- ``mean_decoding``: the mean number of requests decoding at once (their decode intervals over the window).

The speedup of a variant over the first (the reference, TP=1) in a state is the reference's TPOT p50 over the
variant's: above 1 parallelism pays; below 1 communication overhead has cancelled the gain.

The prediction (embedded stack only) is the cost model's decode step at the measured mean batch and context
(``drill.stack.inference.cost_model``: ``step = pp·stage + comm + overhead``, TP dividing the stage's memory and
compute, every step paying ``2·layers`` all-reduces) and the step-time increase the degraded link adds
(``drill.stack.interconnect.link_model.predict_step_increase``: per all-reduce round, the toxic's latency per
delayed direction plus bytes over a bandwidth cap). The decode step is TPOT's floor: prefills that interleave
with decode (chunked prefill) lengthen the steps a request decodes in.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drill.api import LinkKind
from drill.backends.toxiproxy import Stream
from drill.errors import InputError
from drill.rundir.evidence import PhaseWindow, RunEvidence
from drill.rundir.files import inside, read_json
from drill.rundir.records import RequestRecord
from drill.stack.config import parse_stack_config
from drill.stack.inference.cost_model import BatchShape, CostModel
from drill.stack.interconnect.link_model import LinkToxic, predict_step_increase
from drill.stats import percentile

if TYPE_CHECKING:
    from drill.stack.inference.cost_model import ExchangePlan

__all__ = [
    "SCALING_SCHEMA",
    "Prediction",
    "ScalingTable",
    "StateFigures",
    "VariantFigures",
    "measure_sweep",
    "read_sweep_record",
]

SCALING_SCHEMA = "llm-drill/scaling/v1"
STATES = ("healthy", "degraded")


@dataclass(frozen=True)
class StateFigures:
    """One variant in one link state (see the module docstring for each figure)."""

    state: str
    window_s: float | None
    requests: int  # served entirely in the window
    failed: int  # intended start in the window, not served
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    stream_tokens_per_s: float | None = None
    output_tokens_per_s: float | None = None
    goodput_rps: float | None = None
    mean_decoding: float | None = None
    mean_context_tokens: float | None = None
    link: str = ""  # what the links were: "healthy", the fault(s) in place, or why there was none


@dataclass(frozen=True)
class Prediction:
    """The cost model's decode step for one variant at its measured healthy batch, ms."""

    batch: int
    context_tokens: int
    memory_ms: float
    compute_ms: float
    stage_ms: float  # one TP shard's step: softmax3(memory, compute)
    comm_ms: float  # modelled all-reduces of a healthy link
    overhead_ms: float
    step_ms: float
    link_increase_ms: float | None  # what the degraded link adds per step (None: no link fault)


@dataclass(frozen=True)
class VariantFigures:
    label: str
    value: Any
    run_dir: str  # relative to the sweep's run directory
    status: str
    exit_code: int | None
    skipped_faults: tuple[str, ...]
    healthy: StateFigures
    degraded: StateFigures
    prediction: Prediction | None = None
    requests_sent: int = 0  # logical requests the load sent (the load stops on the clock: the tail may differ)

    def state(self, name: str) -> StateFigures:
        return self.healthy if name == "healthy" else self.degraded


@dataclass(frozen=True)
class ScalingTable:
    """Every variant's figures, in the sweep's order; the first variant is the reference of the speedups."""

    variable: str
    variants: tuple[VariantFigures, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: Every variant was sent the same requests (ids and payload bytes, in schedule order) up to the shortest's end.
    same_request_set: bool = True
    request_set: str = ""  # what the comparison found, in words

    @property
    def reference(self) -> VariantFigures | None:
        return self.variants[0] if self.variants else None

    def find(self, value: Any) -> VariantFigures | None:
        return next((v for v in self.variants if v.value == value), None)

    def speedup(self, state: str, variant: VariantFigures) -> float | None:
        """The reference's TPOT p50 over ``variant``'s in ``state`` (> 1: the variant is faster)."""
        ref = self.reference
        if ref is None:
            return None
        base, mine = ref.state(state).tpot_p50_ms, variant.state(state).tpot_p50_ms
        return base / mine if base and mine else None

    def to_json(self) -> dict:
        return {
            "schema": SCALING_SCHEMA,
            "variable": self.variable,
            "reference": self.reference.value if self.reference else None,
            "same_request_set": self.same_request_set,
            "request_set": self.request_set,
            "variants": [
                {
                    **asdict(v),
                    "speedup": {s: _round(self.speedup(s, v), 3) for s in STATES},
                }
                for v in self.variants
            ],
            "notes": list(self.notes),
        }


def read_sweep_record(run_dir: Path) -> dict | None:
    """``sweep.json`` of a sweep's run directory (None when absent: not a sweep)."""
    try:
        record = read_json(Path(run_dir) / "sweep.json", root=run_dir)
    except FileNotFoundError:
        return None
    problem = _sweep_record_problem(record)
    if problem is not None:
        raise InputError(
            f"{Path(run_dir) / 'sweep.json'}: {problem}",
            hint="the run directory is damaged; its raw files can still be read by hand",
        )
    return record


#: Each variant of ``sweep.json``: the fields its readers use and their types (None allowed where written so).
_VARIANT_FIELDS: dict[str, tuple[type, ...]] = {
    "label": (str,),
    "status": (str,),
    "run_dir": (str, type(None)),
    "skipped_faults": (list, type(None)),
}


def _sweep_record_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"expected a JSON object, found {type(record).__name__}"
    variants = record.get("variants", [])
    if not isinstance(variants, list):
        return f"variants: expected a list, found {type(variants).__name__}"
    for i, item in enumerate(variants):
        if not isinstance(item, dict):
            return f"variants[{i}]: expected an object, found {type(item).__name__}"
        for key, types in _VARIANT_FIELDS.items():
            if not isinstance(item.get(key), types) and (key in item or type(None) not in types):
                return f"variants[{i}].{key}: expected {' or '.join(t.__name__ for t in types)}"
    return None


def measure_sweep(run_dir: Path) -> ScalingTable:
    """The figures of every variant listed in ``run_dir/sweep.json``; empty when there is none."""
    record = read_sweep_record(run_dir) or {}
    notes: list[str] = []
    variants = []
    schedules = {}
    for item in record.get("variants") or []:
        path = inside(run_dir, str(item["run_dir"])) if item.get("run_dir") else None
        if path is None or not (path / "journal.jsonl").is_file():
            notes.append(f"{item['label']}: no run directory to measure ({item.get('status', 'not run')})")
            continue
        evidence = RunEvidence(path)
        variants.append(_measure_variant(item, evidence))
        schedules[item["label"]] = _schedule(evidence.requests)
        notes += [f"{item['label']}: {r.describe()}" for r in evidence.reports.values() if not r.clean]
    same, words = _compare_schedules(schedules)
    return ScalingTable(record.get("variable", ""), tuple(variants), tuple(notes), same, words)


def _schedule(records: list[RequestRecord]) -> list[tuple[str, str]]:
    """(logical id, payload digest) of each first attempt, in the order of their intended start."""
    firsts = sorted((r for r in records if r.attempt == 1), key=lambda r: r.intended_ts)
    return [(r.logical_id, r.payload_digest) for r in firsts]


def _compare_schedules(schedules: dict[str, list[tuple[str, str]]]) -> tuple[bool, str]:
    """Whether every variant was sent the same requests up to the shortest's end, and that in words."""
    if not schedules:
        return True, "no variant was measured"
    common = min(len(s) for s in schedules.values())
    first = next(iter(schedules.values()))[:common]
    differ = [label for label, s in schedules.items() if s[:common] != first]
    sent = ", ".join(f"{label} {len(s)}" for label, s in schedules.items())
    if differ:
        return False, f"differs between variants ({', '.join(differ)} from the first); sent: {sent}"
    digest = hashlib.sha256(repr(first).encode()).hexdigest()[:12]
    return True, (
        f"the same {common} requests (ids and payload bytes, sha256:{digest}) in every variant, in the same order; "
        f"sent: {sent} (the load stops on the clock)"
    )


# --- one variant ------------------------------------------------------------------------------------------------


def _measure_variant(item: dict, evidence: RunEvidence) -> VariantFigures:
    skipped = tuple(item.get("skipped_faults") or ())
    healthy_window = evidence.phases.get("baseline")
    degraded_window, link = _degraded_window(evidence, skipped)
    healthy = _state(evidence, "healthy", healthy_window, "healthy")
    degraded = _state(evidence, "degraded", degraded_window, link)
    return VariantFigures(
        item["label"],
        item.get("value"),
        item["run_dir"],
        item.get("status", ""),
        item.get("exit_code"),
        skipped,
        healthy,
        degraded,
        _predict(evidence, healthy),
        len({r.logical_id for r in evidence.requests}),
    )


def _degraded_window(evidence: RunEvidence, skipped: tuple[str, ...]) -> tuple[PhaseWindow | None, str]:
    landed = [f for f in evidence.faults if f.injected]
    if landed and evidence.fault_window is not None:
        start, end = evidence.fault_window
        names = ", ".join(f"{f.fault_id} ({f.kind})" for f in landed)
        return PhaseWindow("fault", start, end), f"degraded: {names}"
    why = "; ".join(skipped) if skipped else "no fault was injected"
    return evidence.phases.get("fault"), f"no link to degrade ({why})"


def _in_window(record: RequestRecord, window: PhaseWindow) -> bool:
    if record.e2e_ms is None:
        return False
    return window.start_ts <= record.intended_ts and record.intended_ts + record.e2e_ms / 1000.0 <= window.end_ts


def _state(evidence: RunEvidence, state: str, window: PhaseWindow | None, link: str) -> StateFigures:
    if window is None or window.length_s <= 0:
        return StateFigures(state, None, 0, 0, link=link)
    started = [r for r in evidence.requests if window.contains(r.intended_ts)]
    served = [r for r in started if r.ok and _in_window(r, window)]
    tpots = [t for r in served if (t := r.tpot_ms) is not None]
    ttfts = [r.ttft_ms for r in served if r.ttft_ms is not None]
    tpot_p50 = percentile(tpots, 50)
    return StateFigures(
        state,
        round(window.length_s, 3),
        len(served),
        sum(1 for r in started if not r.ok),
        tpot_p50_ms=_round(tpot_p50),
        tpot_p95_ms=_round(percentile(tpots, 95)),
        ttft_p50_ms=_round(percentile(ttfts, 50)),
        ttft_p95_ms=_round(percentile(ttfts, 95)),
        stream_tokens_per_s=_round(1000.0 / tpot_p50) if tpot_p50 else None,
        output_tokens_per_s=_round(_delivered_tokens(evidence.requests, window) / window.length_s),
        goodput_rps=_round(sum(1 for r in served if _met_slo(r, evidence)) / window.length_s, 3),
        mean_decoding=_round(_mean_decoding(served, window), 2),
        mean_context_tokens=_round(_mean_context(served), 1),
        link=link,
    )


def _delivered_tokens(records: list[RequestRecord], window: PhaseWindow) -> int:
    """Streamed chunks (one token each on the OpenAI stream) that arrived inside the window."""
    count = 0
    for r in records:
        for offset in r.chunk_offsets_ms:
            if window.contains(r.intended_ts + offset / 1000.0):
                count += 1
    return count


def _met_slo(record: RequestRecord, evidence: RunEvidence) -> bool:
    """Goodput's per-request test: TTFT and TPOT within the pool's SLO thresholds (the percentile not applied)."""
    slo = evidence.slo_by_pool.get(record.pool, {})
    ttft_s = next((v for k, v in slo.items() if k.startswith("ttft")), None)
    tpot_s = next((v for k, v in slo.items() if k.startswith("tpot")), None)
    if ttft_s is not None and (record.ttft_ms is None or record.ttft_ms > ttft_s * 1000.0):
        return False
    tpot = record.tpot_ms
    return not (tpot_s is not None and tpot is not None and tpot > tpot_s * 1000.0)


def _mean_decoding(served: list[RequestRecord], window: PhaseWindow) -> float | None:
    """Mean requests decoding at once: their decode intervals (first token to last) summed over the window."""
    if not served:
        return None
    busy = 0.0
    for r in served:
        if r.ttft_ms is not None and r.e2e_ms is not None:
            busy += max(0.0, (r.e2e_ms - r.ttft_ms) / 1000.0)
    return busy / window.length_s


def _mean_context(served: list[RequestRecord]) -> float | None:
    """Mean KV context of a decode step: the prompt plus half the output."""
    sizes = [(r.prompt_tokens or 0) + (r.completion_tokens or 0) / 2 for r in served]
    return sum(sizes) / len(sizes) if sizes else None


# --- the cost model ---------------------------------------------------------------------------------------------


def _predict(evidence: RunEvidence, healthy: StateFigures) -> Prediction | None:
    """The embedded stack's decode step at the healthy state's batch and context; None for other targets."""
    resolved = evidence.resolved
    target = (resolved.get("drill") or {}).get("target") or {}
    if target.get("kind") != "embedded" or not resolved.get("target_params"):
        return None
    config = parse_stack_config(resolved["target_params"])
    engine = config.engine
    model = CostModel(
        config.model_preset, config.gpu_preset, engine.tensor_parallel_size, engine.pipeline_parallel_size
    )
    batch = max(1, round(healthy.mean_decoding or 1.0))
    context = max(1, round(healthy.mean_context_tokens or 1.0))
    cost = model.step_cost(BatchShape.decode(batch, context))
    increase = _link_increase(resolved, model.exchange_plan(batch), config.links.byte_scale, model.pp)
    ms = 1000.0
    return Prediction(
        batch,
        context,
        round(cost.memory_s * ms, 3),
        round(cost.compute_s * ms, 3),
        round(cost.stage_s * ms, 3),
        round(cost.comm_s * ms, 3),
        round(cost.overhead_s * ms, 3),
        round(cost.total_s * ms, 3),
        round(increase * ms, 3) if increase is not None else None,
    )


def _link_increase(resolved: dict, plan: ExchangePlan, byte_scale: float, pp: int) -> float | None:
    """The step-time increase of the run's Toxiproxy link faults (the largest one: TP links work in parallel)."""
    faults = (resolved.get("drill") or {}).get("faults") or []
    increases = []
    for fault, params in zip(faults, resolved.get("fault_params") or []):
        if fault.get("kind") != "nccl_degradation" or (params or {}).get("method") != "toxiproxy":
            continue
        direction = params.get("direction", "both")
        streams = frozenset(Stream) if direction == "both" else frozenset({Stream(direction)})
        for kind in params.get("link_kinds") or ["tp"]:
            toxic = LinkToxic(LinkKind(kind), params.get("latency_ms") or 0, params.get("bandwidth_kbps"), streams)
            increases.append(predict_step_increase(plan, toxic, byte_scale=byte_scale, pp=pp))
    return max(increases) if increases else None


def _round(value: float | None, digits: int = 2) -> float | None:
    return round(value, digits) if value is not None else None
