"""One replica's engine options (``engine`` of the stack config), and :data:`EngineOverrides`: some of them, over the
stack's engine, for the prefill or the decode workers of a disaggregated topology (:mod:`drill.stack.topology`).

Kept apart from :mod:`drill.stack.config` so the topology can name the engine's fields without importing the config
that holds it.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from drill.units import Duration

__all__ = ["EngineConfig", "EngineOverrides", "SchedulingPolicy", "apply_overrides"]

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class SchedulingPolicy(str, enum.Enum):
    """vLLM's ``--scheduling-policy``: first come first served, or ``priority`` (lower value first)."""

    FCFS = "fcfs"
    PRIORITY = "priority"


class EngineConfig(BaseModel):
    """One replica's engine options, named as vLLM names them (docs/serving-facts.md §3.2, §4).

    ``max_num_queued_reqs`` / ``max_num_queued_tokens`` are vLLM ≥ 0.29's opt-in admission flags;
    ``None`` keeps vLLM's default unbounded waiting queue; a refusal carries no ``Retry-After``, as vLLM's
    does not, unless ``refusal_retry_after`` (not a vLLM option: what a gateway in front might add) is set.
    ``max_queue_wait`` (seconds) refuses a request with 503 once it has waited longer. ``weight_load_time``
    is ``"auto"`` (modelled from the weight bytes, see
    :func:`drill.stack.inference.cost_model.weight_load_seconds`) or a duration.
    """

    model_config = _FROZEN

    tensor_parallel_size: int = Field(1, ge=1, le=64)
    pipeline_parallel_size: int = Field(1, ge=1, le=64)
    max_model_len: int = Field(8192, ge=16)
    max_num_seqs: int = Field(256, ge=1)
    max_num_batched_tokens: int = Field(8192, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    block_size: Literal[8, 16, 32, 64, 128] = 16
    enable_prefix_caching: bool = False
    scheduling_policy: SchedulingPolicy = SchedulingPolicy.FCFS
    long_prefill_token_threshold: int = Field(0, ge=0, description="cap on one prefill chunk; 0 = off")
    max_num_queued_reqs: int | None = Field(None, ge=1)
    max_num_queued_tokens: int | None = Field(None, ge=1)
    max_queue_wait: Duration | None = None
    refusal_retry_after: Duration | None = Field(None, ge=0)
    weight_load_time: Literal["auto"] | Duration = "auto"

    @field_validator("max_queue_wait")
    @classmethod
    def _positive_wait(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError(f"max_queue_wait must be positive, got {value}s")
        return value

    @field_validator("weight_load_time")
    @classmethod
    def _non_negative_load(cls, value: str | float) -> str | float:
        if not isinstance(value, str) and value < 0:
            raise ValueError(f"weight_load_time must be 'auto' or a non-negative duration, got {value}s")
        return value

    @model_validator(mode="after")
    def _batch_fits(self) -> EngineConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be greater than or equal to "
                f"max_num_seqs ({self.max_num_seqs})"
            )
        return self

    @property
    def world_size(self) -> int:
        """GPUs per replica: tensor_parallel_size × pipeline_parallel_size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


def _bounded(annotation: Any, metadata: list[Any]) -> Any:
    """``annotation`` with its field's bounds (ge, le, ...) attached, so they hold inside ``| None`` too."""
    return Annotated[(annotation, *metadata)] if metadata else annotation


def _overrides_model() -> type[BaseModel]:
    """EngineConfig's own fields, each optional (None: the stack's engine's value), with the same types and bounds."""
    fields: dict[str, Any] = {
        name: (_bounded(info.annotation, info.metadata) | None, Field(None, description=info.description))
        for name, info in EngineConfig.model_fields.items()
    }
    return create_model(
        "EngineOverrides",
        __config__=_FROZEN,
        __doc__="Fields of ``engine`` that one role of a disaggregated topology sets over the stack's engine.",
        **fields,
    )


if TYPE_CHECKING:
    EngineOverrides: TypeAlias = BaseModel
else:
    EngineOverrides = _overrides_model()


def apply_overrides(engine: EngineConfig, overrides: BaseModel | None) -> EngineConfig:
    """``engine`` with the fields ``overrides`` sets; validated whole again (a cross-field rule such as
    max_num_batched_tokens ≥ max_num_seqs holds for the result). Raises pydantic's ValidationError when not."""
    if overrides is None:
        return engine
    changed = overrides.model_dump(mode="json", exclude_none=True)  # durations as text, as a file writes them
    if not changed:
        return engine
    return EngineConfig.model_validate({**engine.model_dump(mode="json"), **changed})
