"""The stack config's ``topology``: aggregated (the default, no key) or disaggregated prefill/decode.

.. code-block:: yaml

    topology:
      prefill: 1          # prefill workers (replicas 0 .. prefill-1)
      decode: 2           # decode workers (the next ones)
      kv_transfer:
        lease: 5s         # the decode side gives up waiting after this; null waits forever (vLLM #50754)
        failure_policy: fail   # or recompute (vLLM's kv_load_failure_policy)
        check_block_versions: false
        link_gbps: 400    # the modelled KV link (e.g. one 400 Gb/s RDMA NIC)

A worker's role maps onto a Kubernetes pod label (``llm-d.ai/role: prefill|decode``, as llm-d labels its pods);
see :data:`ROLE_LABEL`.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

from drill.units import Duration

__all__ = ["ROLE_LABEL", "KvFailurePolicy", "KvTransferConfig", "TopologyConfig", "WorkerRole"]

#: The pod label a worker's role becomes on Kubernetes (llm-d's label for P/D pods).
ROLE_LABEL = "llm-d.ai/role"

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


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
    """``topology`` of the stack config: ``prefill`` + ``decode`` workers replace ``replicas``."""

    model_config = _FROZEN

    prefill: int = Field(1, ge=1, le=32)
    decode: int = Field(1, ge=1, le=32)
    kv_transfer: KvTransferConfig = KvTransferConfig()

    def role_of(self, index: int) -> WorkerRole:
        """Replica ``index``'s role: prefill workers come first."""
        return WorkerRole.PREFILL if index < self.prefill else WorkerRole.DECODE
