"""Typed clients of the reference stack's admin APIs (stack-contracts.md §5).

:class:`StackAdminClient` talks to one replica's ``/admin`` routes: the GPU conditions that need
a GPU to produce for real (another process's memory, an SM clock cap, an XID error) and the
engine stall. :class:`RouterAdminClient` talks to the router's ``/admin`` routes: its state and
its configuration, which ``PATCH /admin/config`` changes and answers with the previous one so a
fault can put it back.

Both send ``Authorization: Bearer <admin_token>``, bound every call by ``timeout_s`` (connect,
read, write, pool) and raise :class:`drill.errors.AdminApiError` with the HTTP ``status`` (None
for transport failures), the ``operation`` and a hint. Answers are parsed into frozen models;
keys the server adds later are dropped, keys it lacks are errors.
"""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from drill.backends.rest import RestClient, user_agent
from drill.errors import AdminApiError
from drill.units import Duration

__all__ = [
    "ConfigChange",
    "EngineCondition",
    "GpuCondition",
    "KvWorkerState",
    "LastDeath",
    "ReplicaAdminState",
    "RetrySettings",
    "RouterAdminClient",
    "RouterReplica",
    "RouterSettings",
    "RouterState",
    "StackAdminClient",
]

DEFAULT_TIMEOUT_S = 5.0
_USER_AGENT = user_agent("admin client")


class _AdminWire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class GpuCondition(_AdminWire):
    """The simulated GPU of a replica: ``memory_hog_gib`` GiB held by another process, the SM clock at
    ``clock_fraction`` of nominal, KV blocks in total / free / usable under the hog."""

    memory_hog_gib: float
    clock_fraction: float
    kv_blocks_total: int
    kv_blocks_free: int
    kv_blocks_usable: int | None = None
    memory_total_gib: float | None = None


class EngineCondition(_AdminWire):
    """The engine part of a replica's state: why it died (the root-cause line), None while alive."""

    dead_reason: str | None = None


class LastDeath(_AdminWire):
    """Why the previous process of a restarted replica died: its pid, the root-cause line, when (UNIX s)."""

    pid: int
    reason: str
    at: float


class ReplicaAdminState(_AdminWire):
    """``GET /admin/state`` of a replica. ``stall_until`` is UNIX seconds, None when not stalled."""

    name: str
    index: int
    pid: int
    started_at: float
    engine_alive: bool
    gpu: GpuCondition
    stall_until: float | None = None
    engine: EngineCondition = EngineCondition()
    last_death: LastDeath | None = None


class KvWorkerState(_AdminWire):
    """``GET /admin/kv`` of a P/D worker: its role, transfer counts per state, the KV fault in force (prefill)."""

    role: str
    counts: dict[str, int]
    pending: int = 0
    in_flight: int = 0
    #: the most modelled link time a read under way still has (a prefill worker's; None where not reported)
    longest_left_s: float | None = None
    fault: dict[str, Any] | None = None


class RetrySettings(_AdminWire):
    """The router's retries: ``attempts`` extra tries after the first on ``on`` failures; ``timeout`` per try (s)."""

    attempts: int
    on: tuple[str, ...]
    timeout: Duration


class RouterSettings(_AdminWire):
    """``GET /admin/config`` of the router."""

    policy: str
    retries: RetrySettings
    idempotency: bool
    health_check_interval: Duration


class ConfigChange(_AdminWire):
    """What ``PATCH /admin/config`` answers: the configuration before and after."""

    previous: RouterSettings
    config: RouterSettings


class RouterReplica(_AdminWire):
    """One replica as the router sees it."""

    name: str
    index: int
    url: str
    healthy: bool
    outstanding: int


class RouterState(_AdminWire):
    """``GET /admin/state`` of the router."""

    pid: int
    replicas: tuple[RouterReplica, ...]
    config: RouterSettings


M = TypeVar("M", bound=_AdminWire)


class _AdminHttp(RestClient):
    """Shared by both admin clients: the token, the hints, and answers parsed into frozen models."""

    error = AdminApiError
    who = "the admin API"
    timeout_hint = "the process may be stopped or overloaded"
    unreachable_hint = "is it running? (`drill stack status`)"
    status_hints = {
        401: "the admin token is wrong: it is in the stack's state file (`drill stack status --json`)",
        403: "the admin API answers loopback clients only",
        404: "this server has no such admin route: is it the llm-drill reference stack?",
    }
    trust_env = False

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, timeout_s=timeout_s, user_agent=_USER_AGENT, token=token, transport=transport)

    def _model(self, model: type[M], data: Any, operation: str) -> M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise AdminApiError(
                f"{operation}: unexpected answer from {self.who}: {exc.errors()[0]['msg']} "
                f"at {'.'.join(str(p) for p in exc.errors()[0]['loc'])}",
                hint="is this the llm-drill reference stack (stack-contracts.md §5)?",
                operation=operation,
            ) from exc


