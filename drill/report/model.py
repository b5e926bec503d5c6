"""The report model: typed dataclasses of everything a report shows, built from one run directory.

:func:`drill.report.build.build_report` reads a run directory through :class:`~drill.rundir.evidence.RunEvidence`
and the verdicts (``verdicts.json``) and returns a :class:`Report`; :mod:`drill.report.render` turns it into
Markdown, HTML or JSON. The model holds no wall-clock time and no unordered collection: the same run directory
always gives the same model, so the rendered Markdown is byte-identical from run to run and from a copy of the
directory.

Conventions: a figure the target does not export or the run cannot give is :data:`NOT_AVAILABLE`; a field
the drill leaves unset is :data:`UNSET` — never a made-up value, never 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from drill.checks.truth import MeasurementTruthSection

if TYPE_CHECKING:
    pass

__all__ = [
    "NOT_AVAILABLE",
    "UNSET",
    "ActionItem",
    "AdmissionRejectionRow",
    "Chart",
    "CostFigures",
    "CoverageGap",
    "DecisionField",
    "Detection",
    "FaultSection",
    "Figure",
    "Headline",
    "Impact",
    "ImpactRow",
    "LatencyPercentiles",
    "PhaseMetrics",
    "PromptTokens",
    "PromptTokensRow",
    "Report",
    "ReportHeader",
    "ReplayRow",
    "ReplaySection",
    "Runbook",
    "RouterOverheadRow",
    "RunbookSection",
    "ServingSide",
    "SloBreach",
    "TimelineEntry",
    "VerdictLine",
]

NOT_AVAILABLE = "not available"
UNSET = "unset"


@dataclass(frozen=True)
class ReportHeader:
    drill: str
    title: str | None
    description: str | None
    run_id: str
    run_status: str  # how the run ended (journal RUN_FINISHED), "unfinished" without one
    outcome: str  # PASS when every check passed, else the worst status
    started_at: str | None  # ISO UTC of the journal's run_started (from the run, not the renderer)
    length_s: float | None  # run_started -> run_finished
    time_scale: float | None
    stopped_by: str | None
    target_kind: str | None
    model: str | None
    model_version: str | None
    hypothesis: str | None
    owner: str | None
    drill_file: str | None


@dataclass(frozen=True)
class Headline:
    """The finding, first: the outcome and one sentence of what happened, derived from the verdicts and evidence
    (:mod:`drill.report.finding`), and how the verdicts matched the drill's predictions."""

    outcome: str
    sentence: str
    predictions: str  # "" when the run was not judged
    from_checks: tuple[str, ...]  # the verdicts the sentence names


@dataclass(frozen=True)
class Figure:
    """One observed-vs-expected line of a verdict (values already formatted)."""

    name: str
    observed: str
    expected: str
    unit: str


@dataclass(frozen=True)
class VerdictLine:
    name: str
    kind: str
    status: str
    message: str
    window: str | None
    predicted: str | None  # the verdict the runbook predicts (``predicts:``), None when it does not say
    as_predicted: bool | None
    figures: tuple[Figure, ...]
    notes: tuple[str, ...]
    evidence: tuple[str, ...]  # "kind value (note)"


@dataclass(frozen=True)
class ImpactRow:
    """What the users of one pool saw in one phase."""

    phase: str
    pool: str
    requests: int  # attempts intended in the phase (cancelled at stop left out)
    failed: int
    failed_by_class: tuple[tuple[str, int], ...]
    slow: int  # succeeded but missed a bound of the pool's SLO
    good: int  # succeeded within every bound (goodput)
    goodput_share: float | None
    goodput_rps: float | None
    share_lost: float | None  # baseline goodput share minus this phase's (None: no baseline to compare)


@dataclass(frozen=True)
class SloBreach:
    phase: str
    pool: str
    bound: str  # e.g. ttft_p95
    observed_ms: float
    limit_ms: float
    samples: int


@dataclass(frozen=True)
class Impact:
    rows: tuple[ImpactRow, ...]
    breaches: tuple[SloBreach, ...]
    goodput_source: str  # where the goodput figures come from
    notes: tuple[str, ...]


@dataclass(frozen=True)
class TimelineEntry:
    offset_s: float  # seconds after the run started (the journal's run_started)
    at: str  # ISO UTC, millisecond precision
    what: str
    source: str  # "journal #12", "requests.jsonl", "verdict recovery_time", ...


@dataclass(frozen=True)
class Detection:
    status: str  # the first_abnormal_span verdict's status, or NOT_AVAILABLE
    message: str
    service: str | None
    name: str | None
    kind: str | None
    deviation: str | None
    trace_id: str | None
    span_id: str | None
    duration_ms: float | None
    onset_s: float | None
    impact: float | None
    link: str | None
    chain: tuple[str, ...]
    attributes: tuple[tuple[str, str], ...]
    pairs: tuple[tuple[str, str, str], ...]  # (service/name, flagged of spans, deviation)
    baseline_trace_id: str | None
    waterfall: Chart
    suspects: tuple[tuple[str, str, str, str], ...] = ()  # (rank, service, score, why and evidence), top five


@dataclass(frozen=True)
class FaultSection:
    name: str
    kind: str
    summary: str
    method: str | None
    mechanism: str | None
    realism: str
    params: tuple[tuple[str, str], ...]
    start_s: float | None  # offset into the fault phase
    duration_s: float | None
    selector: str
    scope: str | None
    revert_semantics: str
    injected_at: str | None  # ISO UTC
    landed: str  # "landed", "did not land: ...", "never injected", "never verified"
    landing_proof: str | None
    reverted_at: str | None


