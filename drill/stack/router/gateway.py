"""The stack's front door: ``python -m drill.stack.router.gateway --launch router.json``.

An OpenAI-compatible router (stack-contracts.md §4) over the replicas: the same endpoints as a
replica, requests spread by ``router.policy`` (least outstanding requests, or round robin) over
the replicas that pass ``GET /health`` every ``health_check_interval``; a replica whose
connection fails leaves rotation at once and returns after its next good check. Retries and the
Idempotency-Key store are described in :mod:`drill.stack.router.proxy` and
:mod:`drill.stack.router.routing`. ``/metrics`` and the tracer: :mod:`drill.stack.router.telemetry`.

Admin API (contracts §5; loopback only, ``Authorization: Bearer <admin_token>``):
``GET /admin/state``, ``GET /admin/config``, ``PATCH /admin/config`` with any of ``retries``
(merged key by key), ``idempotency``, ``policy``, ``health_check_interval``; it answers
``{"previous": <config>, "config": <config>}`` so a fault can PATCH ``previous`` back.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import logging
import os
import signal
import sys
from pathlib import Path

from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from pydantic import ValidationError

from drill.stack.config import RouterConfig
from drill.stack.http.client import HttpClient, Timeouts, UpstreamError, UpstreamTimeout
from drill.stack.http.loop import loop_name
from drill.stack.http.loop import run as run_loop
from drill.stack.http.server import HttpError, HttpRequest, HttpResponse, HttpServer, ResponseStream, Router
from drill.stack.kv.wire import KV_HEADER
from drill.stack.launch import RouterLaunch
from drill.stack.router.pd_forward import PrefillLeg, record_kv_span
from drill.stack.router.proxy import Attempt, Tee, UpstreamOutcome, forward_headers
from drill.stack.router.routing import (
    CachedResponse,
    IdempotencyStore,
    KeyOutcome,
    ReplicaPool,
    ReplicaState,
    fingerprint,
)
from drill.stack.router.telemetry import RouterMetrics, extract_context, make_tracer

__all__ = ["Gateway", "main"]

log = logging.getLogger("drill.stack.router")
#: nginx's status for a request whose client closed the connection first (never reaches the client).
CLIENT_CLOSED_REQUEST = 499
#: Router SERVER span attribute: the client went away and the upstream request was closed (aborted there).
CLIENT_GONE_ATTRIBUTE = "drill.client_gone"
#: Health checks that must time out in a row before a replica leaves rotation (an answer other than 200, or a
#: refused connection, takes it out at once).
HEALTH_TIMEOUTS_TO_FAIL = 3
_PROXIED = (("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/version"))


class Gateway:
    """The router's state and handlers; :meth:`start` binds, :meth:`close` stops."""

    def __init__(self, launch: RouterLaunch) -> None:
        self.launch = launch
        self.config = launch.router
        decode = [u for u in launch.replicas if u.role != "prefill"]
        prefill = [u for u in launch.replicas if u.role == "prefill"]
        self.pool = ReplicaPool(
            [ReplicaState(u.name, u.index, u.url.rstrip("/")) for u in decode], launch.router.policy
        )
        #: disaggregated stack: the prefill workers (the pool above holds the decode workers); None when aggregated
        self.prefill_pool = (
            ReplicaPool([ReplicaState(u.name, u.index, u.url.rstrip("/")) for u in prefill], launch.router.policy)
            if prefill
            else None
        )
        self.store = IdempotencyStore()
        self.metrics = RouterMetrics()
        self.tracer, self._provider, self._span_export = make_tracer(launch.otlp_endpoint)
        self.client = HttpClient(max_connections=2000, max_idle=256)
        self.health_client = HttpClient(max_connections=100, max_idle=20)
        self.server = HttpServer(self._routes(), host=launch.host, port=launch.port)
        self._health_task: asyncio.Task | None = None
        self._checks: set[asyncio.Task] = set()
        self._checking: set[str] = set()  # replicas with a _check_soon under way
        self._health_timeouts: dict[str, int] = {}  # replica -> health checks timed out in a row
        self.prefill_leg = (
            PrefillLeg(self.prefill_pool, self.client, self.tracer, self._mark) if self.prefill_pool else None
        )

    def _routes(self) -> Router:
        router = Router()
        for method, path in _PROXIED:
            router.add(method, path, self.handle_proxy)
        router.add("GET", "/health", self.handle_health)
        router.add("GET", "/metrics", self.handle_metrics)
        router.add("GET", "/admin/state", self.handle_state)
        router.add("GET", "/admin/config", self.handle_get_config)
        router.add("PATCH", "/admin/config", self.handle_patch_config)
        return router

    async def start(self) -> None:
        """Run the first health check, bind, and start the health loop."""
        if self._span_export is not None:
            self._span_export.start()
        await self.check_all()
        await self.server.start()
        self._health_task = asyncio.create_task(self._health_loop())

    async def close(self) -> None:
        """Stop the health loop and the server, close clients, flush spans."""
        if self._health_task is not None:
            self._health_task.cancel()
        await self.server.close(grace_s=1.0)
        await self.client.close()
        await self.health_client.close()
        if self._span_export is not None:
            await self._span_export.aclose()
        if self._provider is not None:
            self._provider.shutdown()

    # -- health ------------------------------------------------------------------------------
    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_check_interval)
            await self.check_all()

    async def check_all(self) -> None:
        """Check every replica once, concurrently."""
        await asyncio.gather(*(self.check(r) for r in self._all_replicas()))

    def _all_replicas(self) -> list[ReplicaState]:
        """Every upstream: the replicas (decode workers), and the prefill workers of a disaggregated stack."""
        return [*(self.prefill_pool.replicas if self.prefill_pool else ()), *self.pool.replicas]

    async def check(self, replica: ReplicaState) -> None:
        """``GET /health`` of one replica: 200 keeps it in rotation, another answer or a refused connection takes
        it out; a check that times out does so only :data:`HEALTH_TIMEOUTS_TO_FAIL` times in a row."""
        timeout = min(5.0, max(0.5, self.config.health_check_interval))
        try:
            response, _ = await self.health_client.fetch("GET", replica.url + "/health", timeout=Timeouts.of(timeout))
            healthy, error = response.status == 200, f"HTTP {response.status}"
        except UpstreamTimeout as exc:
            self._health_timed_out(replica, type(exc).__name__)
            return
        except UpstreamError as exc:
            healthy, error = False, type(exc).__name__
        self._health_timeouts.pop(replica.name, None)
        self._mark(replica, healthy, None if healthy else error)

    def _health_timed_out(self, replica: ReplicaState, kind: str) -> None:
        """A timed-out check is weak evidence: under a flood the router's own loop (or its health client's pool)
        may be what is late, and taking healthy replicas out for it refuses everything ("no healthy replica") —
        so, like a load balancer's ``fall 3`` (HAProxy) or a probe's ``failureThreshold: 3`` (Kubernetes), a
        replica leaves rotation after that many in a row."""
        count = self._health_timeouts.get(replica.name, 0) + 1
        self._health_timeouts[replica.name] = count
        if count >= HEALTH_TIMEOUTS_TO_FAIL or not replica.healthy:
            weak = replica.healthy or replica.late_only  # out before for a stronger reason: it stays that way
            self._mark(replica, False, f"{kind} ({count} in a row)", late_only=weak)

    def _mark(self, replica: ReplicaState, healthy: bool, error: str | None, *, late_only: bool = False) -> None:
        if self.pool.mark(replica, healthy, error, late_only=late_only):
            log.log(
                logging.INFO if healthy else logging.WARNING,
                "replica %s is %s%s",
                replica.name,
                "healthy" if healthy else "unhealthy",
                f" ({error})" if error else "",
            )
        self.metrics.healthy.labels(replica.name).set(1 if healthy else 0)

    def _check_soon(self, replica: ReplicaState) -> None:
        """Check ``replica`` now, unless a check of it is already under way (a burst of upstream timeouts asks
        once, instead of exhausting the health client's connections with one check per timeout)."""
        if replica.name in self._checking:
            return
        self._checking.add(replica.name)
        task = asyncio.create_task(self.check(replica))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        task.add_done_callback(lambda _: self._checking.discard(replica.name))

    # -- proxying ----------------------------------------------------------------------------
    async def handle_proxy(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse | None:
        """An OpenAI endpoint: through the Idempotency-Key store (when on), then upstream."""
        config = self.config
        key = request.headers.get("idempotency-key")
        with self.tracer.start_as_current_span(
            f"{request.method} {request.path}", kind=SpanKind.SERVER, context=extract_context(request.headers)
        ) as span:
            span.set_attribute("http.route", request.path)
            try:
                if config.idempotency and key:
                    span.set_attribute("drill.idempotency_key", key)
                    response = await self._idempotent(request, stream, key, config)
                else:
                    response = await self._forward_while_connected(request, stream, config, span)
            except HttpError as exc:
                self.metrics.requests.labels(request.path, str(exc.status)).inc()
                raise
            status = response.status if response is not None else 200
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
            self.metrics.requests.labels(request.path, str(status)).inc()
            return response

    async def _idempotent(
        self, request: HttpRequest, stream: ResponseStream, key: str, config: RouterConfig
    ) -> HttpResponse | None:
        outcome, first = self.store.begin(key, fingerprint(request.method, request.path, request.body))
        if outcome is KeyOutcome.MISMATCH:
            self.metrics.conflicts.inc()
            raise HttpError(
                422,
                f"Idempotency-Key {key!r} was already used with a different request body",
                type="UnprocessableEntityError",
            )
        if outcome is KeyOutcome.REPLAY:
            cached = await asyncio.shield(first)
            self.metrics.replays.inc()
            return HttpResponse(cached.status, cached.body, cached.content_type, cached.headers)
        tee = Tee(stream)
        try:
            response = await self._forward(request, stream, tee, config)
        except BaseException:
            self.store.finish(key, CachedResponse(502, "application/json", b'{"error":"router failed"}'))
            raise
        self.store.finish(
            key,
            tee.cached()
            if response is None
            else CachedResponse(response.status, response.content_type, response.body, response.headers),
        )
        return response

    async def _forward(
        self, request: HttpRequest, stream: ResponseStream, out: ResponseStream | Tee, config: RouterConfig
    ) -> HttpResponse | None:
        headers = forward_headers(request.headers)
        observe = None
        # P/D: a completion is prefilled first, then decoded with the announced transfer; a plain GET (the models
        # served, the version) goes straight to a decode worker, which serves the same model
        if self.prefill_leg is not None and request.method == "POST":
            prepared = await self.prefill_leg.run(request, headers, config)
            if isinstance(prepared, HttpResponse):
                return prepared
            request, observe = prepared, self._observe_kv
        outcome = UpstreamOutcome(done=False)
        for number in range(1, config.retries.attempts + 2):
            replica = self.pool.pick()
            if replica is None:
                return (
                    outcome.fallback
                    or HttpError(
                        503, "no healthy replica: every replica failed its health check", type="Service Unavailable"
                    ).response()
                )
            if number > 1:
                self.metrics.retries.labels(outcome.failure.value if outcome.failure else "none").inc()
            outcome = await self._attempt(
                Attempt(self.client, self.tracer, config, request, headers, number, replica, out, observe)
            )
            if outcome.done:
                return outcome.response
            if outcome.failure not in config.retries.on or stream.disconnected:
                break
        return outcome.fallback

    async def _forward_while_connected(
        self, request: HttpRequest, stream: ResponseStream, config: RouterConfig, span: Span
    ) -> HttpResponse | None:
        """:meth:`_forward`, cancelled the moment the client goes away (``abort_abandoned``, vLLM's
        ``with_cancellation``): cancelling the attempt closes the upstream connection, and the
        replica aborts the request wherever it is. Answers 499 (client closed request) to nobody then, or ends a
        stream whose head went out."""
        if not self.launch.abort_abandoned:
            return await self._forward(request, stream, stream, config)
        work = asyncio.ensure_future(self._forward(request, stream, stream, config))
        gone = asyncio.Event()

        def client_gone() -> None:
            gone.set()
            work.cancel()

        stream.on_disconnect(client_gone)
        try:
            return await work
        except asyncio.CancelledError:
            if not gone.is_set():
                raise  # the router itself is stopping
        self.metrics.cancelled.inc()
        span.set_attribute(CLIENT_GONE_ATTRIBUTE, True)
        span.set_status(Status(StatusCode.ERROR, "client disconnected: upstream request closed"))
        if stream.started:
            return None  # its head (200) went out: the stream just ends
        return HttpResponse(CLIENT_CLOSED_REQUEST, b"", "text/plain")

    async def _attempt(self, attempt: Attempt) -> UpstreamOutcome:
        replica = attempt.replica
        self.pool.acquire(replica)
        self.metrics.attempts.labels(replica.name).inc()
        self.metrics.outstanding.labels(replica.name).set(replica.outstanding)
        try:
            outcome = await attempt.run()
        finally:
            self.pool.release(replica)
            self.metrics.outstanding.labels(replica.name).set(replica.outstanding)
        if outcome.error_kind:
            self.metrics.upstream_errors.labels(replica.name, outcome.error_kind).inc()
            if outcome.error_kind in ("connect", "read"):  # out until the next periodic check
                self._mark(replica, False, f"{outcome.error_kind} error")
            else:
                self._check_soon(replica)
        return outcome

    def _observe_kv(self, headers: dict[str, str]) -> None:
        value = headers.get(KV_HEADER)
        if value is not None:
            record_kv_span(self.tracer, value)

    # -- own endpoints -----------------------------------------------------------------------
    async def handle_health(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        """200 while at least one replica (and, P/D, one prefill worker) is in rotation, else 503."""
        if self.pool.healthy() and (self.prefill_pool is None or self.prefill_pool.healthy()):
            return HttpResponse(200, b"", "text/plain")
        raise HttpError(503, "no healthy replica", type="Service Unavailable")

    async def handle_metrics(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        """The router's own counters in Prometheus text format."""
        return HttpResponse(200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")

    def _admin(self, request: HttpRequest) -> None:
        if not _is_loopback(request.peer_host):
            raise HttpError(403, "the admin API answers loopback clients only", type="Forbidden")
        sent = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(sent.encode(), self.launch.admin_token.encode()):
            raise HttpError(
                401, "missing or wrong admin token (Authorization: Bearer <admin_token>)", type="Unauthorized"
            )

    async def handle_state(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        """Replicas with health and outstanding counts, and the current config."""
        self._admin(request)
        return HttpResponse.json(
            {
                "pid": os.getpid(),
                "replicas": [r.as_json() for r in self._all_replicas()],
                "idempotency_keys": len(self.store),
                "config": self.config.model_dump(mode="json"),
            }
        )

    async def handle_get_config(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        """The router config in force."""
        self._admin(request)
        return HttpResponse.json(self.config.model_dump(mode="json"))

    async def handle_patch_config(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        """Change retries/idempotency/policy/interval; answers the previous and the new config."""
        self._admin(request)
        patch = request.json()
        if not isinstance(patch, dict):
            raise HttpError(
                400, "expected a JSON object with any of retries, idempotency, policy, health_check_interval"
            )
        previous = self.config.model_dump(mode="json")
        merged = {**previous, **patch}
        if isinstance(patch.get("retries"), dict):
            merged["retries"] = {**previous["retries"], **patch["retries"]}
        try:
            self.config = RouterConfig.model_validate(merged)
        except ValidationError as exc:
            raise HttpError(400, f"invalid router config: {_first_error(exc)}") from exc
        self.pool.policy = self.config.policy
        return HttpResponse.json({"previous": previous, "config": self.config.model_dump(mode="json")})


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"


def _is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(launch: RouterLaunch) -> None:
    """Run the router until SIGTERM/SIGINT. Writes ``ready_file`` (pid, port, url) once bound."""
    gateway = Gateway(launch)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await gateway.start()
    if launch.ready_file is not None:
        ready = {"pid": os.getpid(), "port": gateway.server.port, "url": gateway.server.url}
        launch.ready_file.write_text(json.dumps(ready), encoding="utf-8")
    log.info("router listening on %s over %d replicas (%s loop)", gateway.server.url, len(launch.replicas), loop_name())
    await stop.wait()
    await gateway.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit 0 on SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m drill.stack.router.gateway")
    parser.add_argument("--launch", required=True, type=Path, help="RouterLaunch JSON file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s router %(levelname)s %(message)s", stream=sys.stderr)
    launch = RouterLaunch.model_validate_json(args.launch.read_text(encoding="utf-8"))
    run_loop(serve(launch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
