"""Scenario files (``scenarios/*.yaml``): the shape of production load.

A scenario has one or more **pools** (e.g. ``interactive`` and ``batch``), each
with its share of the arrivals or its own arrival process, a priority, an
endpoint kind, streaming on/off, input and output token distributions, sampling
parameters, a client timeout, a retry policy and its SLO. The arrival process
is Poisson, gamma with a burstiness factor (vLLM bench's ``--burstiness``:
1 = Poisson, < 1 burstier), constant, stages (ramp, step, spike), or the replay
of a trace file in the Azure LLM inference format
(``TIMESTAMP,ContextTokens,GeneratedTokens``). A seed makes the request set
identical across runs.

Distributions follow ``docs/serving-facts.md`` §7: production lengths are
multimodal, so an empirical quantile table (inverse CDF with interpolation in
log space) is the faithful choice; lognormal and gamma fits are available.
"""

from __future__ import annotations

import enum
import math
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from drill.spec.validation import SpecModel, at_key
from drill.units import Duration

__all__ = [
    "Arrival",
    "ArrivalProcess",
    "Endpoint",
    "LengthDistribution",
    "Pool",
    "RetryPolicy",
    "Sampling",
    "Scenario",
    "Slo",
    "Stage",
    "StageKind",
    "TraceReplay",
    "parse_rate",
    "parse_slo_key",
    "planned_load_problem",
    "SLO_METRICS",
    "MAX_PLANNED_ARRIVALS",
    "MAX_RATE",
]


#: Highest arrival rate a scenario may ask for (requests/s): far beyond what one load driver sends.
MAX_RATE = 100_000.0
#: Most arrivals a run may plan: the schedule is built in memory before the first request is sent.
MAX_PLANNED_ARRIVALS = 2_000_000


def parse_rate(value: object) -> float:
    """Requests per second: ``12``, ``12.5``, ``"12/s"``, ``"600/min"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a rate such as 10 or '600/min', got {value!r}")
    if isinstance(value, (int, float)):
        rate = float(value)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|min|m|h)\s*", str(value))
        if not match:
            raise ValueError(f"expected a rate in requests per second such as 10, '10/s' or '600/min', got {value!r}")
        per = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}[match.group(2)]
        rate = float(match.group(1)) / per
    if not math.isfinite(rate) or rate > MAX_RATE:
        raise ValueError(f"rate {value!r} is above the largest a scenario may ask for ({MAX_RATE:g}/s)")
    return rate


Rate = Annotated[float, BeforeValidator(parse_rate), Field(ge=0)]


class ArrivalProcess(str, enum.Enum):
    POISSON = "poisson"
    GAMMA = "gamma"
    CONSTANT = "constant"
    STAGES = "stages"
    TRACE = "trace"


class StageKind(str, enum.Enum):
    RAMP = "ramp"  # linear from `from` to `to` over the stage
    STEP = "step"  # constant `rate`
    SPIKE = "spike"  # a short burst at `rate` (same as step; named for intent)


class Stage(SpecModel):
    kind: StageKind = StageKind.STEP
    duration: Duration
    rate: Rate | None = None
    from_rate: Rate | None = Field(None, alias="from")
    to_rate: Rate | None = Field(None, alias="to")

    @model_validator(mode="after")
    def _rates_for_kind(self) -> Stage:
        if self.duration <= 0:
            raise at_key("duration", f"a stage needs a positive duration, got {self.duration:g}s")
        if self.kind is StageKind.RAMP and (self.from_rate is None or self.to_rate is None):
            raise at_key("from" if self.from_rate is None else "to", "a ramp stage needs 'from' and 'to' rates")
        if self.kind is not StageKind.RAMP and self.rate is None:
            raise at_key("rate", f"a {self.kind.value} stage needs 'rate'")
        return self


class TraceReplay(SpecModel):
    """Replay of an Azure-format CSV; ``file`` is relative to the scenario file."""

    file: str
    speedup: float = Field(1.0, ge=0.001, le=1e6)
    start: Duration = Field(0.0, ge=0)  # offset into the trace
    duration: Duration | None = Field(None, gt=0)  # window length in trace time; None = to the end
    use_lengths: bool = True  # take input/output tokens from the trace rows


class Arrival(SpecModel):
    process: ArrivalProcess = ArrivalProcess.POISSON
    rate: Rate | None = None
    burstiness: float = Field(1.0, ge=0.01, le=100)  # gamma shape; 1 = Poisson (smaller overflows the sampler)
    stages: list[Stage] = Field(default_factory=list)
    trace: TraceReplay | None = None

    @model_validator(mode="after")
    def _fields_for_process(self) -> Arrival:
        p = self.process
        if p in (ArrivalProcess.POISSON, ArrivalProcess.GAMMA, ArrivalProcess.CONSTANT) and self.rate is None:
            raise at_key("process", f"a {p.value} arrival process needs 'rate' (requests per second)")
        if p is ArrivalProcess.STAGES and not self.stages:
            raise at_key("process", "a stages arrival process needs a non-empty 'stages' list")
        if p is ArrivalProcess.TRACE and self.trace is None:
            raise at_key("process", "a trace arrival process needs 'trace: {file: ...}'")
        return self


class DistributionKind(str, enum.Enum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    LOGNORMAL = "lognormal"
    GAMMA = "gamma"
    EMPIRICAL = "empirical"
    TRACE = "trace"  # lengths come from the trace rows (trace arrivals only)


class LengthDistribution(SpecModel):
    """Token-length distribution. Samples are rounded and clipped to [min, max]."""

    dist: DistributionKind
    # Bounds keep every draw finite: exp(mu + 9 sigma) and shape x scale stay far below float overflow.
    value: int | None = Field(None, ge=1)  # fixed
    mu: float | None = Field(None, ge=-50, le=50)  # lognormal (of ln tokens)
    sigma: float | None = Field(None, gt=0, le=10)
    shape: float | None = Field(None, ge=0.01, le=1e6)  # gamma (smaller shapes overflow the sampler)
    scale: float | None = Field(None, gt=0, le=1e7)
    quantiles: list[float] | None = None  # empirical: equally spaced q0..q100
    min: int = Field(1, ge=1)
    max: int = Field(1_000_000, ge=1)

    @model_validator(mode="after")
    def _params_for_kind(self) -> LengthDistribution:
        needs = {
            DistributionKind.FIXED: ("value",),
            DistributionKind.LOGNORMAL: ("mu", "sigma"),
            DistributionKind.GAMMA: ("shape", "scale"),
            DistributionKind.EMPIRICAL: ("quantiles",),
            DistributionKind.UNIFORM: (),
        }.get(self.dist, ())
        missing = [n for n in needs if getattr(self, n) is None]
        if missing:
            raise at_key("dist", f"a {self.dist.value} distribution needs {', '.join(missing)}")
        if self.min > self.max:
            raise at_key("min", f"min ({self.min}) is greater than max ({self.max})")
        q = self.quantiles
        if q is not None and (len(q) < 2 or any(b < a for a, b in zip(q, q[1:])) or q[0] <= 0):
            raise at_key("quantiles", "quantiles must be at least 2 positive values in non-decreasing order")
        return self


class Endpoint(str, enum.Enum):
    """Which OpenAI route: the one a pool calls (its ``endpoint:``), and the one a request came in on at the
    reference stack (:mod:`drill.stack.replica.openai_api`)."""

    CHAT = "chat"
    COMPLETIONS = "completions"


class Sampling(SpecModel):
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = None
    ignore_eos: bool = True  # generate exactly the sampled output length (vLLM extension)


class ClientRetryOn(str, enum.Enum):
    """Which failures the load driver's client retries (a pool's ``retry.on``); not the router's."""

    REFUSED = "refused"  # 429 / 503
    SERVER_ERROR = "server_error"  # other 5xx
    TIMEOUT = "timeout"
    CONNECTION = "connection"  # connect error / reset


