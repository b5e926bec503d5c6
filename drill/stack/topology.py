"""The stack config's ``topology``: aggregated (the default, no key) or disaggregated prefill/decode.

.. code-block:: yaml

    topology:
      prefill: 1          # prefill workers (replicas 0 .. prefill-1)
      decode: 2           # decode workers (the next ones)
      # or, as one value (what the pd-ratio sweep varies): ratio: 1P:2D
      kv_transfer:
        lease: 5s         # the decode side gives up waiting after this; null waits forever (vLLM #50754)
        failure_policy: fail   # or recompute (vLLM's kv_load_failure_policy)
        check_block_versions: false
        link_gbps: 400    # the modelled KV link (e.g. one 400 Gb/s RDMA NIC)
      prefill_engine: {tensor_parallel_size: 4}   # fields of `engine`, over the stack's engine, for prefill workers
      decode_engine: {tensor_parallel_size: 2}    # ... and for decode workers (absent: the stack's engine)

A worker's role maps onto a Kubernetes pod label (``llm-d.ai/role: prefill|decode``, as llm-d labels its pods);
see :data:`ROLE_LABEL`.
"""

from __future__ import annotations

import enum
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from drill.stack.engine_config import EngineOverrides
from drill.units import Duration

__all__ = [
    "ROLE_LABEL",
    "KvFailurePolicy",
    "KvTransferConfig",
    "TopologyConfig",
    "WorkerRole",
    "format_ratio",
    "parse_ratio",
    "worker_counts",
]

#: The pod label a worker's role becomes on Kubernetes (llm-d's label for P/D pods).
ROLE_LABEL = "llm-d.ai/role"

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

_RATIO = re.compile(r"^\s*(\d+)\s*P\s*:\s*(\d+)\s*D\s*$", re.IGNORECASE)


def parse_ratio(text: str) -> tuple[int, int]:
    """``"1P:3D"`` -> (1, 3): prefill and decode workers; ValueError naming the expected form otherwise."""
    match = _RATIO.match(text)
    if match is None:
        raise ValueError(f"ratio {text!r} is not of the form <prefill>P:<decode>D, e.g. 1P:3D")
    prefill, decode = int(match.group(1)), int(match.group(2))
    if not (1 <= prefill <= 32 and 1 <= decode <= 32):
        raise ValueError(f"ratio {text!r}: each side needs 1 to 32 workers")
    return prefill, decode


def format_ratio(prefill: int, decode: int) -> str:
    """(1, 3) -> ``"1P:3D"``."""
    return f"{prefill}P:{decode}D"


def worker_counts(data: dict) -> tuple[object, object]:
    """The (prefill, decode) a raw ``topology`` mapping asks for: its ``ratio`` when given, else its two keys.

    Raises ValueError for a ratio that is not ``<n>P:<m>D`` or that contradicts ``prefill``/``decode`` given
    beside it (the one variable a ``pd-ratio`` sweep changes must not be overridden by a stale count)."""
    ratio = data.get("ratio")
    if ratio is None:
        return data.get("prefill", 1), data.get("decode", 1)
    if not isinstance(ratio, str):
        raise ValueError(f"ratio must be text of the form <prefill>P:<decode>D (e.g. 1P:3D), got {ratio!r}")
    prefill, decode = parse_ratio(ratio)
    for key, value in (("prefill", prefill), ("decode", decode)):
        if key in data and data[key] != value:
            raise ValueError(
                f"ratio {ratio!r} says {key}: {value} but {key}: {data[key]!r} is given too; give the ratio or the "
                "two counts"
            )
    return prefill, decode


class WorkerRole(str, enum.Enum):
    """What a replica does: everything (aggregated), or one half of a disaggregated request."""

    PREFILL = "prefill"
    DECODE = "decode"


class KvFailurePolicy(str, enum.Enum):
    """What a decode worker does when its KV load fails (vLLM's ``kv_load_failure_policy``)."""

    FAIL = "fail"  # the request fails (HTTP 500 / an error event)
    RECOMPUTE = "recompute"  # the decode worker computes the prefill itself


