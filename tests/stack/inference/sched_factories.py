"""Factories for step-driven scheduler tests, after vLLM's ``tests/v1/core/utils.py``.

``create_scheduler(...)`` builds a scheduler over a KV cache of ``num_blocks`` blocks with a fake
clock; ``create_requests(...)`` builds requests with word prompts; ``step(...)`` runs one
schedule → execute → update_from_output cycle without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drill.stack.config import EngineConfig, SchedulingPolicy
from drill.stack.inference.cost_model import StepCost
from drill.stack.inference.kv_cache import KVCacheManager
from drill.stack.inference.request import Request
from drill.stack.inference.sched_output import EngineCoreOutput, ModelRunnerOutput, SchedulerOutput
from drill.stack.inference.scheduler import Scheduler
from drill.stack.inference.textgen import TokenSampler
from drill.stack.inference.tokenizer import make_prompt

_ZERO_COST = StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass
class FakeClock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def create_scheduler(
    *,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 8192,
    num_blocks: int = 10_000,
    block_size: int = 16,
    enable_prefix_caching: bool = False,
    policy: str = "fcfs",
    max_model_len: int = 8192,
    clock: FakeClock | None = None,
    **engine: object,
) -> Scheduler:
    config = EngineConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        enable_prefix_caching=enable_prefix_caching,
        scheduling_policy=SchedulingPolicy(policy),
        max_model_len=max_model_len,
        **engine,
    )
    kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching)
    return Scheduler(config, kv, clock=clock or FakeClock())


def create_requests(
    num_requests: int,
    num_tokens: int = 10,
    max_tokens: int = 16,
    *,
    prefix: str = "req",
    priorities: list[int] | None = None,
    same_prompt: bool = False,
    arrival_time: float = 0.0,
    stop_after: int | None = None,
) -> list[Request]:
    requests = []
    for index in range(num_requests):
        prompt = make_prompt(num_tokens, seed=0 if same_prompt else index + 1).split()
        requests.append(
            Request(
                f"{prefix}{index}",
                prompt,
                max_tokens=max_tokens,
                arrival_time=arrival_time + index * 1e-3,
                priority=priorities[index] if priorities else 0,
                stop_after=stop_after,
                sampler=TokenSampler(index),
            )
        )
    return requests


@dataclass
class StepResult:
    out: SchedulerOutput
    outputs: list[EngineCoreOutput] = field(default_factory=list)

    @property
    def finished_ids(self) -> list[str]:
        return [o.request.request_id for o in self.outputs if o.finished]


def step(scheduler: Scheduler, now: float | None = None) -> StepResult:
    """One schedule → (virtual) execute → update cycle at time ``now``."""
    out = scheduler.schedule()
    sampled = [request.sampler.next_token() for request in out.sampling]
    time = scheduler.clock() if now is None else now
    return StepResult(out, scheduler.update_from_output(out, ModelRunnerOutput(sampled, _ZERO_COST), time))
