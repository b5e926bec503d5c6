"""The stack YAML (stack-contracts.md §1) parses into frozen models and reports every problem at once."""

from __future__ import annotations

import pytest
import yaml

from drill.api import RouterRetryOn
from drill.errors import InputError, SpecError
from drill.stack.config import (
    SchedulingPolicy,
    StackConfig,
    load_stack_config,
    parse_stack_config,
)
from drill.stack.presets import gpu_preset, model_preset

CONTRACT_EXAMPLE = """
model: llama-3-8b
gpu: h100
served_model_name: null
replicas: 2
seed: 0
engine:
  tensor_parallel_size: 1
  pipeline_parallel_size: 1
  max_model_len: 8192
  max_num_seqs: 256
  max_num_batched_tokens: 8192
  gpu_memory_utilization: 0.9
  block_size: 16
  enable_prefix_caching: false
  scheduling_policy: fcfs
  max_num_queued_reqs: null
  max_num_queued_tokens: null
  max_queue_wait: null
  weight_load_time: auto
router:
  policy: least_outstanding
  retries: {attempts: 0, on: [error, timeout], timeout: 30s}
  idempotency: false
  health_check_interval: 1s
links:
  replica_proxies: true
  tp_proxies: true
  pp_proxies: true
runtime: local
host: 127.0.0.1
"""


def test_contract_example_parses_with_units() -> None:
    config = parse_stack_config(yaml.safe_load(CONTRACT_EXAMPLE))
    assert config.engine.scheduling_policy is SchedulingPolicy.FCFS
    assert config.router.retries.on == (RouterRetryOn.ERROR, RouterRetryOn.TIMEOUT)
    assert config.router.retries.timeout == 30.0
    assert config.model_name == "llama-3-8b"
    assert config.model_preset.kv_bytes_per_token == 131_072
    assert config == StackConfig()


def test_json_round_trip_keeps_durations() -> None:
    config = parse_stack_config({"engine": {"max_queue_wait": "250ms", "weight_load_time": "1.5s"}})
    dumped = config.model_dump(mode="json")
    assert dumped["engine"]["max_queue_wait"] == "250ms"
    assert StackConfig.model_validate(dumped) == config


def test_all_problems_reported_with_locations() -> None:
    data = {"modle": "x", "gpu": "h999", "engine": {"max_num_seqs": 0, "max_queue_wait": 3}}
    with pytest.raises(SpecError) as info:
        parse_stack_config(data, source="stack.yaml")
    rendered = info.value.render()
    assert (
        "stack.yaml:1:1: error: modle: unknown key 'modle' in the top level\n  hint: did you mean 'model'?" in rendered
    )
    assert "gpu: unknown gpu preset 'h999'; expected one of: a100-80g, h100, h200, l4" in rendered
    assert "engine.max_num_seqs" in rendered
    assert "engine.max_queue_wait: duration 3 has no unit" in rendered
    assert len(info.value.diagnostics) == 4


def test_batch_budget_must_cover_max_num_seqs() -> None:
    with pytest.raises(SpecError) as info:
        parse_stack_config({"engine": {"max_num_seqs": 128, "max_num_batched_tokens": 64}})
    assert "max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128)" in info.value.render()


def test_max_model_len_limited_by_model() -> None:
    with pytest.raises(SpecError) as info:
        parse_stack_config({"model": "llama-2-13b", "engine": {"max_model_len": 8192}})
    assert "larger than the maximum context length of llama-2-13b (4096 tokens)" in info.value.render()


def test_models_are_frozen() -> None:
    config = StackConfig()
    with pytest.raises(Exception):
        config.engine.max_num_seqs = 3  # type: ignore[misc]


def test_load_from_file_and_unreadable(tmp_path) -> None:
    path = tmp_path / "stack.yaml"
    path.write_text("gpu: a100-80g\nengine: {max_num_queued_reqs: 64}\n")
    assert load_stack_config(path).engine.max_num_queued_reqs == 64
    with pytest.raises(SpecError, match="nothing was run") as info:
        load_stack_config(tmp_path / "missing.yaml")
    assert info.value.render().startswith(f"{tmp_path / 'missing.yaml'}:1:1: error: file not found")


def test_stack_file_problems_point_at_line_and_column(tmp_path) -> None:
    """``drill stack up --config`` reads through drill.spec: file:line:col, did-you-mean, bounded YAML."""
    path = tmp_path / "stack.yaml"
    path.write_text("gpu: h100\nengine:\n  max_num_seqz: 8\n  gpu_memory_utilization: .nan\n")
    with pytest.raises(SpecError) as info:
        load_stack_config(path)
    rendered = info.value.render()
    assert f"{path}:3:3: error: engine.max_num_seqz: unknown key 'max_num_seqz' in engine" in rendered
    assert "hint: did you mean 'max_num_seqs'?" in rendered
    assert f"{path}:4:27: error: engine.gpu_memory_utilization: '.nan' is not a finite number" in rendered
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    )
    with pytest.raises(SpecError) as info:
        load_stack_config(bomb)
    assert f"{bomb}:5:" in info.value.render() and "expands to more than" in info.value.render()


def test_presets_match_reference_shapes() -> None:
    """docs/serving-facts.md §6.2: KV bytes per token and weights."""
    assert model_preset("llama-2-13b").kv_bytes_per_token == 819_200
    assert model_preset("llama-3-70b").kv_bytes_per_token == 327_680
    assert model_preset("llama-3-8b").weight_bytes == pytest.approx(16.06e9)
    assert gpu_preset("h100").hbm_bandwidth == 3.35e12
    with pytest.raises(InputError, match="unknown gpu preset 'b200'"):
        gpu_preset("b200")