class KvTransferConfig(BaseModel):
    """How KV caches move from prefill to decode workers (over TCP on loopback, one port per prefill worker).

    ``lease`` bounds the decode side's wait for a transfer (None: wait forever, as the decode side of vLLM #50754
    does); ``check_block_versions`` makes the consumer compare each block's owner and version with what the
    prefill worker announced (off, as a connector that trusts its blocks: a stale block is then served as
    HTTP 200 with wrong tokens). ``link_gbps`` is the modelled link: a transfer takes at least
    ``bytes × 8 / link_gbps`` ns; ``byte_scale`` of the modelled bytes actually cross the socket (as
    ``links.byte_scale`` for TP/PP links). ``proxies`` puts a Toxiproxy proxy on each (prefill, decode) pair.
    ``free_after`` frees a transfer never read (vLLM's ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT``, 480 s there).
    """

    model_config = _FROZEN

    lease: Duration | None = Field(10.0, gt=0)
    failure_policy: KvFailurePolicy = KvFailurePolicy.FAIL
    check_block_versions: bool = False
    link_gbps: float = Field(400.0, gt=0, le=100_000)
    byte_scale: float = Field(1 / 1024, gt=0, le=1)
    proxies: bool = True
    free_after: Duration = Field(480.0, gt=0)


class TopologyConfig(BaseModel):
    """``topology`` of the stack config: ``prefill`` + ``decode`` workers replace ``replicas``.

    ``ratio: 1P:3D`` says both counts in one value (what a ``pd-ratio`` sweep varies); it is read into
    ``prefill`` and ``decode`` and not kept. ``prefill_engine`` / ``decode_engine`` set fields of the stack's
    ``engine`` for that role's workers (each with its own TP/PP, as P/D deployments run prefill at a higher TP
    than decode); :meth:`drill.stack.config.StackConfig.engine_of` gives a worker's engine."""

    model_config = _FROZEN

    prefill: int = Field(1, ge=1, le=32)
    decode: int = Field(1, ge=1, le=32)
    kv_transfer: KvTransferConfig = KvTransferConfig()
    prefill_engine: EngineOverrides | None = Field(None, description="fields of engine for the prefill workers")
    decode_engine: EngineOverrides | None = Field(None, description="fields of engine for the decode workers")
    # read into prefill and decode by _counts_from_ratio; left here (None) only to locate a malformed one
    ratio: str | None = Field(None, exclude=True, description="both counts as one value, e.g. 1P:3D")

    @model_validator(mode="before")
    @classmethod
    def _counts_from_ratio(cls, data: object) -> object:
        if not isinstance(data, dict) or not isinstance(data.get("ratio"), str):
            return data
        try:
            parse_ratio(data["ratio"])
        except ValueError:
            return data  # the field's own validation says what is wrong, at topology.ratio
        prefill, decode = worker_counts(data)  # a contradiction is an error of the topology
        return {**{k: v for k, v in data.items() if k != "ratio"}, "prefill": prefill, "decode": decode}

    @field_validator("ratio", mode="before")
    @classmethod
    def _not_a_number(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(
                f"expected a ratio of the form <prefill>P:<decode>D such as 1P:3D, got the number {value:g} "
                "(YAML reads unquoted digits a:b as a base-60 number)"
            )
        return value

    @field_validator("ratio")
    @classmethod
    def _well_formed(cls, value: str | None) -> str | None:
        if value is not None:
            parse_ratio(value)
        return value

    @property
    def split(self) -> str:
        """``1P:3D``: the two counts as one value."""
        return format_ratio(self.prefill, self.decode)

    def role_of(self, index: int) -> WorkerRole:
        """Replica ``index``'s role: prefill workers come first."""
        return WorkerRole.PREFILL if index < self.prefill else WorkerRole.DECODE

    def engine_overrides(self, role: WorkerRole) -> EngineOverrides | None:
        """The fields of ``engine`` that ``role``'s workers set (None: they run the stack's engine)."""
        return self.prefill_engine if role is WorkerRole.PREFILL else self.decode_engine
