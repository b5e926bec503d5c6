"""The replica's admin API (stack-contracts.md §5): GPU conditions, engine stall, ledger, state.

Loopback only (403 otherwise) and ``Authorization: Bearer <admin_token>`` (401 otherwise). All
answers are JSON; errors are ``{"error": {"message", "type", "param", "code"}}``. The GPU
conditions are simulated (see :mod:`drill.stack.inference.gpu`): another process's memory, an SM clock cap,
a fatal XID error; the stall stops engine steps while HTTP keeps answering.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import os
import time
from collections.abc import Awaitable, Callable

from drill.stack.http.server import Handler, HttpError, HttpRequest, HttpResponse, ResponseStream, Router
from drill.stack.inference.core import Engine
from drill.stack.inference.gpu import GIB
from drill.stack.replica.ledger import Ledger

__all__ = ["AdminApi"]

MAX_STALL_S = 3600.0


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _number(body: object, key: str, low: float, high: float) -> float:
    value = body.get(key) if isinstance(body, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HttpError(400, f"body must be a JSON object with a number {key!r}, e.g. {{{key!r}: {high / 2:g}}}")
    if not low <= value <= high:
        raise HttpError(400, f"{key} must be between {low:g} and {high:g}, got {value:g}")
    return float(value)


class AdminApi:
    """``/admin/*`` routes of one replica."""

    def __init__(
        self, engine: Engine, ledger: Ledger, *, name: str, index: int, admin_token: str, last_death: dict | None = None
    ) -> None:
        self.engine = engine
        self.last_death = last_death  # why the previous process of this replica died (pid, reason, at), if it did
        self.ledger = ledger
        self.name = name
        self.index = index
        self._token = f"Bearer {admin_token}".encode()
        self.started_at = time.time()

    def register(self, router: Router) -> None:
        """Add every admin route, each behind the loopback and token checks."""
        routes = {
            ("GET", "/admin/state"): self.state,
            ("PUT", "/admin/gpu/memory-hog"): self.put_memory_hog,
            ("DELETE", "/admin/gpu/memory-hog"): self.delete_memory_hog,
            ("PUT", "/admin/gpu/clock-cap"): self.put_clock_cap,
            ("DELETE", "/admin/gpu/clock-cap"): self.delete_clock_cap,
            ("POST", "/admin/gpu/xid"): self.post_xid,
            ("PUT", "/admin/engine/stall"): self.put_stall,
            ("DELETE", "/admin/engine/stall"): self.delete_stall,
            ("GET", "/admin/ledger"): self.get_ledger,
            ("GET", "/admin/engine/timing"): self.get_timing,
        }
        for (method, path), handler in routes.items():
            router.add(method, path, self._guard(handler))

    def register_extra(
        self, router: Router, routes: dict[tuple[str, str], Callable[[HttpRequest], Awaitable[HttpResponse]]]
    ) -> None:
        """Add more admin routes (a P/D worker's ``/admin/kv*``) behind the same loopback and token checks."""
        for (method, path), handler in routes.items():
            router.add(method, path, self._guard(handler))

    def _guard(self, handler: Callable[[HttpRequest], Awaitable[HttpResponse]]) -> Handler:
        async def guarded(request: HttpRequest, stream: ResponseStream) -> HttpResponse:
            if not _is_loopback(request.peer_host):
                raise HttpError(403, "the admin API answers loopback clients only", type="Forbidden")
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, self._token):
                raise HttpError(
                    401, "missing or wrong admin token (Authorization: Bearer <admin_token>)", type="Unauthorized"
                )
            return await handler(request)

        return guarded

    # state -------------------------------------------------------------------------------------------
    async def state(self, request: HttpRequest) -> HttpResponse:
        """``{"name","index","pid","started_at","engine_alive","gpu":{…},"stall_until","last_death","engine":{…}}``."""
        return HttpResponse.json(self.snapshot())

    def snapshot(self) -> dict:
        """The state document (also used by tests and the benchmark)."""
        engine, gpu = self.engine, self.engine.gpu
        kv = engine.scheduler.kv_cache
        loop_now = asyncio.get_running_loop().time()
        stall_until = None
        if gpu.stall_until is not None and gpu.stall_until > loop_now:
            stall_until = time.time() + (gpu.stall_until - loop_now)
        return {
            "name": self.name,
            "index": self.index,
            "pid": os.getpid(),
            "started_at": self.started_at,
            "engine_alive": engine.alive,
            "gpu": {
                "memory_hog_gib": gpu.memory_hog_bytes / GIB,
                "clock_fraction": gpu.clock_fraction,
                "kv_blocks_total": kv.num_blocks,
                "kv_blocks_free": kv.num_free_blocks,
                "kv_blocks_usable": kv.capacity,
                "memory_total_gib": gpu.plan.total_bytes / GIB,
            },
            "stall_until": stall_until,
            "last_death": self.last_death,
            "engine": {
                "running": engine.scheduler.num_running,
                "waiting": engine.scheduler.num_waiting,
                "preemptions": engine.scheduler.num_preemptions,
                "steps": engine.timer.steps,
                "step_lateness_ms": engine.timer.percentiles_ms(),
                "dead_reason": engine.dead.cause if engine.dead else None,
                # this replica's own parallelism (a P/D worker's role engine: topology.<role>_engine)
                "tensor_parallel_size": gpu.cost_model.tp,
                "pipeline_parallel_size": gpu.cost_model.pp,
            },
        }

    # GPU conditions ------------------------------------------------------------------------------------
    async def put_memory_hog(self, request: HttpRequest) -> HttpResponse:
        gib = _number(request.json(), "gib", 0.0, 4096.0)
        previous = self._set_hog(int(gib * GIB))
        return HttpResponse.json(
            {
                "memory_hog_gib": gib,
                "previous_gib": previous,
                "kv_blocks_usable": self.engine.scheduler.kv_cache.capacity,
            }
        )

    async def delete_memory_hog(self, request: HttpRequest) -> HttpResponse:
        previous = self._set_hog(0)
        return HttpResponse.json({"memory_hog_gib": 0.0, "previous_gib": previous})

    def _set_hog(self, hog_bytes: int) -> float:
        gpu = self.engine.gpu
        previous = gpu.memory_hog_bytes / GIB
        gpu.memory_hog_bytes = hog_bytes
        self.engine.scheduler.kv_cache.set_capacity(gpu.usable_blocks())
        return previous

    async def put_clock_cap(self, request: HttpRequest) -> HttpResponse:
        fraction = _number(request.json(), "fraction", 0.01, 1.0)
        previous = self.engine.gpu.clock_fraction
        self.engine.gpu.clock_fraction = fraction
        return HttpResponse.json({"clock_fraction": fraction, "previous": previous})

    async def delete_clock_cap(self, request: HttpRequest) -> HttpResponse:
        previous = self.engine.gpu.clock_fraction
        self.engine.gpu.clock_fraction = 1.0
        return HttpResponse.json({"clock_fraction": 1.0, "previous": previous})

    async def post_xid(self, request: HttpRequest) -> HttpResponse:
        code = int(_number(request.json(), "code", 1, 1000))
        self.engine.kill(self.engine.gpu.xid_error(code))
        return HttpResponse.json({"xid": code, "engine_alive": self.engine.alive})

    # engine ------------------------------------------------------------------------------------------
    async def put_stall(self, request: HttpRequest) -> HttpResponse:
        seconds = _number(request.json(), "seconds", 0.0, MAX_STALL_S)
        self.engine.stall(seconds)
        return HttpResponse.json({"stall_seconds": seconds})

    async def delete_stall(self, request: HttpRequest) -> HttpResponse:
        self.engine.stall(0.0)
        return HttpResponse.json({"stall_seconds": 0.0})

    async def get_timing(self, request: HttpRequest) -> HttpResponse:
        """Step timing over the last ``?last=N`` steps (all kept steps by default): lateness p50/p99/max (ms)."""
        raw = request.query_params().get("last")
        if raw is not None and not raw.isdigit():
            raise HttpError(400, f"last must be a non-negative integer, got {raw!r}")
        timer = self.engine.timer
        return HttpResponse.json(
            {
                "total_steps": timer.steps,
                "wake_bias_ms": timer.wake_bias * 1e3,
                "lateness_ms": timer.percentiles_ms(None if raw is None else int(raw)),
            }
        )

    async def get_ledger(self, request: HttpRequest) -> HttpResponse:
        raw = request.query_params().get("since", "0")
        if not raw.lstrip("-").isdigit():
            raise HttpError(400, f"since must be an integer sequence number, got {raw!r}")
        records = self.ledger.since(int(raw))
        return HttpResponse.json({"replica": self.name, "last_seq": self.ledger.last_seq, "records": records})
