"""Configuration of the reference stack: the whole stack YAML (stack-contracts.md §1) as frozen models.

Called by ``drill stack up --config stack.yaml`` (through :func:`load_stack_config`), by a drill's
``target.config``, and by the replica process, which receives the whole :class:`StackConfig` inside
its :class:`~drill.stack.launch.ReplicaLaunch`. vLLM's own option names are used wherever vLLM
has one (docs/serving-facts.md §4). Durations are strings with units (``"2s"``), parsed by
:mod:`drill.units` into seconds.
"""

from __future__ import annotations

import enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from drill.api import RouterRetryOn
from drill.errors import SpecError
from drill.spec.loader import load_model_file
from drill.spec.validation import at_key, validate_model
from drill.spec.yamlio import Locations
from drill.stack.engine_config import EngineConfig, SchedulingPolicy, apply_overrides
from drill.stack.presets import GpuPreset, ModelPreset, gpu_names, gpu_preset, model_names, model_preset
from drill.stack.topology import TopologyConfig, WorkerRole, worker_counts
from drill.units import BindHost, Duration

__all__ = [
    "EngineConfig",
    "LinksConfig",
    "RetryConfig",
    "RouterConfig",
    "RouterPolicy",
    "Runtime",
    "SchedulingPolicy",
    "SpanShape",
    "StackConfig",
    "TracingConfig",
    "load_stack_config",
    "parse_stack_config",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class SpanShape(str, enum.Enum):
    """Which spans a replica exports per request (``tracing.span_shape``).

    ``vllm`` (the default) is what vLLM exports: one ``llm_request`` span, parented to the incoming
    ``traceparent``, with its phases as ``gen_ai.latency.*`` attributes (``vllm/v1/engine/output_processor.py``,
    ``do_tracing``); the harness's readers turn those into phase spans (:mod:`drill.traces.request_phases`).
    ``teaching`` adds what vLLM does not export, to show where the time goes: the replica's HTTP SERVER span
    around ``llm_request``, and ``queue``/``prefill``/``decode`` child spans.
    """

    VLLM = "vllm"
    TEACHING = "teaching"


class RouterPolicy(str, enum.Enum):
    """How the router picks a replica (topology side)."""

    LEAST_OUTSTANDING = "least_outstanding"
    ROUND_ROBIN = "round_robin"


class Runtime(str, enum.Enum):
    """Where replicas run: local processes, or one Docker container per replica."""

    LOCAL = "local"
    DOCKER = "docker"


class RetryConfig(BaseModel):
    """Router retries: ``attempts`` extra tries after the first, on the listed failures."""

    model_config = _FROZEN

    attempts: int = Field(0, ge=0, le=10)
    on: tuple[RouterRetryOn, ...] = (RouterRetryOn.ERROR, RouterRetryOn.TIMEOUT)
    timeout: Duration = Field(30.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, data: object) -> object:
        """YAML 1.1 (PyYAML) reads the bare key ``on`` as ``True``; take it back as ``on``."""
        if isinstance(data, dict) and True in data:
            data = {("on" if key is True else key): value for key, value in data.items()}
        return data


class RouterConfig(BaseModel):
    """The router's options (topology side; it may extend this model)."""

    model_config = _FROZEN

    policy: RouterPolicy = RouterPolicy.LEAST_OUTSTANDING
    retries: RetryConfig = RetryConfig()
    idempotency: bool = False
    health_check_interval: Duration = Field(1.0, gt=0)


class LinksConfig(BaseModel):
    """Where the launcher puts Toxiproxy proxies (topology side)."""

    model_config = _FROZEN

    replica_proxies: bool = True
    tp_proxies: bool = True
    pp_proxies: bool = True
    byte_scale: float = Field(
        1 / 1024,
        gt=0,
        le=1,
        description=(
            "TP/PP bytes actually sent per modelled byte (drill.stack.interconnect.tcp); link predictions use it too"
        ),
    )


class TracingConfig(BaseModel):
    """What the replicas export as spans (:class:`SpanShape`)."""

    model_config = _FROZEN

    span_shape: SpanShape = SpanShape.VLLM


class StackConfig(BaseModel):
    """The whole stack YAML (stack-contracts.md §1).

    ``abort_abandoned`` is the cancellation switch of stack-contracts.md §4 "Cancellation": on (vLLM's
    behaviour) the router closes the upstream request of a client that went away and the replica aborts a
    request whose connection closed; off, the replica computes abandoned requests to the end.
    ``model`` and ``gpu`` name presets (:mod:`drill.stack.presets`); an unknown name is an error
    listing the known ones. ``max_model_len`` may not exceed the model's own context length.
    """

    model_config = _FROZEN

    model: str = "llama-3-8b"
    gpu: str = "h100"
    served_model_name: str | None = None
    replicas: int = Field(2, ge=1, le=64)
    seed: int = 0
    engine: EngineConfig = EngineConfig()
    router: RouterConfig = RouterConfig()
    links: LinksConfig = LinksConfig()
    tracing: TracingConfig = TracingConfig()
    topology: TopologyConfig | None = Field(
        None, description="disaggregated prefill/decode workers (drill.stack.topology); absent: aggregated"
    )
    runtime: Runtime = Runtime.LOCAL
    host: BindHost = "127.0.0.1"
    abort_abandoned: bool = Field(
        True,
        description=(
            "a request whose client has gone (closed connection, the router's upstream timeout) is aborted "
            "wherever it is, as vLLM does; false keeps computing it (what abandoned work costs)"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _replicas_from_topology(cls, data: object) -> object:
        """With ``topology``, the replicas are its prefill + decode workers (``replicas`` may not be given too)."""
        if not isinstance(data, dict) or not isinstance(data.get("topology"), dict):
            return data
        try:
            prefill, decode = worker_counts(data["topology"])
        except ValueError:
            return data  # the topology's own validation says what is wrong, where
        if not (isinstance(prefill, int) and isinstance(decode, int)):
            return data  # the topology's own validation says what is wrong
        if data.get("replicas", prefill + decode) != prefill + decode:
            raise ValueError("give either replicas or topology (its prefill + decode workers are the replicas)")
        return {**data, "replicas": prefill + decode}

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in model_names():
            raise ValueError(f"unknown model preset {value!r}; expected one of: {', '.join(model_names())}")
        return value

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value not in gpu_names():
            raise ValueError(f"unknown gpu preset {value!r}; expected one of: {', '.join(gpu_names())}")
        return value

    @model_validator(mode="after")
    def _context_fits_model(self) -> StackConfig:
        limit = model_preset(self.model).max_position
        if self.engine.max_model_len > limit:
            raise ValueError(
                f"engine.max_model_len ({self.engine.max_model_len}) is larger than the maximum context "
                f"length of {self.model} ({limit} tokens)"
            )
        return self

    @model_validator(mode="after")
    def _role_engines_valid(self) -> StackConfig:
        """Each role's engine (its fields over ``engine``) is a valid engine that fits the model."""
        if self.topology is None:
            return self
        limit = model_preset(self.model).max_position
        for role in WorkerRole:
            key = f"{role.value}_engine"
            try:
                engine = apply_overrides(self.engine, self.topology.engine_overrides(role))
            except ValidationError as exc:
                reasons = "; ".join(str(e["msg"]) for e in exc.errors(include_url=False))
                raise at_key("topology", f"{key} over engine is not a valid engine: {reasons}") from None
            if engine.max_model_len > limit:
                raise at_key(
                    "topology",
                    f"{key}: max_model_len ({engine.max_model_len}) is larger than the maximum context length of "
                    f"{self.model} ({limit} tokens)",
                )
        sizes = {self.engine_of(0).block_size, self.engine_of(self.topology.prefill).block_size}
        if len(sizes) > 1:
            raise at_key(
                "topology",
                f"prefill and decode workers need the same block_size (KV transfers move whole blocks), got "
                f"{' and '.join(map(str, sorted(sizes)))}",
            )
        return self

    def engine_of(self, index: int) -> EngineConfig:
        """Replica ``index``'s engine: its role's (``topology.<role>_engine`` over ``engine``) in a disaggregated
        stack, ``engine`` otherwise."""
        if self.topology is None:
            return self.engine
        return apply_overrides(self.engine, self.topology.engine_overrides(self.topology.role_of(index)))

    def replica_config(self, index: int) -> StackConfig:
        """The config replica ``index`` is launched with: ``engine`` is its own (:meth:`engine_of`), so everything
        the replica builds from ``config.engine`` (cost model, GPU and KV sizing, TP/PP links, metrics) is its
        role's. Applying it again changes nothing."""
        engine = self.engine_of(index)
        return self if engine == self.engine else self.model_copy(update={"engine": engine})

    @property
    def gpus(self) -> int:
        """GPUs of the whole stack: each replica's TP × PP (a P/D role's own), summed."""
        return sum(self.engine_of(index).world_size for index in range(self.replicas))

    @property
    def model_name(self) -> str:
        """The name clients send and metrics carry: ``served_model_name`` or the preset name."""
        return self.served_model_name or self.model

    @property
    def model_preset(self) -> ModelPreset:
        return model_preset(self.model)

    @property
    def gpu_preset(self) -> GpuPreset:
        return gpu_preset(self.gpu)


def parse_stack_config(data: object, *, source: str = "<stack config>") -> StackConfig:
    """Validate already-loaded data (a drill's ``target.config``, a test's dict) into a :class:`StackConfig`.

    Raises :class:`SpecError` carrying every problem as a located diagnostic (here at ``source``: plain
    data has no lines; :func:`load_stack_config` keeps the file's ``line:col``).
    """
    locations = Locations(source)
    if data is None:
        data = {}
    instance, problems = validate_model(StackConfig, data, locations)
    if instance is None:
        raise SpecError(problems, f"{len(problems)} error(s) in {source}; nothing was started.")
    return instance


def load_stack_config(path: Path | str) -> StackConfig:
    """Read and validate a stack YAML file through :mod:`drill.spec`, like every drill and scenario file.

    Raises :class:`SpecError` (``file:line:col: error: ...``) when the file is missing, unreadable, not YAML
    or invalid.
    """
    return load_model_file(path, StackConfig, what="stack config")
