"""How long one engine step takes on the virtual GPU: a roofline over GPU and model presets.

Called by the executor once per step (:meth:`CostModel.step_cost`) and by the replica at start
(:meth:`CostModel.weight_load_seconds`). All times are seconds, all sizes bytes.

The model (docs/serving-facts.md §6.2, the step-time model, with the choices below):

    stage_s = softmax3(memory_s, compute_s)                  # one pipeline stage, one TP shard
    memory_s = (W/(tp·pp) + Σ ctx_i · KVB/(tp·pp)) / (HBM_bw · hbm_efficiency · clock^γ)
    compute_s = FLOPs/(tp·pp) / (peak_bf16 · compute_efficiency · clock)
    FLOPs = 2 · (params − embeddings) · tokens + 2 · lm_head · sampled + 4 · layers · hidden · pairs
    step_s = pp · stage_s + comm_s + overhead_s + interconnect excess (stack-contracts.md §8)
    comm_s = 2 · layers · AR(tokens · hidden · 2 B)   if tp > 1      (α + msg · 2(tp−1)/tp / busbw)
           + (pp − 1) · (α_p2p + tokens · hidden · 2 B / bw_p2p)   if pp > 1
    overhead_s = 0.9 ms + 4 µs · seqs                        (scheduler, input prep, sampling on the CPU)

* ``softmax3(a, b) = (a³ + b³)^(1/3)``: kernels do not overlap memory and compute perfectly, so
  near the ridge point the step is slower than ``max`` (at the ridge, 1.26 × max); far from it the
  smaller term vanishes (at a 5:1 ratio it adds 0.3 %). With plain ``max`` the batch-256 anchor A5
  (12.5–17 ms) comes out at 12.4 ms, with a sum at 23 ms.
* Pipeline parallelism runs one batch at a time through ``pp`` stages, so every stage idles
  (pp−1)/pp of the step (the bubble) and the step is ``pp`` stage times plus the transfers.
* An SM clock cap to ``clock`` (fraction of nominal; a thermally throttled GPU) divides the compute
  term by ``clock`` and the memory term by ``clock^0.3``: HBM keeps its own clock, but fewer SM
  cycles issue fewer loads, so achieved bandwidth drops less than compute (γ = 0.3 is a modelling
  choice; at a 0.5 cap a memory-bound decode step slows ×1.23, a prefill ×2).

Calibration (docs/serving-facts.md §6.1; ``tests/stack/inference/test_cost_model.py`` holds each
point within 15 % and prints the table). Llama-3-8B bf16 weights are 16.06 GB:

* A3, H100, batch 10 decode at ~300 tokens of context: memory 16.45 GB / (3.35 TB/s · 0.78) = 6.30 ms;
  compute 1.52e11 FLOP / (989 TFLOP/s · 0.34) = 0.45 ms; softmax3 → 6.30 ms; + 0.94 ms → 7.24 ms
  (anchor ≈ 7.2 ms). The fitted 0.78 of peak HBM matches A3 and A4 alike (§6.1 derives 0.67–0.69
  with overheads folded in; here they are separate).
* A4, A100, same batch: 16.45 GB / (2.039 TB/s · 0.78) = 10.34 ms, compute 0.97 ms → 11.29 ms (anchor ≈ 11.5).
* A5, H100, batch 256 at ~300 tokens: memory (16.06 + 10.07) GB → 10.0 ms; compute 3.88e12 FLOP →
  11.5 ms; softmax3 → 13.6 ms; + 1.9 ms → 15.5 ms (anchor 12.5–17 ms, centre 14.75).
* A3/A4 TTFT: the 10 prompts of the prompt_10 run (1,369 tokens in all; the JSON lists
  ``input_lens`` 13…399) prefill in one step: 1.923e13 FLOP / (989 TFLOP/s · 0.34) = 57.2 ms
  → 58.2 ms (anchor 62.4 ms, which also holds the HTTP round trip); A100 at 0.50: 123.3 → 124.4 ms
  (anchor 126.9 ms). The low H100 efficiency is what vLLM ~0.6 achieved on short prompts.
* A7: a small all-reduce on NVLink4 is α = 6 µs.
"""

from __future__ import annotations

from dataclasses import dataclass

from drill.stack.interconnect.step_exchange import ExchangePlan
from drill.stack.presets import GpuPreset, ModelPreset

__all__ = ["BatchShape", "CostModel", "StepCost", "STEP_OVERHEAD_S", "SEQ_OVERHEAD_S"]

