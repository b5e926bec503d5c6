"""What each process of the stack is told at start: :class:`ReplicaLaunch` (stack-contracts.md §3)
and :class:`RouterLaunch`.

Written as JSON by the launcher/supervisor (topology side) and read by
``python -m drill.stack.replica.api_server --launch FILE.json`` and
``python -m drill.stack.router.gateway --launch FILE.json``.
Kept apart from both processes so the supervisor can build launches without importing the engine or
the router.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from drill.errors import InputError
from drill.stack.config import RouterConfig, StackConfig

__all__ = ["PeerLaunch", "ReplicaLaunch", "RouterLaunch", "UpstreamLaunch", "read_replica_launch"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PeerLaunch(BaseModel):
    """One TP rank (1..tp-1) or PP stage (1..pp-1) of the replica, as the launcher arranged it.

    ``listen`` is where the rank process listens; ``connect`` is the address its upstream (rank 0,
    or the previous stage) dials, which is a Toxiproxy proxy's listen address when links are proxied
    and ``listen`` otherwise. A PP stage that is not the last dials its next stage at ``next_connect``.
    Addresses are ``"host:port"``.
    """

    model_config = _FROZEN

    kind: Literal["tp", "pp"]
    rank: int = Field(ge=1)
    listen: str
    connect: str
    next_connect: str | None = None
    proxy: str | None = None


class ReplicaLaunch(BaseModel):
    """Everything a replica process needs. ``port`` 0 binds a free port, reported in ``ready_file``."""

    model_config = _FROZEN

    name: str
    index: int = Field(ge=0)
    host: str = "127.0.0.1"
    port: int = Field(ge=0, le=65535)
    config: StackConfig = StackConfig()
    admin_token: str = Field(min_length=8)
    otlp_endpoint: str | None = None
    ledger_path: Path
    log_path: Path | None = None
    seed: int = 0
    peers: tuple[PeerLaunch, ...] = ()
    role: Literal["prefill", "decode"] | None = Field(None, description="P/D worker role; None: aggregated")
    kv_listen: str | None = Field(None, description="prefill worker: host:port of its KV side channel")
    kv_peers: dict[str, str] = Field(
        default_factory=dict, description="decode worker: prefill worker name -> host:port it dials (maybe a proxy)"
    )
    ready_file: Path | None = Field(
        None, description="written (JSON: pid, port, url) once the replica listens; optional"
    )

    @model_validator(mode="after")
    def _peers_match_parallelism(self) -> ReplicaLaunch:
        engine = self.config.engine
        tp = sum(1 for peer in self.peers if peer.kind == "tp")
        pp = sum(1 for peer in self.peers if peer.kind == "pp")
        if self.peers and (tp, pp) != (engine.tensor_parallel_size - 1, engine.pipeline_parallel_size - 1):
            raise ValueError(
                f"peers list {tp} TP rank(s) and {pp} PP stage(s); tensor_parallel_size "
                f"{engine.tensor_parallel_size} and pipeline_parallel_size {engine.pipeline_parallel_size} "
                f"need {engine.tensor_parallel_size - 1} and {engine.pipeline_parallel_size - 1}"
            )
        return self

    @property
    def service_name(self) -> str:
        """OpenTelemetry ``service.name`` of this replica: ``drill-replica-<index>`` (contracts §7)."""
        return f"drill-replica-{self.index}"


def read_replica_launch(path: Path | str) -> ReplicaLaunch:
    """Read a launch file. Raises :class:`InputError` when it is unreadable or invalid."""
    path = Path(path)
    try:
        return ReplicaLaunch.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read replica launch {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise InputError(f"invalid replica launch {path}: {exc}") from exc


class UpstreamLaunch(BaseModel):
    """One replica as the router reaches it (``url``: through its Toxiproxy proxy when there is one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    index: int
    url: str
    role: Literal["prefill", "decode"] | None = None  # P/D: the router sends prefill, then decode


class RouterLaunch(BaseModel):
    """What the router process is told at start (written by the supervisor)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)
    replicas: tuple[UpstreamLaunch, ...]
    router: RouterConfig = RouterConfig()
    admin_token: str = Field(min_length=8)
    otlp_endpoint: str | None = None
    ready_file: Path | None = None
    abort_abandoned: bool = True  # StackConfig.abort_abandoned: close the upstream request of a client gone