class RetryPolicy(SpecModel):
    """Client retries: ``attempts`` counts extra tries after the first (0 = none)."""

    attempts: int = Field(0, ge=0, le=20)
    backoff: Duration = Field(0.2, ge=0)
    multiplier: float = Field(2.0, ge=1)
    max_backoff: Duration = Field(10.0, ge=0)
    jitter: Literal["none", "full", "equal"] = "full"
    on: list[ClientRetryOn] = Field(
        default_factory=lambda: [
            ClientRetryOn.REFUSED,
            ClientRetryOn.SERVER_ERROR,
            ClientRetryOn.TIMEOUT,
            ClientRetryOn.CONNECTION,
        ]
    )


SLO_METRICS = ("ttft", "tpot", "itl", "e2e")
_SLO_KEY = re.compile(r"^(ttft|tpot|itl|e2e)_p(50|90|95|99|99\.9|999)$")


def parse_slo_key(key: str) -> tuple[str, float] | None:
    """``"ttft_p95"`` -> ``("ttft", 95.0)``; ``p999`` and ``p99.9`` are both 99.9; None if not an SLO key."""
    match = _SLO_KEY.match(key)
    if match is None:
        return None
    return match.group(1), 99.9 if match.group(2) in ("999", "99.9") else float(match.group(2))


def _check_slo_keys(value: object) -> object:
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or not _SLO_KEY.match(key):
                raise ValueError(
                    f"unknown SLO {key!r}; write <metric>_p<percentile> with metric one of "
                    f"{', '.join(SLO_METRICS)} and percentile 50, 90, 95, 99 or 99.9 (e.g. ttft_p95: 2s)"
                )
    return value


def _check_slo_bounds(value: dict[str, float]) -> dict[str, float]:
    for key, bound in value.items():
        if not bound > 0:
            raise ValueError(f"the SLO {key} is {bound:g}s; a latency bound must be more than 0 (e.g. {key}: 2s)")
    return value


