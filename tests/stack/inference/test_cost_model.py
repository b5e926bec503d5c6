"""The cost model against every calibration anchor of docs/serving-facts.md §6.1 (within 15 %).

``pytest -s`` prints the calibration table.
"""

from __future__ import annotations

import pytest

from drill.errors import StackError
from drill.stack.config import EngineConfig
from drill.stack.inference.cost_model import BatchShape, CostModel
from drill.stack.inference.gpu import GIB, GpuState, plan_memory
from drill.stack.interconnect.step_exchange import ExchangePlan
from drill.stack.presets import gpu_preset, model_preset

#: input_lens of LambdaLabsML/vllm-benchmark results/prompt_10/1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json
PROMPT_10_INPUT_LENS = [13, 25, 27, 10, 329, 29, 399, 328, 4, 205]  # 1,369 tokens in all

# (anchor, description, gpu, batch, measured seconds)
CALIBRATION = [
    ("A3", "H100 decode, batch 10, ~300 ctx", "h100", BatchShape.decode(10, 300), 7.2e-3),
    ("A4", "A100 decode, batch 10, ~300 ctx", "a100-80g", BatchShape.decode(10, 300), 11.5e-3),
    ("A5", "H100 decode, batch 256, ~300 ctx (12.5-17 ms)", "h100", BatchShape.decode(256, 300), 14.75e-3),
    ("A5", "H100 decode as the batch drains, 16 x ~500 ctx", "h100", BatchShape.decode(16, 500), 7.5e-3),
    (
        "A3",
        "H100 TTFT: prefill of the 10 prompts (1,369 tok)",
        "h100",
        BatchShape.prefill(PROMPT_10_INPUT_LENS),
        62.4e-3,
    ),
    (
        "A4",
        "A100 TTFT: prefill of the 10 prompts (1,369 tok)",
        "a100-80g",
        BatchShape.prefill(PROMPT_10_INPUT_LENS),
        126.9e-3,
    ),
]


def _model(gpu: str, tp: int = 1, pp: int = 1, model: str = "llama-3-8b") -> CostModel:
    return CostModel(model_preset(model), gpu_preset(gpu), tp, pp)


def test_calibration_table_within_15_percent() -> None:
    rows = []
    for anchor, description, gpu, batch, measured in CALIBRATION:
        cost = _model(gpu).step_cost(batch)
        error = cost.total_s / measured - 1
        rows.append((anchor, description, measured, cost, error))
    print("\nLlama-3-8B bf16 step-time calibration (docs/serving-facts.md §6.1)")
    print(f"{'anchor':6} {'case':50} {'measured':>9} {'model':>8} {'mem':>7} {'compute':>8} {'error':>7}")
    for anchor, description, measured, cost, error in rows:
        print(
            f"{anchor:6} {description:50} {measured * 1e3:7.2f}ms {cost.total_s * 1e3:6.2f}ms "
            f"{cost.memory_s * 1e3:5.2f}ms {cost.compute_s * 1e3:6.2f}ms {error:+7.1%}"
        )
    ar = _model("h100", tp=2).allreduce_seconds(1024)
    print(f"{'A7':6} {'H100 NVLink small all-reduce (1 KiB, TP2)':50} {6.0:7.2f}us {ar * 1e6:6.2f}us")
    for anchor, description, measured, cost, error in rows:
        assert abs(error) <= 0.15, f"{anchor} {description}: model {cost.total_s * 1e3:.2f} ms vs {measured * 1e3} ms"
    assert 12.5e-3 <= rows[2][3].total_s <= 17e-3
    assert ar == pytest.approx(6e-6, rel=0.15)


def test_a100_h100_decode_ratio_tracks_hbm_bandwidth() -> None:
    """A4: the H100/A100 decode ratio (~1.6) is about their HBM bandwidth ratio (3.35/2.039 = 1.64)."""
    batch = BatchShape.decode(10, 300)
    ratio = _model("a100-80g").step_cost(batch).total_s / _model("h100").step_cost(batch).total_s
    assert ratio == pytest.approx(11.5 / 7.2, rel=0.15)


def test_decode_is_flat_below_saturation_then_grows() -> None:
    model = _model("h100")
    small, medium, large = (model.step_cost(BatchShape.decode(n, 300)).total_s for n in (1, 32, 512))
    assert medium < 1.15 * small  # HBM-bound: the weights dominate
    assert large > 2 * small  # compute-bound beyond the ridge point


