"""The virtual GPU's memory plan and the GPU conditions the admin API can impose. All simulated.

Memory (per GPU, vLLM V1's recipe, docs/serving-facts.md §4 "gpu_memory_utilization"):
``budget = memory × gpu_memory_utilization``; ``KV = budget − weights − activation reserve``,
where the reserve is the peak activation of a ``max_num_batched_tokens`` forward pass
(:meth:`CostModel.activation_bytes`) plus 512 MiB of non-torch memory (CUDA context, NCCL,
CUDA graphs); ``num_blocks = KV / (block_size × KV bytes per token per GPU)``.

Conditions (stack-contracts.md §5), which cannot be produced from outside without a GPU:

* **Memory hog** (another process takes N bytes): it first takes the memory vLLM leaves free
  (``memory × (1 − gpu_memory_utilization)``), then KV blocks (the cache shrinks; running requests
  are preempted until the rest fit), then the activation reserve. A step whose activation memory
  no longer fits raises :class:`EngineDeadError` with PyTorch's CUDA OOM text: the engine dies.
* **Clock cap** (fraction of the nominal SM clock): the cost model slows compute by 1/fraction
  and memory by 1/fraction^0.3 (see :mod:`drill.stack.inference.cost_model`).
* **XID error**: the engine dies at once (:meth:`GpuState.xid_error`).
* **Stall**: the engine takes no step until a deadline (HTTP stays up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from drill.errors import StackError
from drill.stack.config import EngineConfig
from drill.stack.inference.cost_model import CostModel
from drill.stack.inference.exceptions import EngineDeadError

__all__ = ["GIB", "GpuState", "MemoryPlan", "NON_TORCH_BYTES", "plan_memory", "xid_description"]

GIB = 1024**3
#: CUDA context, NCCL buffers and CUDA graphs outside the torch allocator, bytes per GPU.
NON_TORCH_BYTES = 512 * 1024**2

_XID_TEXT = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}


def xid_description(code: int) -> str:
    """NVIDIA's short name for an XID code (``"Unknown XID"`` when not listed)."""
    return _XID_TEXT.get(code, "Unknown XID")


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """How one GPU's memory is split, bytes. ``num_blocks`` is the KV cache size in blocks."""

    total_bytes: int
    budget_bytes: int
    weight_bytes: int
    activation_reserve_bytes: int
    kv_bytes: int
    block_bytes: int
    num_blocks: int

    @property
    def outside_budget_bytes(self) -> int:
        """Memory vLLM leaves to other processes: total − budget."""
        return self.total_bytes - self.budget_bytes

    def kv_tokens(self, block_size: int) -> int:
        """Tokens the KV cache holds (vLLM's start-up log: "GPU KV cache size: N tokens")."""
        return self.num_blocks * block_size


def plan_memory(cost_model: CostModel, engine: EngineConfig, total_bytes: int) -> MemoryPlan:
    """Split one GPU's memory as vLLM does at start-up.

    Raises :class:`StackError` with vLLM's start-up messages when no KV block fits, or when one
    ``max_model_len`` sequence does not fit in the KV cache.
    """
    budget = int(total_bytes * engine.gpu_memory_utilization)
    weights = int(cost_model.weight_bytes_per_gpu)
    reserve = cost_model.activation_bytes(engine.max_num_batched_tokens) + NON_TORCH_BYTES
    block_bytes = int(engine.block_size * cost_model.kv_bytes_per_token_per_gpu)
    kv_bytes = budget - weights - reserve
    num_blocks = kv_bytes // block_bytes if kv_bytes > 0 else 0
    if num_blocks <= 0:
        raise StackError(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            f"initializing the engine. (weights {weights / GIB:.2f} GiB + activations {reserve / GIB:.2f} GiB "
            f"per GPU exceed {budget / GIB:.2f} GiB)"
        )
    max_tokens = num_blocks * engine.block_size
    if engine.max_model_len > max_tokens:
        raise StackError(
            f"The model's max seq len ({engine.max_model_len}) is larger than the maximum number of tokens "
            f"that can be stored in KV cache ({max_tokens}). Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine."
        )
    return MemoryPlan(total_bytes, budget, weights, reserve, num_blocks * block_bytes, block_bytes, num_blocks)


class GpuState:
    """The mutable condition of the replica's GPUs, changed by the admin API and read by the engine."""

    def __init__(self, plan: MemoryPlan, cost_model: CostModel) -> None:
        self.plan = plan
        self.cost_model = cost_model
        self.memory_hog_bytes = 0
        self.clock_fraction = 1.0
        self.stall_until: float | None = None  # engine-loop time; None = no stall

    @property
    def overflow_bytes(self) -> int:
        """Bytes the hog takes from vLLM's own budget (after the memory vLLM leaves free)."""
        return max(0, self.memory_hog_bytes - self.plan.outside_budget_bytes)

    def usable_blocks(self) -> int:
        """KV blocks left to the engine under the current memory hog."""
        lost = math.ceil(self.overflow_bytes / self.plan.block_bytes)
        return max(0, self.plan.num_blocks - lost)

    def activation_bytes_free(self) -> int:
        """Activation reserve left once the hog has eaten through the KV cache (bytes, may be < 0)."""
        into_reserve = max(0, self.overflow_bytes - self.plan.kv_bytes)
        return self.plan.activation_reserve_bytes - into_reserve

    def check_step_memory(self, num_tokens: int) -> None:
        """Raise :class:`EngineDeadError` (CUDA OOM) when a step of ``num_tokens`` cannot get its activations."""
        if self.overflow_bytes <= self.plan.kv_bytes:
            return
        need = self.cost_model.activation_bytes(num_tokens) + NON_TORCH_BYTES
        free = self.activation_bytes_free()
        if need > free:
            raise EngineDeadError(
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {need / GIB:.2f} GiB. "
                f"GPU 0 has a total capacity of {self.plan.total_bytes / GIB:.2f} GiB of which "
                f"{max(free, 0) / GIB:.2f} GiB is free. Another process has "
                f"{self.memory_hog_bytes / GIB:.2f} GiB memory in use. (simulated by drill)"
            )

    @staticmethod
    def xid_error(code: int) -> EngineDeadError:
        """The :class:`EngineDeadError` of a fatal XID error (the engine dies of it at once)."""
        return EngineDeadError(
            f"NVIDIA XID {code}: {xid_description(code)}; CUDA error: unspecified launch failure (simulated by drill)"
        )
