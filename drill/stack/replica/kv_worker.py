"""What a prefill or decode worker does with each request, around the engine (vLLM's KV connector's place).

:class:`PrefillKv` (a prefill worker): a request whose ``kv_transfer_params`` say ``do_remote_decode`` is
prefilled as usual (the router sends it with ``max_tokens: 1``); once it finishes, its KV cache is held in the
worker's :class:`~drill.stack.kv.transfers.KvStore` and the answer carries the ``kv_transfer_params`` that
name it (transfer id, version, host and port of the KV side channel). :class:`DecodeKv` (a decode worker): a
request with ``do_remote_prefill`` first reads those blocks (:func:`~drill.stack.kv.kv_client.read_transfer`,
under the lease), then enters the engine with its prompt already computed; the text it generates follows the
blocks' content, so stale blocks that pass unchecked give other tokens under HTTP 200. A failed load fails the
request (HTTP 500) or, with ``failure_policy: recompute``, is recomputed here. Both sides record a
``kv_transfer`` span under the request's trace (the prefill worker's, one per read it serves, under the prefill
request's trace context kept with the held transfer; ``docs/disaggregated.md``), and add their KV connector
metrics to the replica's ``/metrics`` (:meth:`PrefillKv.metric_families`, :meth:`DecodeKv.metric_families`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from drill.stack.http.server import HttpError, HttpRequest, HttpResponse
from drill.stack.inference.request import Request
from drill.stack.inference.textgen import TokenSampler, prompt_seed
from drill.stack.kv.kv_client import FAILURE_POINTS, KvLoad, KvReadPlan, KvTransferError, read_transfer
from drill.stack.kv.kv_faults import KvFault
from drill.stack.kv.kv_server import KvServer, Served
from drill.stack.kv.transfers import KvStore, TransferState
from drill.stack.kv.wire import KV_HEADER, KV_SPAN
from drill.stack.launch import ReplicaLaunch
from drill.stack.replica.metrics import NIXL_BYTES_BUCKETS, NIXL_XFER_TIME_BUCKETS, FastHistogram
from drill.stack.replica.request_spans import HttpSpan, Tracing
from drill.stack.topology import KvFailurePolicy, KvTransferConfig, WorkerRole

__all__ = ["DecodeKv", "KvHooks", "PrefillKv", "kv_hooks"]


class KvHooks(Protocol):
    """What the OpenAI API layer calls on a P/D worker (see the module docstring)."""

    role: WorkerRole

    async def before_engine(self, request: Request, params: dict[str, Any] | None, span: HttpSpan) -> str | None:
        """Prepare ``request`` before it enters the engine; the KV header value to answer with, if any."""
        ...

    def after_engine(self, request: Request, params: dict[str, Any] | None, span: HttpSpan) -> dict[str, Any] | None:
        """The ``kv_transfer_params`` to answer with, if any (``span``: the request's, or its incoming context)."""
        ...

    def routes(self) -> dict[tuple[str, str], Callable[[HttpRequest], Awaitable[HttpResponse]]]:
        """Admin routes (method, path) -> handler."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def metric_families(self, labels: list[str], values: list[str]) -> Iterator[Metric]:
        """The KV connector's metric families for the replica's ``/metrics``."""
        ...


@dataclass
class _Outcome:
    state: str
    seconds: float
    attributes: dict[str, Any]
    error: str | None = None


class PrefillKv:
    """A prefill worker's KV side: its store, its side-channel server, the KV fault admin routes."""

    role = WorkerRole.PREFILL

    def __init__(self, launch: ReplicaLaunch, kv: KvTransferConfig, tracing: Tracing) -> None:
        config = launch.config
        self.name = launch.name
        self.store = KvStore(
            block_size=config.engine.block_size,
            kv_bytes_per_token=config.model_preset.kv_bytes_per_token,
            free_after_s=kv.free_after,
        )
        host, port = _split(launch.kv_listen or f"{launch.host}:0")
        self.server = KvServer(
            self.store, host=host, port=port, byte_scale=kv.byte_scale, link_gbps=kv.link_gbps, on_served=self.record
        )
        self.tracing = tracing

    async def start(self) -> None:
        await self.server.start()

    async def close(self) -> None:
        await self.server.close()

    async def before_engine(self, request: Request, params: dict[str, Any] | None, span: HttpSpan) -> str | None:
        return None

    def after_engine(self, request: Request, params: dict[str, Any] | None, span: HttpSpan) -> dict[str, Any] | None:
        """Hold the finished prefill's KV cache for the decode worker, with the request's trace context; announce it."""
        if not params or not params.get("do_remote_decode") or request.finish_reason is None:
            return None
        transfer_id = request.request_id.split("#", 1)[0]
        digest = prompt_seed(request.prompt_tokens)
        transfer = self.store.register(transfer_id, request.num_prompt_tokens, digest, trace=span)
        return transfer.announce(self.name, self.server.host, self.server.port)

    def record(self, served: Served) -> None:
        """The holder's ``kv_transfer`` span of one read, under the prefill request's trace context."""
        transfer = served.transfer
        attributes: dict[str, Any] = {
            "drill.kv.transfer_id": transfer.transfer_id,
            "drill.kv.role": "prefill",
            "drill.kv.state": served.state.value,
            "drill.kv.blocks": transfer.num_blocks,
            "drill.kv.bytes": transfer.modelled_bytes,
            "drill.kv.wire_bytes": served.wire_bytes,
            "drill.kv.version": transfer.version,
            "drill.kv.consumer": served.consumer,
            "drill.kv.free_after_s": self.store.free_after_s,
        }
        if served.stalled:
            attributes["drill.kv.stalled"] = True
        if served.failure is not None:
            attributes["drill.kv.failure"] = served.failure
            attributes["drill.kv.failure_point"] = served.point
        self.tracing.record_span(
            KV_SPAN,
            cast("HttpSpan", transfer.trace),
            start_wall=served.started,
            end_wall=served.ended,
            attributes=attributes,
            error=served.reason,
        )

    def metric_families(self, labels: list[str], values: list[str]) -> Iterator[Metric]:
        """vLLM's ``nixl_num_kv_expired_reqs`` (a P-side counter) and the transfers held now (the stack's own)."""
        self.store.expire()  # a transfer past ``free_after`` counts as expired from the moment it is looked at
        expired = CounterMetricFamily(
            "vllm:nixl_num_kv_expired_reqs",
            "Number of requests that had their KV expire. NOTE: This metric is tracked on the P instance.",
            labels=labels,
        )
        expired.add_metric(values, self.store.expired)
        yield expired
        held = GaugeMetricFamily(
            "drill:kv_transfers_held", "KV transfers held for a decode worker and not yet consumed.", labels=labels
        )
        held.add_metric(values, self.store.pending)
        yield held

    def routes(self) -> dict[tuple[str, str], Callable[[HttpRequest], Awaitable[HttpResponse]]]:
        return {
            ("GET", "/admin/kv"): self.get_state,
            ("PUT", "/admin/kv/fault"): self.put_fault,
            ("DELETE", "/admin/kv/fault"): self.delete_fault,
        }

    def snapshot(self) -> dict[str, object]:
        fault = self.server.fault
        return {
            "role": self.role.value,
            "kv_port": self.server.port,
            "pending": self.store.pending,
            "in_flight": self.server.in_flight,
            "longest_left_s": round(self.server.longest_left(time.time()), 6),
            "version": self.store.version,
            "counts": {state.value: n for state, n in self.store.counts.items()},
            "fault": fault.model_dump(mode="json") if fault else None,
        }

    async def get_state(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(self.snapshot())

    async def put_fault(self, request: HttpRequest) -> HttpResponse:
        """Set the KV fault (a :class:`KvFault` as JSON); answers the previous one."""
        try:
            fault = KvFault.model_validate(request.json())
        except ValueError as exc:
            raise HttpError(400, f"invalid KV fault: {exc}") from exc
        previous, self.server.fault = self.server.fault, fault
        return HttpResponse.json({"previous": previous.model_dump(mode="json") if previous else None})

    async def delete_fault(self, request: HttpRequest) -> HttpResponse:
        """Clear the KV fault, only if ``?name=`` names it (or no name is given); idempotent."""
        name = request.query_params().get("name")
        fault = self.server.fault
        if fault is not None and (name is None or fault.name == name):
            self.server.fault = None
        return HttpResponse.json({"previous": fault.model_dump(mode="json") if fault else None})


class DecodeKv:
    """A decode worker's KV side: read the announced blocks under the lease, then decode from them."""

    role = WorkerRole.DECODE

    def __init__(self, launch: ReplicaLaunch, kv: KvTransferConfig, tracing: Tracing) -> None:
        self.name = launch.name
        self.kv = kv
        self.peers = dict(launch.kv_peers)
        self.tracing = tracing
        self.counts = {"loaded": 0, "failed": 0, "recomputed": 0, "lease_expired": 0, "block_check": 0, "aborted": 0}
        self.in_flight = 0  # loads under way
        self.xfer_time = FastHistogram(NIXL_XFER_TIME_BUCKETS)  # vllm:nixl_xfer_time_seconds
        self.xfer_bytes = FastHistogram(NIXL_BYTES_BUCKETS)  # vllm:nixl_bytes_transferred
        self.failures = dict.fromkeys(FAILURE_POINTS, 0)  # drill:kv_transfer_failures{point}

    async def start(self) -> None:
        """Nothing to start: a decode worker only dials."""

    async def close(self) -> None:
        """Nothing to close."""

    def after_engine(self, request: Request, params: dict[str, Any] | None, span: HttpSpan) -> dict[str, Any] | None:
        return None

    def routes(self) -> dict[tuple[str, str], Callable[[HttpRequest], Awaitable[HttpResponse]]]:
        return {("GET", "/admin/kv"): self.get_state}

    def metric_families(self, labels: list[str], values: list[str]) -> Iterator[Metric]:
        """The consumer side's NIXL metrics (transfer time, bytes, failures) and the stack's own by-point count."""
        for name, doc, hist in (
            (
                "vllm:nixl_xfer_time_seconds",
                "Histogram of transfer duration for NIXL KV Cache transfers.",
                self.xfer_time,
            ),
            (
                "vllm:nixl_bytes_transferred",
                "Histogram of bytes transferred per NIXL KV Cache transfers.",
                self.xfer_bytes,
            ),
        ):
            family = HistogramMetricFamily(name, doc, labels=labels)
            family.add_metric(values, hist.buckets(), hist.sum)
            yield family
        failed = CounterMetricFamily(
            "vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers.", labels=labels
        )
        failed.add_metric(values, sum(self.failures.values()))
        yield failed
        by_point = CounterMetricFamily(
            "drill:kv_transfer_failures", "Failed KV transfers, by where they broke.", labels=[*labels, "point"]
        )
        for point, count in self.failures.items():
            by_point.add_metric([*values, point], count)
        yield by_point
        in_flight = GaugeMetricFamily(
            "drill:kv_transfers_in_flight", "KV transfers this decode worker is reading now.", labels=labels
        )
        in_flight.add_metric(values, self.in_flight)
        yield in_flight

    async def get_state(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(
            {
                "role": self.role.value,
                "counts": dict(self.counts),
                "in_flight": self.in_flight,
                "lease_s": self.kv.lease,
            }
        )

    async def before_engine(self, request: Request, params: dict[str, Any] | None, span: HttpSpan) -> str | None:
        """Load the request's KV cache; HttpError 500 when it fails and the policy is ``fail``."""
        if not params or not params.get("do_remote_prefill"):
            return None
        started = time.time()
        self.in_flight += 1
        try:
            outcome = await self._load(request, params)
        except asyncio.CancelledError:  # the client went away: the read is closed, the holder sees it go
            self.counts["aborted"] += 1
            attributes = {
                "drill.kv.role": "decode",
                "drill.kv.state": "aborted",
                "drill.kv.lease_s": self.kv.lease or -1,
            }
            self.tracing.record_span(
                KV_SPAN,
                span,
                start_wall=started,
                end_wall=time.time(),
                attributes=attributes,
                error="client disconnected during the KV load",
            )
            raise
        finally:
            self.in_flight -= 1
        self.tracing.record_span(
            KV_SPAN,
            span,
            start_wall=started,
            end_wall=started + outcome.seconds,
            attributes=outcome.attributes,
            error=outcome.error,
        )
        header = f"state={outcome.state};seconds={outcome.seconds:.6f}"
        if outcome.error is not None and self.kv.failure_policy is KvFailurePolicy.FAIL:
            raise HttpError(
                500, f"KV load failed: {outcome.error}", type="KVTransferError", headers=((KV_HEADER, header),)
            )
        return header

    async def _load(self, request: Request, params: dict[str, Any]) -> _Outcome:
        try:
            plan = self._plan(params)
        except (KeyError, TypeError, ValueError) as exc:
            raise HttpError(400, f"invalid kv_transfer_params: {exc}") from exc
        base = {
            "drill.kv.transfer_id": plan.transfer_id,
            "drill.kv.role": "decode",
            "drill.kv.lease_s": self.kv.lease or -1,
        }
        started = time.monotonic()
        try:
            load = await read_transfer(plan)
        except KvTransferError as exc:
            return self._failed(request, exc, base, time.monotonic() - started)
        self.counts["loaded"] += 1
        self.xfer_time.observe(load.seconds)
        self.xfer_bytes.observe(load.modelled_bytes)
        _decode_from(request, load)
        attributes = {
            **base,
            "drill.kv.state": TransferState.CONSUMED.value,
            "drill.kv.blocks": load.blocks,
            "drill.kv.bytes": load.modelled_bytes,
            "drill.kv.wire_bytes": load.payload_bytes,
            "drill.kv.version": load.version,
            "drill.kv.checked": plan.check,
        }
        return _Outcome(TransferState.CONSUMED.value, load.seconds, attributes)

    def _failed(self, request: Request, exc: KvTransferError, base: dict[str, Any], seconds: float) -> _Outcome:
        self.counts["failed"] += 1
        self.failures[exc.point] += 1
        if exc.cause in self.counts:
            self.counts[exc.cause] += 1
        recompute = self.kv.failure_policy is KvFailurePolicy.RECOMPUTE
        if recompute:
            self.counts["recomputed"] += 1  # the request keeps its prompt uncomputed: the engine prefills it here
        attributes = {
            **base,
            "drill.kv.state": exc.state.value,
            "drill.kv.failure": exc.cause,
            "drill.kv.failure_point": exc.point,
            "drill.kv.recomputed": recompute,
        }
        return _Outcome("recomputed" if recompute else "failed", seconds, attributes, exc.reason)

    def _plan(self, params: dict[str, Any]) -> KvReadPlan:
        engine = str(params["remote_engine_id"])
        address = (
            _split(self.peers[engine])
            if engine in self.peers
            else (str(params["remote_host"]), int(params["remote_port"]))
        )
        return KvReadPlan(
            address=address,
            transfer_id=str(params["transfer_id"]),
            version=int(params["version"]),
            consumer=self.name,
            lease_s=self.kv.lease,
            check=self.kv.check_block_versions,
            link_gbps=self.kv.link_gbps,
        )


def _decode_from(request: Request, load: KvLoad) -> None:
    """Enter the engine with the prompt computed, generating from what the blocks hold."""
    if load.digest != prompt_seed(request.prompt_tokens):  # not this prompt's blocks: other tokens follow
        request.sampler = TokenSampler(load.digest)
        if request.stop_after is not None:
            request.stop_after = request.sampler.natural_length()
    if request.num_prompt_tokens > 1:
        request.num_computed_tokens = request.num_prompt_tokens - 1  # the last token is scheduled as a decode step


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def kv_hooks(launch: ReplicaLaunch, tracing: Tracing) -> KvHooks | None:
    """The P/D hooks of a replica, None for an aggregated one."""
    topology = launch.config.topology
    if topology is None or launch.role is None:
        return None
    role = WorkerRole(launch.role)
    if role is WorkerRole.PREFILL:
        return PrefillKv(launch, topology.kv_transfer, tracing)
    return DecodeKv(launch, topology.kv_transfer, tracing)