def test_tensor_parallel_shards_and_adds_all_reduces() -> None:
    batch = BatchShape.decode(64, 384)
    single = _model("h100", model="llama-3-70b", tp=1)
    tp4 = _model("h100", model="llama-3-70b", tp=4)
    one, four = single.step_cost(batch), tp4.step_cost(batch)
    assert four.memory_s == pytest.approx(one.memory_s / 4)
    assert one.comm_s == 0 and four.comm_s > 0
    plan = tp4.exchange_plan(64)
    assert plan == ExchangePlan(
        tp_rounds=160, tp_bytes_per_round=64 * 8192 * 2, pp_transfers=0, pp_bytes_per_transfer=0
    )
    per_round = 6e-6 + 64 * 8192 * 2 * (2 * 3 / 4) / 360e9  # alpha + msg * 2(tp-1)/tp / busbw
    assert four.comm_s == pytest.approx(160 * per_round)


def test_pipeline_parallel_runs_stages_in_sequence() -> None:
    batch = BatchShape.decode(32, 300)
    pp2 = _model("h100", model="llama-3-70b", tp=2, pp=2)
    cost = pp2.step_cost(batch)
    transfer = 6e-6 + 32 * 8192 * 2 / 300e9
    assert cost.total_s == pytest.approx(2 * cost.stage_s + cost.comm_s + cost.overhead_s)
    assert pp2.exchange_plan(32).pp_transfers == 1
    assert cost.comm_s == pytest.approx(160 * pp2.allreduce_seconds(32 * 8192 * 2) + transfer)


def test_clock_cap_slows_compute_fully_and_memory_less() -> None:
    model = _model("h100")
    prefill = BatchShape.prefill([2048])
    decode = BatchShape.decode(8, 300)
    full, capped = model.step_cost(prefill), model.step_cost(prefill, clock_fraction=0.5)
    assert capped.compute_s == pytest.approx(2 * full.compute_s)
    assert capped.memory_s == pytest.approx(full.memory_s * 2**0.3)
    slow_decode = model.step_cost(decode, 0.5).total_s / model.step_cost(decode).total_s
    assert 1.1 < slow_decode < 1.3  # memory-bound decode slows ~1.23x, not 2x


def test_weight_load_time_and_memory_plan() -> None:
    model = _model("h100")
    assert model.weight_load_seconds() == pytest.approx(16.06e9 / 5e9 + 1.0)
    plan = plan_memory(model, EngineConfig(), gpu_preset("h100").memory)
    kv_tokens = plan.kv_tokens(16)
    assert 400_000 < kv_tokens < 500_000  # vLLM reports ~450k tokens for Llama-3-8B on one H100
    assert plan.block_bytes == 2 * 1024 * 1024  # one 16-token block of Llama-3-8B is 2 MiB (§6.2)


def test_memory_plan_refuses_what_does_not_fit() -> None:
    with pytest.raises(StackError, match="No available memory for the cache blocks"):
        plan_memory(_model("l4", model="llama-3-70b"), EngineConfig(), gpu_preset("l4").memory)
    with pytest.raises(StackError, match="larger than the maximum number of tokens that can be stored in KV cache"):
        plan_memory(
            _model("l4"), EngineConfig(max_model_len=8192, gpu_memory_utilization=0.75), gpu_preset("l4").memory
        )


def test_memory_hog_shrinks_kv_then_ooms() -> None:
    model = _model("h100")
    plan = plan_memory(model, EngineConfig(), gpu_preset("h100").memory)
    gpu = GpuState(plan, model)
    gpu.memory_hog_bytes = 8 * GIB  # exactly the 10 % vLLM leaves free: no effect
    assert gpu.usable_blocks() == plan.num_blocks
    gpu.memory_hog_bytes = 8 * GIB + 20 * plan.block_bytes
    assert gpu.usable_blocks() == plan.num_blocks - 20
    gpu.check_step_memory(8192)  # the activation reserve is intact
    gpu.memory_hog_bytes = 79 * GIB
    assert gpu.usable_blocks() == 0
    with pytest.raises(Exception, match="CUDA out of memory. Tried to allocate"):
        gpu.check_step_memory(16)
