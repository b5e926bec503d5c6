"""Drill files (``drills/*.yaml``) as typed, frozen models.

A drill names its ``target``, its ``scenario`` (load), its ``phases``, the
``faults`` it injects on a schedule, ``stop_conditions`` that end the fault
phase early, ``checks`` with thresholds, a default ``slo``, its ``runbook``
and the ``allowed_hosts`` beyond loopback. Validation is two-phase (after
Toxiproxy's toxic decoding): the envelope here, then each plugin's own
``Params`` (see :mod:`drill.spec.loader`). Unknown keys are errors everywhere.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from drill.api import Selector
from drill.errors import InputError, did_you_mean
from drill.rundir.records import ErrorClass
from drill.serving_metrics import metric_name_problem
from drill.spec.overrides import parse_override
from drill.spec.scenario import Slo
from drill.spec.validation import SpecModel, at_key, expand_env
from drill.units import BindHost, Duration, format_duration, parse_duration

__all__ = [
    "Acceptance",
    "BaselineSpec",
    "CandidateSpec",
    "CheckSpec",
    "ColdStart",
    "DecisionSpec",
    "Drill",
    "FaultSpec",
    "MetricsSpec",
    "OtlpSpec",
    "Phase",
    "Phases",
    "PredictedStatus",
    "ReplayPhase",
    "ReportSpec",
    "StopCondition",
    "StopKind",
    "SweepSpec",
    "TargetSpec",
    "check_names",
]


class Phase(str, enum.Enum):
    COLD_START = "cold_start"
    WARMUP = "warmup"
    BASELINE = "baseline"
    FAULT = "fault"
    RECOVERY = "recovery"
    REPLAY = "replay"


class TargetSpec(SpecModel):
    """``kind`` picks a ``drill.targets`` plugin; ``config`` is validated by its Params."""

    kind: str = "embedded"
    config: dict[str, Any] = Field(default_factory=dict)


class ColdStart(SpecModel):
    """The target is started (or restarted) and the time to the first good response is measured."""

    enabled: bool = True
    timeout: Duration = Field(300.0, gt=0)


class ReplayPhase(SpecModel):
    """After recovery, the original failing requests are sent again, byte for byte, with a control set.

    - ``enabled`` (true): run the replay phase (``replay: false`` turns it off).
    - ``timeout`` (120s): each replayed request's client timeout.
    - ``max_samples`` (200, >= 1): failed logical requests replayed at most; with more, a seeded sample.
    - ``concurrency`` (8, >= 1): replayed requests in flight at most.
    - ``controls`` (20, >= 0): baseline successes replayed as controls (their output was digested during
      the baseline); 0 replays no controls, and the ``recovery_replay`` check is then INCONCLUSIVE at best.
    - ``repetitions`` (2, 2..5): sends of each control; two replays' disagreement is the noise floor for
      requests that are not deterministic (temperature > 0).
    - ``seed`` (the drill's ``seed``): seeds the choice of samples and controls and the send order.
    - ``rate`` (the baseline's arrival rate): replayed requests sent per second, evenly spaced.
    - ``wait_for_recovery`` (120s, >= 0): the longest the replay waits, once the load has stopped, for the target
      to be seen back inside its baseline band (queue depth and error rate, :mod:`drill.runner.recovery_gate`);
      it then starts anyway and says so. 0 starts it at once. Not scaled by ``--time-scale``.
    """

    enabled: bool = True
    timeout: Duration = Field(120.0, gt=0)
    max_samples: int = Field(200, ge=1)
    concurrency: int = Field(8, ge=1)
    controls: int = Field(20, ge=0)
    repetitions: int = Field(2, ge=2, le=5)
    seed: int | None = None
    rate: float | None = Field(None, gt=0)
    wait_for_recovery: Duration = Field(120.0, ge=0)


def _flag_or_model(value: object) -> object:
    return {"enabled": value} if isinstance(value, bool) else value


class Phases(SpecModel):
    cold_start: ColdStart = ColdStart()
    warmup: Duration = 0.0
    baseline: Duration = 30.0
    fault: Duration = 60.0
    recovery: Duration = 30.0
    replay: ReplayPhase = ReplayPhase()

    @field_validator("cold_start", "replay", mode="before")
    @classmethod
    def _allow_bool(cls, value: object) -> object:
        return _flag_or_model(value)

    def loaded_length(self) -> float:
        return self.warmup + self.baseline + self.fault + self.recovery


class FaultSpec(SpecModel):
    """One scheduled fault. ``start`` is an offset into the fault phase."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    kind: str
    params: dict[str, Any] = Field(default_factory=dict)
    start: Duration = 0.0
    duration: Duration | None = None  # default: to the end of the fault phase
    selector: Selector = Selector()

    @field_validator("start")
    @classmethod
    def _start_not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"start must not be negative, got {value:g}s")
        return value

    @field_validator("duration")
    @classmethod
    def _duration_positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError(f"a fault must last a positive time, got {value:g}s")
        return value


class StopKind(str, enum.Enum):
    ERROR_RATE = "error_rate"  # share of failed requests over the last `for`
    LATENCY = "latency"  # client-side percentile of ttft/tpot/itl/e2e over the last `for`
    METRIC = "metric"  # a scraped Prometheus sample (max over replicas) above a bound for `for`
    MAX_DURATION = "max_duration"  # the whole drill may not run longer than `value`


class StopCondition(SpecModel):
    """Ends the fault phase early; the report says which condition fired and when."""

    kind: StopKind
    name: str | None = None
    above: float | None = None
    for_: Duration = Field(10.0, alias="for", gt=0)
    metric: Literal["ttft", "tpot", "itl", "e2e"] | str | None = None
    percentile: float = Field(99.0, gt=0, lt=100.0001)
    value: Duration | None = Field(None, gt=0)
    min_requests: int = Field(20, ge=1)
    #: error_rate only: count only these error classes (default: every error). E.g. leave out
    #: ``refused`` to stop on a stack that fails, not on one that refuses overload as it should.
    classes: list[ErrorClass] | None = None

    @model_validator(mode="before")
    @classmethod
    def _latency_bound_has_unit(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("kind") == "latency" and "above" in data:
            try:
                data = {**data, "above": parse_duration(data["above"])}
            except ValueError as exc:
                raise at_key("above", str(exc)) from None
            if not data["above"] > 0:
                raise at_key("above", f"a latency bound must be more than 0, got {data['above']:g}s")
        return data

    @model_validator(mode="after")
    def _fields_for_kind(self) -> StopCondition:
        if self.kind is StopKind.MAX_DURATION:
            if self.value is None:
                raise at_key("value", "a max_duration stop condition needs 'value' (e.g. 15m)")
            return self
        if self.above is None:
            raise at_key("above", f"a {self.kind.value} stop condition needs 'above'")
        if self.kind is StopKind.ERROR_RATE and not 0 <= float(self.above) <= 1:
            raise at_key("above", f"error_rate 'above' is a share between 0 and 1, got {self.above:g}")
        if self.kind is StopKind.LATENCY and self.metric not in ("ttft", "tpot", "itl", "e2e"):
            raise at_key(
                "metric", f"a latency stop condition needs metric: ttft, tpot, itl or e2e (got {self.metric!r})"
            )
        if self.classes is not None and self.kind is not StopKind.ERROR_RATE:
            raise at_key("classes", "'classes' applies to error_rate stop conditions only")
        if self.kind is StopKind.METRIC and not self.metric:
            raise at_key(
                "metric",
                "a metric stop condition needs 'metric': a quantity (queue_depth, kv_cache_usage, ...) or a "
                "Prometheus name (vllm:num_requests_waiting)",
            )
        if self.kind is StopKind.METRIC and (problem := metric_name_problem(str(self.metric))):
            raise at_key("metric", problem)
        return self

    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind is StopKind.MAX_DURATION:
            return f"max_duration {format_duration(self.value or 0)}"
        what = f"{self.metric} p{self.percentile:g}" if self.kind is StopKind.LATENCY else (self.metric or "error rate")
        if self.classes:
            what += f" ({', '.join(c.value for c in self.classes)})"
        bound = format_duration(self.above or 0) if self.kind is StopKind.LATENCY else f"{self.above:g}"
        return f"{what} above {bound} for {format_duration(self.for_)}"


class CheckSpec(SpecModel):
    """``kind`` picks a ``drill.checks`` plugin; ``params`` (thresholds) are validated by its Params."""

    kind: str
    name: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class OtlpSpec(SpecModel):
    enabled: bool = True
    host: BindHost = "127.0.0.1"
    port: int = Field(4318, ge=0, le=65535)  # 0 = any free port


class PrometheusSourceSpec(SpecModel):
    """The user's Prometheus as the run's metrics source (``metrics: {source: prometheus, prometheus: ...}``).

    - ``url``: the Prometheus server (its HTTP API is under ``/api/v1``).
    - ``selector``: label matchers for the target's series, e.g. ``{job="vllm",namespace="prod"}``.
    - ``replica_label`` ("instance"): the label that tells the replicas apart (``instance``, ``pod``, ...).
    - ``replicas``: label value -> replica name; a value not listed is matched to the target's metrics URL with
      that ``host:port``, else it is the replica's name as is.
    - ``timeout`` (5 s): one query's limit.
    - ``headers`` / ``bearer_token``: sent with every query (a Prometheus behind auth, a tenant header);
      ``${NAME}`` is read from the environment at start, as in the openai target's ``headers`` / ``api_key``.
      Credentials never reach ``resolved.json``, a log or a report.
    """

    #: The fields whose ``${NAME}`` are expanded at start (validation checks that each NAME is set).
    env_fields: ClassVar[tuple[str, ...]] = ("headers", "bearer_token")

    url: str = Field(pattern=r"^https?://")
    selector: str = Field("", pattern=r"^(\{.*\})?$")
    replica_label: str = Field("instance", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    replicas: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = Field(5.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token: str | None = None  # ``Authorization: Bearer <bearer_token>``

    @model_validator(mode="after")
    def _one_authorization(self) -> PrometheusSourceSpec:
        if self.bearer_token is not None and any(name.lower() == "authorization" for name in self.headers):
            raise at_key("bearer_token", "give 'bearer_token' or an 'Authorization' header, not both")
        if "@" in self.url.split("://", 1)[1].split("/", 1)[0]:
            # user:password@host would be copied into metrics.jsonl and the journal with every query's URL
            raise at_key("url", "credentials in the URL are not accepted; give them as 'headers' or 'bearer_token'")
        return self

    def request_headers(self) -> dict[str, str]:
        """The headers of every query, ``${NAME}`` expanded; an unset variable is an InputError naming the key."""
        where = "metrics.prometheus"
        headers = {name: expand_env(v, f"{where}.headers.{name}", InputError) for name, v in self.headers.items()}
        if self.bearer_token is not None:
            headers["Authorization"] = f"Bearer {expand_env(self.bearer_token, f'{where}.bearer_token', InputError)}"
        return headers


class MetricsSpec(SpecModel):
    """Where the run's serving metrics come from: ``scrape`` (the target's ``/metrics``, every ``interval``) or
    ``prometheus`` (the user's Prometheus: instant queries every ``interval`` for stop conditions, a range query
    over the run's window into ``metrics.jsonl`` at the end)."""

    enabled: bool = True
    interval: Duration = 1.0
    source: Literal["scrape", "prometheus"] = "scrape"
    prometheus: PrometheusSourceSpec | None = None

    @field_validator("interval")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"the scrape interval must be positive, got {value:g}s")
        return value

    @model_validator(mode="after")
    def _source_has_its_settings(self) -> MetricsSpec:
        if self.source == "prometheus" and self.prometheus is None:
            raise at_key("source", "source: prometheus needs a 'prometheus' block (url, selector, replica_label)")
        if self.source == "scrape" and self.prometheus is not None:
            raise at_key("prometheus", "a 'prometheus' block is read only with source: prometheus")
        return self


class ReportSpec(SpecModel):
    """How the run's reports are rendered.

    - ``include_text`` (false): show prompt and completion text in reports; by default each text is shown as
      its digest (``sha256:<12 hex> (N chars)``) and never reaches a report.
    - ``gpu_hour_price`` (unset): the price of one GPU-hour, for the cost per successful request; unset, the
      report shows the cost as unset rather than guess a price.
    - ``currency`` ("USD"): the currency of ``gpu_hour_price``.
    - ``owner`` (unset): who owns the report's action items.
    """

    include_text: bool = False
    gpu_hour_price: float | None = Field(None, ge=0)
    currency: str = Field("USD", min_length=1, max_length=10)
    owner: str | None = None


class BaselineSpec(SpecModel):
    """What the candidate is compared with: the version in service and the dataset it was measured on."""

    version: str | None = None
    dataset: str | None = None


class CandidateSpec(SpecModel):
    """The version under test and the one change it makes."""

    version: str | None = None
    change: str | None = None


class Acceptance(SpecModel):
    """The thresholds the candidate must meet to be accepted; an unset one is shown as unset."""

    quality_not_lower: bool | None = None
    p95_latency_within_slo: bool | None = None
    cost_per_success_max: float | None = Field(None, ge=0)
    error_rate_max: float | None = Field(None, ge=0, le=1)
    notes: str | None = None


class DecisionSpec(SpecModel):
    """A release decision record in the method's shape; every field is optional and an unset one is shown as
    "unset" in the report, never filled in."""

    topic: str | None = None
    baseline: BaselineSpec = BaselineSpec()
    candidate: CandidateSpec = CandidateSpec()
    changed_variable: str | None = None
    acceptance: Acceptance = Acceptance()
    rollback_trigger: str | None = None
    owner: str | None = None


#: Key paths a sweep may not vary: the run's identity, the request set's seed, the sweep itself.
_UNSWEEPABLE = ("schema", "name", "seed", "scenario.seed", "sweep")


class SweepSpec(SpecModel):
    """Run the drill once per value of ONE variable, with the same seed and request set (``drill run``).

    - ``variable``: a key path as ``--set`` takes it, e.g. ``target.config.engine.tensor_parallel_size``.
    - ``values``: 2 to 8 distinct values, each read as the variable's YAML value; each makes one variant.
    - ``label`` (the variable's last key): names the variants' folders, ``variants/<label>-<value>/``.
    - ``skip_unsupported_faults`` (false): a variant whose target cannot take a fault (at TP=1 there is no TP link
      for ``nccl_degradation``) runs without it and the sweep says so; by default such a variant is an error.
    """

    variable: str = Field(min_length=1, max_length=300)
    values: list[Any]
    label: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_]*$", max_length=40)
    skip_unsupported_faults: bool = False

    @field_validator("variable")
    @classmethod
    def _one_key_path(cls, value: str) -> str:
        try:
            parse_override(f"{value}=0")
        except ValueError:
            raise ValueError(
                f"{value!r} is not one key path; a sweep varies exactly one variable, named as --set names it "
                "(e.g. target.config.engine.tensor_parallel_size)"
            ) from None
        if any(value == key or value.startswith((key + ".", key + "[")) for key in _UNSWEEPABLE):
            raise ValueError(
                f"a sweep cannot vary {value!r}: every variant keeps the drill's name, seed and request set"
            )
        return value

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: list[Any]) -> list[Any]:
        if not 2 <= len(values) <= 8:
            raise ValueError(f"a sweep needs 2 to 8 values (one variant each), got {len(values)}")
        seen = [json.dumps(v, sort_keys=True, default=str) for v in values]
        for i, text in enumerate(seen):
            if seen.index(text) != i:
                raise ValueError(
                    f"value {values[i]!r} is listed twice (items {seen.index(text)} and {i}); each value makes one "
                    "variant"
                )
        return values

    def overrides(self, value: Any) -> tuple[str, str]:
        """The ``--set`` assignments that make the variant with ``value``: the variable, and no sweep of its own."""
        return f"{self.variable}={json.dumps(value)}", "sweep=null"

    def variant_label(self, value: Any) -> str:
        """``tp-2``: the folder name of the variant with ``value``."""
        stem = self.label or self.variable.rsplit(".", 1)[-1].split("[", 1)[0].lower()
        text = re.sub(r"[^a-z0-9_.]+", "_", str(value).lower()).strip("_") or "value"
        return f"{stem}-{text}"


#: The verdicts a runbook can predict (ERROR is a broken check, never a prediction).
PredictedStatus = Literal["PASS", "FAIL", "INCONCLUSIVE"]

_KEY = re.compile(r"^[A-Za-z_][\w-]*$")  # a check name the diagnostics can point at (see ``at_key``)


def check_names(checks: list[CheckSpec], has_faults: bool) -> list[str]:
    """The names verdicts get: each check's ``name`` or ``kind``, and ``fault_landed`` (added when a drill with
    faults does not list it; see :func:`drill.runner.verdicts.plan_checks`)."""
    names = [c.name or c.kind for c in checks]
    if has_faults and not any(c.kind == "fault_landed" for c in checks):
        names.insert(0, "fault_landed")
    return names


class Drill(SpecModel):
    schema_: Literal["drill/v1"] = Field("drill/v1", alias="schema")
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=100)  # a folder name under reports/
    title: str | None = None
    description: str | None = None
    runbook: str | None = None
    seed: int = 0
    target: TargetSpec
    scenario: dict[str, Any] | str  # validated on its own (inline or from scenarios/) by the loader
    phases: Phases = Phases()
    faults: list[FaultSpec] = Field(default_factory=list)
    stop_conditions: list[StopCondition] = Field(default_factory=list)
    checks: list[CheckSpec] = Field(default_factory=list)
    slo: Slo = Field(default_factory=dict)
    allowed_hosts: list[str] = Field(default_factory=list)
    otlp: OtlpSpec = OtlpSpec()
    metrics: MetricsSpec = MetricsSpec()
    report: ReportSpec = ReportSpec()
    decision: DecisionSpec | None = None
    #: Run the drill once per value of one variable (``drill run`` runs every variant; see :class:`SweepSpec`).
    sweep: SweepSpec | None = None
    #: What the drill expects to happen and why, in one or two sentences (``drill drills list`` shows it).
    hypothesis: str | None = Field(None, min_length=1, max_length=2000)
    #: Check name -> the verdict the drill's runbook predicts for a run with the drill's own settings. A name is
    #: a check's ``name`` (its ``kind`` when unnamed), or ``fault_landed`` in a drill with faults.
    predicts: dict[str, PredictedStatus] = Field(default_factory=dict)

    @field_validator("predicts")
    @classmethod
    def _predicts_name_checks(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        checks = info.data.get("checks")
        if checks is None or "faults" not in info.data:
            return value  # the checks themselves were invalid: reported there
        names = check_names(checks, bool(info.data["faults"]))
        for name in value:
            if name not in names:
                suggestion = did_you_mean(name, names)
                hint = f" (did you mean '{suggestion}'?)" if suggestion else ""
                message = (
                    f"predicts a verdict for {name!r}, which is none of the drill's checks{hint}; "
                    f"checks: {', '.join(names) or '(none)'}"
                )
                raise at_key(name, message) if _KEY.match(name) else ValueError(message)
        return value

    def fault_names(self) -> list[str]:
        """Each fault's name, defaulting to ``<kind>-<index>``."""
        return [f.name or f"{f.kind}-{i}" for i, f in enumerate(self.faults)]