#: CPU-side cost of one step (scheduling, input preparation, sampling), seconds.
STEP_OVERHEAD_S = 0.9e-3
#: Additional CPU-side cost per sequence in the step, seconds.
SEQ_OVERHEAD_S = 4e-6
#: Exponent of the memory term's dependence on the SM clock fraction (see the module docstring).
MEMORY_CLOCK_EXPONENT = 0.3
#: Sustained weight-loading bandwidth from local disk/page cache, bytes/s, and fixed start-up cost, s.
WEIGHT_LOAD_BANDWIDTH = 5e9
WEIGHT_LOAD_FIXED_S = 1.0


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What the cost model needs to know about one step's batch (all counts in tokens or sequences)."""

    num_seqs: int
    num_tokens: int
    num_sampled: int
    context_tokens: int
    attention_pairs: int

    @classmethod
    def decode(cls, num_seqs: int, context: int) -> BatchShape:
        """``num_seqs`` decodes with ``context`` tokens of KV each (for tests and the calibration table)."""
        return cls(num_seqs, num_seqs, num_seqs, num_seqs * (context + 1), num_seqs * (context + 1))

    @classmethod
    def prefill(cls, prompt_lens: list[int]) -> BatchShape:
        """Whole prompts prefilled in one step, each sampling its first token."""
        pairs = sum(n * (n + 1) // 2 for n in prompt_lens)
        total = sum(prompt_lens)
        return cls(len(prompt_lens), total, len(prompt_lens), total, pairs)


@dataclass(frozen=True, slots=True)
class StepCost:
    """The parts of one step's modelled duration, seconds; ``total_s`` is what the engine sleeps."""

    memory_s: float
    compute_s: float
    stage_s: float
    comm_s: float
    overhead_s: float
    total_s: float


class CostModel:
    """Step times for one replica (a model preset on ``tp × pp`` GPUs of one preset)."""

    def __init__(self, model: ModelPreset, gpu: GpuPreset, tp: int = 1, pp: int = 1) -> None:
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.pp = pp
        shards = tp * pp
        self._weight_bytes = model.weight_bytes / shards
        self._kv_bytes = model.kv_bytes_per_token / shards
        self._dense_flops = 2.0 * (model.params - model.embedding_params)
        self._head_flops = 2.0 * model.vocab_size * model.hidden_size
        self._attn_flops = 4.0 * model.num_layers * model.hidden_size
        self._bandwidth = gpu.hbm_bandwidth * gpu.hbm_efficiency
        self._flops = gpu.bf16_flops * gpu.compute_efficiency * shards

    def step_cost(self, batch: BatchShape, clock_fraction: float = 1.0) -> StepCost:
        """The modelled duration of one step with ``batch``; ``clock_fraction`` in (0, 1] caps the SM clock."""
        memory_s = (self._weight_bytes + batch.context_tokens * self._kv_bytes) / (
            self._bandwidth * clock_fraction**MEMORY_CLOCK_EXPONENT
        )
        flops = (
            self._dense_flops * batch.num_tokens
            + self._head_flops * batch.num_sampled
            + self._attn_flops * batch.attention_pairs
        )
        compute_s = flops / (self._flops * clock_fraction)
        stage_s = (memory_s**3 + compute_s**3) ** (1.0 / 3.0)
        comm_s = self.comm_seconds(batch.num_tokens)
        overhead_s = STEP_OVERHEAD_S + SEQ_OVERHEAD_S * batch.num_seqs
        total_s = self.pp * stage_s + comm_s + overhead_s
        return StepCost(memory_s, compute_s, stage_s, comm_s, overhead_s, total_s)

    def exchange_plan(self, num_tokens: int) -> ExchangePlan:
        """The step's communication (stack-contracts.md §8): 2 all-reduces per layer, pp − 1 transfers."""
        activation = num_tokens * self.model.hidden_size * self.model.dtype_bytes
        tp_rounds = 2 * self.model.num_layers if self.tp > 1 else 0
        return ExchangePlan(tp_rounds, activation if tp_rounds else 0, self.pp - 1, activation if self.pp > 1 else 0)

    def comm_seconds(self, num_tokens: int) -> float:
        """Modelled TP all-reduce plus PP transfer time of one step, seconds."""
        plan = self.exchange_plan(num_tokens)
        return plan.tp_rounds * self.allreduce_seconds(plan.tp_bytes_per_round) + plan.pp_transfers * self.p2p_seconds(
            plan.pp_bytes_per_transfer
        )

    def allreduce_seconds(self, message_bytes: int) -> float:
        """One ring all-reduce of ``message_bytes`` over ``tp`` GPUs: α + msg · 2(tp−1)/tp / busbw."""
        if self.tp <= 1:
            return 0.0
        factor = 2.0 * (self.tp - 1) / self.tp
        return self.gpu.allreduce_latency + message_bytes * factor / self.gpu.allreduce_busbw

    def p2p_seconds(self, message_bytes: int) -> float:
        """One stage-to-stage activation transfer: α_p2p + bytes / bandwidth."""
        return self.gpu.p2p_latency + message_bytes / self.gpu.p2p_bandwidth

    def weight_load_seconds(self) -> float:
        """Modelled time to load this GPU's weight shard: bytes / 5 GB/s + 1 s (CUDA/NCCL init, profiling)."""
        return self._weight_bytes / WEIGHT_LOAD_BANDWIDTH + WEIGHT_LOAD_FIXED_S

    def activation_bytes(self, num_tokens: int) -> int:
        """Peak activation memory of a forward pass over ``num_tokens`` tokens on one GPU, bytes.

        ``tokens · (4 · hidden + 2 · ffn / tp) · 2 B``: residual, attention and MLP buffers (a
        modelled figure; vLLM profiles it with a dummy run of ``max_num_batched_tokens`` tokens).
        """
        per_token = 4 * self.model.hidden_size + 2 * self.model.ffn_size // self.tp
        return num_tokens * per_token * self.model.dtype_bytes

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Bytes of weights on each GPU of the replica."""
        return self._weight_bytes

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV-cache bytes one token takes on each GPU."""
        return self._kv_bytes