@dataclass(frozen=True)
class LatencyPercentiles:
    samples: int
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class PhaseMetrics:
    phase: str
    length_s: float
    requests: int
    successes: int
    ttft_ms: LatencyPercentiles
    tpot_ms: LatencyPercentiles
    itl_ms: LatencyPercentiles
    e2e_ms: LatencyPercentiles
    output_tokens_per_s: float | None
    error_rate: float | None
    errors_by_class: tuple[tuple[str, float], ...]  # class -> share of the phase's requests
    goodput_share: float | None
    prefix_cache_hit_rate: float | None  # None: not available (never 0 for "not exported")
    kv_cache_usage: float | None
    queue_depth: float | None
    cost_per_success: float | None
    cost_note: str  # UNSET (no price), NOT_AVAILABLE (no GPUs / successes), ""


@dataclass(frozen=True)
class CostFigures:
    gpu_hour_price: float | None
    currency: str
    gpus: int | None
    gpus_from: str  # how the GPU count was found (replicas × TP × PP ...)
    run_s: float | None  # the loaded phases' length
    successes: int
    cost: float | None  # price × GPUs × run time
    cost_per_success: float | None
    note: str


@dataclass(frozen=True)
class ReplayRow:
    set: str  # original | control
    original_request_id: str
    pool: str
    repetition: int
    before: str  # the original's outcome (status/error, latency)
    after: str  # the replay's outcome
    ttft_ms: float | None
    e2e_ms: float | None
    payload: str  # the request body as the redactor shows it (a digest unless opted in)


@dataclass(frozen=True)
class ReplaySection:
    ran: bool
    status: str  # the recovery_replay verdict's status, or NOT_AVAILABLE
    message: str
    figures: tuple[Figure, ...]
    originals: int
    controls: int
    rows: tuple[ReplayRow, ...]
    rows_left_out: int


@dataclass(frozen=True)
class RunbookSection:
    title: str
    body: str  # Markdown as the runbook has it (redacted)


@dataclass(frozen=True)
class Runbook:
    path: str | None
    found: bool
    title: str | None
    sections: tuple[RunbookSection, ...]
    note: str


@dataclass(frozen=True)
class ActionItem:
    check: str
    status: str
    action: str


@dataclass(frozen=True)
class DecisionField:
    name: str
    value: str  # UNSET when the drill leaves it unset


@dataclass(frozen=True)
class CoverageGap:
    area: str  # inputs, capacity, permissions, external dependencies, faults
    what: str


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    svg: str | None  # inline SVG; None when there is no data or no chart module
    note: str  # why there is no chart


@dataclass(frozen=True)
class PromptTokensRow:
    """One pool's prompt tokens: planned (the schedule) and achieved (the server's ``usage.prompt_tokens``)."""

    pool: str
    requests: int  # successful attempts that carry both counts (bursts left out)
    planned: int
    achieved: int
    ratio: float
    off: bool  # more than 2% off


@dataclass(frozen=True)
class PromptTokens:
    """Whether the load was the planned length distribution: how the prompts were made, and the ratio per pool."""

    rule: str  # how the prompts were made (token-exact, or one token per word), or NOT_AVAILABLE
    rows: tuple[PromptTokensRow, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class AdmissionRejectionRow:
    """Requests admission control rejected in one phase for one reason (``vllm:admission_rejections_total``)."""

    phase: str
    reason: str
    count: int


@dataclass(frozen=True)
class RouterOverheadRow:
    """What the embedded router added to the requests of one phase (ms), from its spans."""

    phase: str
    requests: int
    added_ttft_ms: LatencyPercentiles
    added_e2e_ms: LatencyPercentiles
    ttft_share_p50: float | None  # the router's median share of the TTFT its client saw


@dataclass(frozen=True)
class KvTransferRow:
    """A P/D run's KV transfers in one phase, from the scraped connector metrics (:mod:`drill.serving_metrics`);
    None: the target exports no such metric."""

    phase: str
    mean_ms: float | None  # kv_transfer_seconds, in ms
    bytes: float | None  # kv_transfer_bytes
    failures: float | None  # kv_transfer_failures
    pending_max: float | None  # kv_transfers_pending, the largest read


@dataclass(frozen=True)
class ServingSide:
    """Admission rejections by reason and the router's overhead, per phase (:mod:`drill.report.serving`)."""

    admission_rejections: tuple[AdmissionRejectionRow, ...] = ()
    admission_note: str = NOT_AVAILABLE  # why there are no rows ("" when there are)
    router_overhead: tuple[RouterOverheadRow, ...] = ()
    router_note: str = NOT_AVAILABLE
    kv_transfers: tuple[KvTransferRow, ...] = ()  # empty: not a P/D target (the report shows no line)


@dataclass(frozen=True)
class Report:
    header: ReportHeader
    verdicts: tuple[VerdictLine, ...]
    impact: Impact
    timeline: tuple[TimelineEntry, ...]
    detection: Detection
    faults: tuple[FaultSection, ...]
    metrics: tuple[PhaseMetrics, ...]
    cost: CostFigures
    replay: ReplaySection
    runbook: Runbook
    actions: tuple[ActionItem, ...]
    decision: tuple[DecisionField, ...]
    not_covered: tuple[CoverageGap, ...]
    charts: tuple[Chart, ...]
    reads: tuple[str, ...]  # what could not be read from the run directory
    headline: Headline
    measurement_truth: MeasurementTruthSection
    notes: tuple[str, ...] = field(default=())
    prompt_tokens: PromptTokens = field(default=PromptTokens(NOT_AVAILABLE))
    serving: ServingSide = field(default=ServingSide())

    @property
    def latency_chart(self) -> Chart | None:
        """The latency-over-time chart, which the report shows first (under the headline)."""
        return next((c for c in self.charts if c.key == "latency_over_time"), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
