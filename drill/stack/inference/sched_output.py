"""What one engine step decided and produced (vLLM's ``vllm/v1/core/sched/output.py`` analogue).

:class:`SchedulerOutput` is returned by :meth:`Scheduler.schedule` (decide), consumed by
:meth:`Executor.execute_model`, which returns :class:`ModelRunnerOutput`; both go into
:meth:`Scheduler.update_from_output` (apply), which returns :class:`EngineCoreOutput` items.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drill.stack.inference.cost_model import BatchShape, StepCost
from drill.stack.inference.request import Request

__all__ = ["EngineCoreOutput", "ModelRunnerOutput", "SchedulerOutput"]


@dataclass(slots=True)
class SchedulerOutput:
    """The batch of one step.

    ``scheduled`` lists every request in the step, running ones first; ``num_scheduled_tokens``
    maps request id → new tokens computed this step (a prefill chunk, or 1 for a decode).
    ``sampling`` are the requests whose prompt (or recompute) completes this step, so they
    sample a token.
    """

    scheduled: list[Request] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    scheduled_new_reqs: list[Request] = field(default_factory=list)
    scheduled_resumed_reqs: list[Request] = field(default_factory=list)
    preempted_reqs: list[Request] = field(default_factory=list)
    sampling: list[Request] = field(default_factory=list)
    total_num_scheduled_tokens: int = 0
    num_prefill_tokens: int = 0
    batch: BatchShape = BatchShape(0, 0, 0, 0, 0)

    @property
    def is_empty(self) -> bool:
        """True when nothing was scheduled (no step to run)."""
        return self.total_num_scheduled_tokens == 0


@dataclass(slots=True)
class ModelRunnerOutput:
    """What the virtual GPU produced: one sampled token per sampling request, and the step's cost."""

    sampled_token_ids: list[int]
    cost: StepCost


@dataclass(slots=True)
class EngineCoreOutput:
    """New output of one request after a step. ``inter_token_latency`` is None for the first token."""

    request: Request
    new_token_ids: list[int]
    finished: bool
    inter_token_latency: float | None