#: ``{"ttft_p95": 2.0, "tpot_p99": 0.1}``: each a latency bound in seconds (more than 0) at a percentile.
Slo = Annotated[dict[str, Duration], BeforeValidator(_check_slo_keys), AfterValidator(_check_slo_bounds)]


class Pool(SpecModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    share: float | None = Field(None, gt=0, le=1)
    arrival: Arrival | None = None
    priority: int = 0
    endpoint: Endpoint = Endpoint.CHAT
    stream: bool = True
    input_tokens: LengthDistribution
    output_tokens: LengthDistribution
    prefix_tokens: int = Field(0, ge=0)  # a shared prefix (system prompt) for prefix-cache hits
    sampling: Sampling = Sampling()
    timeout: Duration = Field(60.0, gt=0)
    retry: RetryPolicy = RetryPolicy()
    slo: Slo = Field(default_factory=dict)


class Scenario(SpecModel):
    name: str | None = None
    description: str | None = None
    seed: int = 0
    duration: Duration | None = Field(None, gt=0)  # default length for `drill load`
    arrival: Arrival | None = None  # shared by pools that have a `share`
    max_in_flight: int = Field(1000, ge=1)  # beyond it, arrivals are client-side drops
    model: str | None = None  # default: the first model from /v1/models
    #: Token-exact prompts (drill.load.tokenizing): ``server`` (the target's tokenize endpoint; the default for an
    #: external target), ``file:<path>`` (a local tokenizer.json) or ``words`` (one token per word: the embedded
    #: stack's rule, and its default).
    tokenizer: str | None = Field(None, pattern=r"^(server|words|file:.+)$")
    pools: list[Pool] = Field(min_length=1)

    @field_validator("pools")
    @classmethod
    def _unique_pool_names(cls, pools: list[Pool]) -> list[Pool]:
        names = [p.name for p in pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique; repeated: {', '.join(dupes)}")
        return pools

    @model_validator(mode="after")
    def _shares_and_arrivals(self) -> Scenario:
        shared = [p for p in self.pools if p.arrival is None]
        if shared and self.arrival is None:
            names = ", ".join(p.name for p in shared)
            raise at_key("pools", f"pools without their own 'arrival' ({names}) need a scenario-level 'arrival'")
        if shared:
            shares = [p.share if p.share is not None else (1.0 if len(shared) == 1 else None) for p in shared]
            if any(s is None for s in shares):
                raise at_key("pools", "when several pools share the scenario's arrival process, each needs a 'share'")
            total = sum(s for s in shares if s is not None)  # every one is set (checked above)
            if abs(total - 1.0) > 1e-6:
                raise at_key("pools", f"pool shares sum to {total:g}; they must sum to 1")
        return self

    @model_validator(mode="after")
    def _trace_lengths(self) -> Scenario:
        """``dist: trace`` takes a request's length from its trace row: only with a trace arrival that keeps them."""
        for pool in self.pools:
            kinds = [k for k in ("input_tokens", "output_tokens") if getattr(pool, k).dist is DistributionKind.TRACE]
            arrival = pool.arrival or self.arrival
            if not kinds or (
                arrival is not None
                and arrival.process is ArrivalProcess.TRACE
                and arrival.trace is not None
                and arrival.trace.use_lengths
            ):
                continue
            process = "none" if arrival is None else arrival.process.value
            detail = " with use_lengths: false" if arrival is not None and arrival.trace is not None else ""
            raise at_key(
                "pools",
                f"pool {pool.name!r} takes {' and '.join(kinds)} from trace rows (dist: trace), "
                f"but its arrival process is {process}{detail}; use a trace arrival with "
                f"use_lengths: true, or another distribution",
            )
        return self


def _peak_rate(arrival: Arrival | None) -> float:
    """The highest rate ``arrival`` asks for (requests/s); trace replays are bounded by their file."""
    if arrival is None or arrival.process is ArrivalProcess.TRACE:
        return 0.0
    if arrival.process is ArrivalProcess.STAGES:
        rates = [r for stage in arrival.stages for r in (stage.rate, stage.from_rate, stage.to_rate) if r is not None]
        return max(rates, default=0.0)
    return float(arrival.rate or 0.0)


def planned_load_problem(scenario: Scenario, duration_s: float) -> str | None:
    """Why the arrivals of ``scenario`` over ``duration_s`` cannot be planned in memory, or None.

    The schedule (every arrival, with its lengths) is built before the first request is sent; a rate
    that validates but asks for billions of arrivals would only fail then.
    """
    peak = _peak_rate(scenario.arrival) + sum(_peak_rate(p.arrival) for p in scenario.pools)
    planned = peak * duration_s
    if planned <= MAX_PLANNED_ARRIVALS:
        return None
    return (
        f"the arrival rates (up to {peak:g}/s in all) over {duration_s:g}s plan about {planned:.3g} requests; "
        f"a run plans at most {MAX_PLANNED_ARRIVALS}"
    )