class StackAdminClient(_AdminHttp):
    """One replica's admin API. ``admin_url`` is the replica's base URL (``/admin`` is added)."""

    who = "the replica admin API"

    def __init__(self, admin_url: str, token: str | None, **kwargs: Any) -> None:
        super().__init__(admin_url.rstrip("/").removesuffix("/admin"), token, **kwargs)

    def state(self) -> ReplicaAdminState:
        """The replica's state (pid, engine alive, simulated GPU conditions, stall)."""
        return self._model(
            ReplicaAdminState, self._json("GET", "/admin/state", "get replica state"), "get replica state"
        )

    def set_memory_hog(self, gib: float) -> float:
        """Another process takes ``gib`` GiB of the GPU; returns the previous amount (GiB)."""
        data = self._json("PUT", "/admin/gpu/memory-hog", f"set memory hog {gib:g} GiB", json={"gib": gib})
        return float(data.get("previous_gib", 0.0))

    def clear_memory_hog(self) -> float:
        """Release the memory hog (idempotent); returns the previous amount (GiB)."""
        data = self._json("DELETE", "/admin/gpu/memory-hog", "clear memory hog")
        return float(data.get("previous_gib", 0.0))

    def set_clock_cap(self, fraction: float) -> float:
        """Cap the SM clock at ``fraction`` of nominal (0.01–1); returns the previous fraction."""
        data = self._json("PUT", "/admin/gpu/clock-cap", f"set clock cap {fraction:g}", json={"fraction": fraction})
        return float(data.get("previous", 1.0))

    def clear_clock_cap(self) -> float:
        """Back to the nominal clock (idempotent); returns the previous fraction."""
        data = self._json("DELETE", "/admin/gpu/clock-cap", "clear clock cap")
        return float(data.get("previous", 1.0))

    def xid(self, code: int) -> None:
        """A fatal XID-style error: the engine dies."""
        self._json("POST", "/admin/gpu/xid", f"XID {code}", json={"code": code})

    def stall(self, seconds: float) -> None:
        """The engine takes no step for ``seconds`` (HTTP keeps answering)."""
        self._json("PUT", "/admin/engine/stall", f"stall {seconds:g}s", json={"seconds": seconds})

    def clear_stall(self) -> None:
        """Resume engine steps now (idempotent)."""
        self._json("DELETE", "/admin/engine/stall", "clear stall")

    def kv_state(self) -> KvWorkerState:
        """A P/D worker's KV side: transfers per state, the KV fault in force (404 on an aggregated replica)."""
        return self._model(KvWorkerState, self._json("GET", "/admin/kv", "get KV state"), "get KV state")

    def set_kv_fault(self, fault: dict[str, Any]) -> None:
        """Put a KV fault in force on a prefill worker (``drill.stack.kv.kv_faults.KvFault`` as JSON)."""
        self._json("PUT", "/admin/kv/fault", f"set KV fault {fault.get('name')}", json=fault)

    def clear_kv_fault(self, name: str) -> None:
        """Clear the KV fault ``name`` (idempotent; another fault in force stays)."""
        self._json("DELETE", f"/admin/kv/fault?name={quote(name)}", f"clear KV fault {name}")


class RouterAdminClient(_AdminHttp):
    """The router's admin API. ``router_admin_url`` ends in ``/admin`` (as the state file gives it)."""

    who = "the router admin API"

    def __init__(self, router_admin_url: str, token: str | None, **kwargs: Any) -> None:
        super().__init__(router_admin_url.rstrip("/").removesuffix("/admin"), token, **kwargs)

    def state(self) -> RouterState:
        """Replicas with health and outstanding requests, and the configuration in force."""
        return self._model(RouterState, self._json("GET", "/admin/state", "get router state"), "get router state")

    def config(self) -> RouterSettings:
        """The configuration in force."""
        return self._model(RouterSettings, self._json("GET", "/admin/config", "get router config"), "get router config")

    def patch_config(self, patch: dict[str, Any]) -> ConfigChange:
        """Change ``retries`` (merged key by key), ``idempotency``, ``policy``, ``health_check_interval``.

        Returns the configuration before and after; raises AdminApiError (status 400) for a bad value.
        """
        keys = ", ".join(sorted(patch)) or "nothing"
        data = self._json("PATCH", "/admin/config", f"patch router config ({keys})", json=patch)
        return self._model(ConfigChange, data, "patch router config")
