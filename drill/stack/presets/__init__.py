"""GPU and model presets of the reference stack, read from ``gpus.yaml`` and ``models.yaml`` here.

Called by :mod:`drill.stack.config` (to validate the ``model:`` and ``gpu:`` names of a stack file)
and by :mod:`drill.stack.inference.cost_model`. The YAML files carry the datasheet and ``config.json`` values
with their sources (docs/serving-facts.md §6.2) and the calibrated efficiency factors (§6.1).
Files are read on first use and cached; importing this module reads nothing.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field

from drill.errors import InputError
from drill.units import Duration, Size

__all__ = ["GpuPreset", "ModelPreset", "gpu_names", "gpu_preset", "model_names", "model_preset"]


class GpuPreset(BaseModel):
    """One GPU kind: memory, roofline peaks, efficiency factors and interconnect (units in field names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    memory: Size = Field(description="device memory, bytes")
    hbm_bandwidth: float = Field(gt=0, description="peak HBM bandwidth, bytes/s")
    bf16_flops: float = Field(gt=0, description="peak dense BF16 throughput, FLOP/s")
    hbm_efficiency: float = Field(gt=0, le=1, description="achieved fraction of peak HBM bandwidth")
    compute_efficiency: float = Field(gt=0, le=1, description="achieved fraction of peak FLOP/s (MFU)")
    allreduce_latency: Duration = Field(description="all-reduce alpha, seconds")
    allreduce_busbw: float = Field(gt=0, description="all-reduce bus bandwidth, bytes/s (nccl-tests busbw)")
    p2p_latency: Duration = Field(description="pipeline send/recv latency, seconds")
    p2p_bandwidth: float = Field(gt=0, description="pipeline send/recv bandwidth, bytes/s")


class ModelPreset(BaseModel):
    """One model shape (Hugging Face ``config.json`` values) in BF16."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    hf_id: str
    params: float = Field(gt=0, description="parameter count")
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    ffn_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position: int = Field(gt=0, description="longest context the model supports, tokens")
    tied_embeddings: bool = False
    dtype_bytes: int = 2

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights: params × dtype bytes (Llama-3-8B: 8.03e9 × 2 = 16.06 GB, §6.1)."""
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token: 2 × layers × kv_heads × head_dim × dtype (Llama-3-8B: 131,072)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def embedding_params(self) -> float:
        """Parameters of the input embedding plus an untied LM head (vocab × hidden each)."""
        tables = 1 if self.tied_embeddings else 2
        return float(tables * self.vocab_size * self.hidden_size)


@cache
def _load(file_name: str) -> dict[str, dict]:
    text = resources.files(__package__).joinpath(file_name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


@cache
def gpu_preset(name: str) -> GpuPreset:
    """Return the GPU preset called ``name``; raises :class:`InputError` naming the known ones."""
    raw = _load("gpus.yaml").get(name)
    if raw is None:
        raise InputError(f"unknown gpu preset {name!r}; expected one of: {', '.join(gpu_names())}")
    return GpuPreset(name=name, **raw)


@cache
def model_preset(name: str) -> ModelPreset:
    """Return the model preset called ``name``; raises :class:`InputError` naming the known ones."""
    raw = _load("models.yaml").get(name)
    if raw is None:
        raise InputError(f"unknown model preset {name!r}; expected one of: {', '.join(model_names())}")
    return ModelPreset(name=name, **raw)


def gpu_names() -> list[str]:
    """Names of the GPU presets, sorted."""
    return sorted(_load("gpus.yaml"))


def model_names() -> list[str]:
    """Names of the model presets, sorted."""
    return sorted(_load("models.yaml"))
