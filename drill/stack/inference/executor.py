"""The virtual GPU that runs a step: prices the batch and samples its tokens.

Called by the engine loop once per non-empty step, between :meth:`Scheduler.schedule` and
:meth:`Scheduler.update_from_output`. It never sleeps: the engine loop turns
:attr:`ModelRunnerOutput.cost` into real time (plus the interconnect's excess).
"""

from __future__ import annotations

from drill.stack.inference.cost_model import CostModel
from drill.stack.inference.gpu import GpuState
from drill.stack.inference.sched_output import ModelRunnerOutput, SchedulerOutput

__all__ = ["Executor"]


class Executor:
    """Runs steps on the virtual GPU described by ``gpu`` (memory plan and conditions)."""

    def __init__(self, cost_model: CostModel, gpu: GpuState) -> None:
        self.cost_model = cost_model
        self.gpu = gpu

    def execute_model(self, out: SchedulerOutput) -> ModelRunnerOutput:
        """Price the step and sample one token per sampling request.

        Raises :class:`~drill.stack.inference.exceptions.EngineDeadError` when the step's activation memory
        does not fit (simulated CUDA OOM under a memory hog).
        """
        self.gpu.check_step_memory(out.total_num_scheduled_tokens)
        cost = self.cost_model.step_cost(out.batch, self.gpu.clock_fraction)
        # a request reaches sampling only from the API layer, which gives each a sampler (the step's hot path: no check)
        sampled = [request.sampler.next_token() for request in out.sampling]  # type: ignore[union-attr]
        return ModelRunnerOutput(sampled, cost)
