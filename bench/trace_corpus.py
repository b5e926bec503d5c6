"""A development corpus: fault-injected microservice traces with known ground truth.

Each case is one application — a service graph of 20-40 services with fan-out and fan-in, drawn from
the case's seed — serving Poisson traffic for a baseline of 20 s to 5 min, then one fault on one
service for 60-180 s. The spans are OpenTelemetry-shaped: SERVER spans per operation, CLIENT spans
for calls (``server.address``/``peer.service``/``net.peer.name`` on most, none on some), INTERNAL
steps, some callers without client instrumentation (a SERVER span directly under the caller's),
databases that export no spans of their own (only their callers' CLIENT spans name them), and, per
case, status codes or none at all.

Latencies: each operation's own work is lognormal (median 0.3-30 ms, σ 0.25-0.7), each network hop
lognormal too, and every trace shares a slow load factor (a sine over the run and per-trace
lognormal jitter) so that windows differ a little without any fault. How often an operation calls
another follows a power law, so some services are rare (a handful of spans in a short baseline).

Fault kinds (the ground truth is the faulty service's name, as the spans or their callers name it):

- ``cpu``: CPU contention on one service: its operations' own work 1.25-2.5x slower;
- ``delay``: network delay on one service's ingress (10-300 ms per call): its callers' CLIENT spans
  grow, its SERVER spans stay normal (half the cases also delay its own outgoing calls);
- ``slow_dependency``: a database (instrumented or not) answers 3-10x slower;
- ``error``: one service fails a share of its requests fast, with ERROR status up the chain;
- ``error_no_status``: the same in traces that carry no status codes at all.

The first three show in latency (:data:`LATENCY_KINDS`). :func:`make_case` builds a case in memory
as a :class:`~drill.traces.table.SpanTable`; :func:`write_otlp` writes it as OTLP JSON lines, which
``drill traces analyze FILE --baseline-until <injection>`` reads::

    .venv/bin/python bench/trace_corpus.py --seed 7 --out /tmp/case7.otlp.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drill.traces.table import SpanTable  # noqa: E402

KINDS = ("cpu", "delay", "slow_dependency", "error", "error_no_status")
LATENCY_KINDS = ("cpu", "delay", "slow_dependency")
T0_NS = 1_780_000_000 * 10**9
_MS = 1_000_000


@dataclass
class Operation:
    service: str
    name: str
    self_median_ms: float
    self_sigma: float
    calls: list[tuple[Operation, float]] = field(default_factory=list)  # (callee, probability per request)
    parallel: bool = False  # its calls run concurrently
    internal: str | None = None  # an INTERNAL step span taking part of its own work


@dataclass
class Service:
    name: str
    operations: list[Operation]
    database: bool = False
    instrumented: bool = True  # exports spans of its own (databases may not)
    client_spans: bool = True  # wraps its outgoing calls in CLIENT spans
    external: bool = False  # calls an external API (a CLIENT span no SERVER span answers)
    peer_style: str = "server.address"  # how its CLIENT spans name the callee
    layer: int = 0  # its depth in the graph (callers are in shallower layers)


@dataclass(frozen=True)
class Fault:
    kind: str
    service: str
    factor: float = 1.0  # cpu / slow_dependency: own-work multiplier
    delay_ms: float = 0.0  # delay: added per call into the service
    egress: bool = False  # delay: its own outgoing calls too
    error_share: float = 0.0  # error kinds: share of its requests that fail
    share: float = 1.0  # intermittent: the share of its calls / requests the fault hits
    fraction: float = 0.0  # delay: added as this fraction of each call's time instead of delay_ms
    propagate: float = 0.0  # cpu: the share of the slowdown its callers' own work gets (shared host)


@dataclass
class Case:
    seed: int
    table: SpanTable
    injection_ns: int
    fault: Fault
    services: tuple[str, ...]
    baseline_s: float
    fault_s: float
    with_status: bool
    hardships: Hardships | None = None

    @property
    def truth(self) -> str:
        return self.fault.service


# -- the application -------------------------------------------------------------------------------


def _graph(rng: random.Random) -> tuple[list[Service], list[Operation]]:
    """Services in layers (entry first); every non-entry operation is called from a shallower one."""
    n = rng.randint(20, 40)
    layers = rng.randint(4, 6)
    services: list[Service] = []
    by_layer: list[list[Service]] = [[] for _ in range(layers)]
    databases = max(2, n // 8)
    for i in range(n):
        database = i >= n - databases
        layer = layers - 1 if database else (0 if i == 0 else 1 + (i - 1) % (layers - 2))
        name = f"db-{i}" if database else ("frontend" if i == 0 else f"svc-{i:02d}")
        ops = [
            Operation(
                name,
                _op_name(rng, name, j, database),
                math.exp(rng.uniform(math.log(0.3), math.log(30))),
                rng.uniform(0.25, 0.7),
                parallel=rng.random() < 0.3,
                internal=f"{name}.process" if (not database and rng.random() < 0.3) else None,
            )
            for j in range(1 if database else rng.randint(1, 4))
        ]
        service = Service(
            name,
            ops,
            database=database,
            instrumented=not database or rng.random() < 0.4,
            client_spans=rng.random() < 0.85,
            peer_style=rng.choice(
                ("server.address", "server.address:port", "peer.service", "net.peer.name", "fqdn", "")
            ),
        )
        services.append(service)
        by_layer[layer].append(service)
    for layer in range(layers - 1):
        deeper = [op for later in by_layer[layer + 1 :] for s in later for op in s.operations]
        for service in by_layer[layer]:
            for op in service.operations:
                for callee in rng.sample(deeper, k=min(len(deeper), rng.randint(1, 4))):
                    op.calls.append((callee, _call_probability(rng)))
    _connect_all(rng, by_layer)
    entry = services[0].operations
    return services, entry


def _op_name(rng: random.Random, service: str, j: int, database: bool) -> str:
    if database:
        return rng.choice(("SELECT", "UPDATE", "INSERT", "query"))
    style = rng.choice(("http", "rpc"))
    verb = ("get", "list", "update", "create")[j % 4]
    return f"{verb.upper()} /{service}/{verb}" if style == "http" else f"{service.title()}Service/{verb.title()}"


def _call_probability(rng: random.Random) -> float:
    """Power-law call frequencies: most calls are always made, a long tail is rare (down to 1%)."""
    return min(1.0, 0.01 * (1 - rng.random()) ** -2.2)


def _connect_all(rng: random.Random, by_layer: list[list[Service]]) -> None:
    """Give every operation below the entry at least one caller (fan-in from random shallower operations)."""
    called = {id(callee) for layer in by_layer for s in layer for op in s.operations for callee, _ in op.calls}
    for depth in range(1, len(by_layer)):
        shallower = [op for layer in by_layer[:depth] for s in layer for op in s.operations]
        for service in by_layer[depth]:
            for op in service.operations:
                if id(op) not in called:
                    rng.choice(shallower).calls.append((op, _call_probability(rng)))


# -- spans -----------------------------------------------------------------------------------------


class _Spans:
    def __init__(self, rng: random.Random, with_status: bool) -> None:
        self.rng = rng
        self.with_status = with_status
        self.cols: dict[str, list] = {
            k: []
            for k in (
                "trace_id",
                "span_id",
                "parent_id",
                "service",
                "name",
                "kind",
                "start_ns",
                "end_ns",
                "status",
                "status_message",
                "attributes",
            )
        }

    def add(self, trace, parent, service, name, kind, start, end, error, attributes) -> str:
        span_id = f"{self.rng.getrandbits(64) | 1:016x}"
        c = self.cols
        c["trace_id"].append(trace)
        c["span_id"].append(span_id)
        c["parent_id"].append(parent)
        c["service"].append(service)
        c["name"].append(name)
        c["kind"].append(kind)
        c["start_ns"].append(int(start))
        c["end_ns"].append(int(max(end, start + 1000)))
        c["status"].append(2 if (error and self.with_status) else 0)
        c["status_message"].append("upstream failed" if (error and self.with_status) else None)
        c["attributes"].append(attributes)
        return span_id

    def table(self) -> SpanTable:
        return SpanTable.from_columns(**self.cols)


_SERVER, _CLIENT, _INTERNAL = 2, 3, 1


class _App:
    def __init__(
        self,
        rng: random.Random,
        services: list[Service],
        fault: Fault | None,
        with_status: bool,
        client_cpu: float = 0.0,
    ):
        self.rng = rng
        self.client_cpu = client_cpu  # Hardships.client_cpu
        self.services = {s.name: s for s in services}
        self.fault = fault
        self.spans = _Spans(rng, with_status)
        self.active: list[tuple[Fault, float]] = []  # the faults acting on the current trace, and their strength
        self.callers: dict[str, set[str]] = {}
        for service in services:
            for op in service.operations:
                for callee, _ in op.calls:
                    self.callers.setdefault(callee.service, set()).add(service.name)

    def _lognormal(self, median_ms: float, sigma: float) -> float:
        return median_ms * _MS * math.exp(self.rng.gauss(0, sigma))

    def _hits(self, service: str, kinds: tuple[str, ...]) -> list[tuple[Fault, float]]:
        """The active faults of ``kinds`` on ``service`` that hit this call (an intermittent one: some)."""
        return [
            (f, w)
            for f, w in self.active
            if f.service == service and f.kind in kinds and (f.share >= 1 or self.rng.random() < f.share)
        ]

    def _own_work(self, op: Operation, load: float) -> float:
        work = self._lognormal(op.self_median_ms, op.self_sigma) * load
        for f, w in self._hits(op.service, ("cpu", "slow_dependency")):
            work *= 1 + (f.factor - 1) * w
        for f, w in self.active:  # a contended host slows its callers' work a little too
            if f.kind == "cpu" and f.propagate and op.service in self.callers.get(f.service, ()):
                work *= 1 + (f.factor - 1) * f.propagate * w
        return work

    def serve(self, trace: str, parent: str, op: Operation, start: float, load: float) -> tuple[float, bool]:
        """Run ``op`` from ``start``; its SERVER span (when instrumented) is a child of ``parent``.
        Returns the end time and whether it failed."""
        service = self.services[op.service]
        fails = any(
            self.rng.random() < f.error_share * w for f, w in self._hits(op.service, ("error", "error_no_status"))
        )
        work = self._own_work(op, load)
        pre, post = work * 0.6, work * 0.4
        if fails:
            pre, post = pre * 0.3, post * 0.1
        t = start + pre
        failed = fails
        if not service.instrumented:
            return start + work, fails
        server_id = self.spans.add(trace, parent, op.service, op.name, _SERVER, 0, 0, False, self._server_attrs(op))
        row = len(self.spans.cols["span_id"]) - 1
        if op.internal and not fails:
            step = pre * 0.7
            self.spans.add(
                trace, server_id, op.service, op.internal, _INTERNAL, start + pre - step, start + pre, False, {}
            )
        if not fails:
            t, child_failed = self._calls(trace, server_id, service, op, t, load)
            failed = child_failed and self.rng.random() < 0.7
            if service.external and self.rng.random() < 0.5:
                t = self._external(trace, server_id, service, t)
        end = t + post
        c = self.spans.cols
        c["start_ns"][row], c["end_ns"][row] = int(start), int(end)
        if failed and self.spans.with_status:
            c["status"][row], c["status_message"][row] = 2, "internal error"
        return end, failed

    def _external(self, trace: str, parent: str, service: Service, t: float) -> float:
        """A call to an API outside the application: a CLIENT span with a peer and no SERVER span under it."""
        end = t + self._lognormal(40, 0.5)
        attrs = {"server.address": "api.payments.example.com", "http.request.method": "POST"}
        self.spans.add(trace, parent, service.name, "POST", _CLIENT, t, end, False, attrs)
        return end

    def _server_attrs(self, op: Operation) -> dict:
        if self.services[op.service].database:
            return {"db.system": "postgresql"}
        if " /" in op.name:
            return {"http.request.method": op.name.split()[0], "http.route": op.name.split()[1]}
        return {"rpc.system": "grpc", "rpc.service": op.name.split("/")[0]}

    def _calls(self, trace, parent, service, op, t, load) -> tuple[float, bool]:
        failed = False
        ends = []
        for callee, p in op.calls:
            if self.rng.random() >= p:
                continue
            end, callee_failed = self._call(trace, parent, service, callee, t, load)
            failed |= callee_failed
            if op.parallel:
                ends.append(end)
            else:
                t = end
            if callee_failed and not op.parallel:
                break  # a failed call ends the request's work
        return (max(ends, default=t) if op.parallel else t), failed

    def _delay(self, f: Fault, w: float, served: float) -> float:
        """One call's added delay: ``delay_ms`` (± 20 %), or a ``fraction`` of the call's own time."""
        if f.fraction:
            return f.fraction * served * w * self.rng.uniform(0.8, 1.2)
        return f.delay_ms * _MS * w * self.rng.uniform(0.8, 1.2)

    def _call(self, trace, parent, caller: Service, callee: Operation, t, load) -> tuple[float, bool]:
        target = self.services[callee.service]
        out, back = self._lognormal(0.4, 0.3), self._lognormal(0.4, 0.3)
        ingress = self._hits(callee.service, ("delay",))
        egress = [] if ingress else [(f, w) for f, w in self._hits(caller.name, ("delay",)) if f.egress]
        fixed = [(f, w) for f, w in ingress + egress if not f.fraction]
        if fixed:  # a constant delay: on the way back into the callee's caller, or out of the faulty caller
            added = self._delay(*fixed[0], 0.0)
            back, out = (back + added, out) if ingress else (back, out + added)
        scaled = [(f, w) for f, w in ingress + egress if f.fraction]
        if not caller.client_spans and target.instrumented:
            end, failed = self.serve(trace, parent, callee, t + out, load)
            return end + back + sum(self._delay(f, w, end - t - out) for f, w in scaled), failed
        if self.client_cpu:  # the CLIENT span's own work (serialising, parsing): slower on a contended caller
            work = self._lognormal(0.3, 0.3) * load
            for f, w in self._hits(caller.name, ("cpu",)):
                work *= 1 + (f.factor - 1) * self.client_cpu * w
            out, back = out + work / 2, back + work / 2
        client_row = len(self.spans.cols["span_id"])
        client_id = self.spans.add(trace, parent, caller.name, _client_name(callee, target), _CLIENT, 0, 0, False, {})
        served_end, failed = self.serve(trace, client_id, callee, t + out, load)
        end = served_end + back + sum(self._delay(f, w, served_end - t - out) for f, w in scaled)
        c = self.spans.cols
        c["start_ns"][client_row], c["end_ns"][client_row] = int(t), int(end)
        c["attributes"][client_row] = _peer_attributes(caller.peer_style, target)
        if failed and self.spans.with_status:
            c["status"][client_row] = 2
        return end, failed


def _client_name(callee: Operation, target: Service) -> str:
    return callee.name if not target.database else f"{callee.name} {target.name}"


def _peer_attributes(style: str, target: Service) -> dict:
    attrs: dict = {"db.system": "postgresql", "db.name": "app"} if target.database else {}
    if style == "server.address":
        attrs["server.address"] = target.name
    elif style == "server.address:port":
        attrs.update({"server.address": target.name, "server.port": 8080})
    elif style == "peer.service":
        attrs["peer.service"] = target.name
    elif style == "net.peer.name":
        attrs.update({"net.peer.name": target.name, "net.peer.port": 5432 if target.database else 8080})
    elif style == "fqdn":
        attrs["server.address"] = f"{target.name}.shop.svc.cluster.local"
    elif target.database:  # a database call names its server somewhere, or the callee is unknowable
        attrs["peer.service"] = target.name
    return attrs


# -- cases -----------------------------------------------------------------------------------------


def _calls_per_request(services: list[Service], entry: list[Operation]) -> dict[str, float]:
    """Expected calls per request of each service's busiest operation (operations in layer order)."""
    expected = {id(op): 1 / len(entry) for op in entry}
    for service in sorted(services, key=lambda s: s.layer):
        for op in service.operations:
            for callee, p in op.calls:
                expected[id(callee)] = expected.get(id(callee), 0.0) + expected.get(id(op), 0.0) * p
    return {s.name: max(expected.get(id(op), 0.0) for op in s.operations) for s in services}


def _fault(rng: random.Random, kind: str, services: list[Service], busy: dict[str, float], requests: float) -> Fault:
    """A fault on a service seen in the baseline: its busiest operation has 3 or more spans there (rare
    services stay candidates, unseen ones are not: a benchmark's faults are on services that serve)."""
    seen = [s for s in services[1:] if busy[s.name] * requests >= 3]
    if kind == "slow_dependency":
        target = rng.choice([s for s in seen if s.database] or [s for s in services if s.database])
        return Fault(kind, target.name, factor=rng.uniform(3, 10))
    target = rng.choice([s for s in seen if not s.database] or [s for s in services[1:] if not s.database])
    if kind == "cpu":
        return Fault(kind, target.name, factor=rng.uniform(1.25, 2.5))
    if kind == "delay":
        return Fault(
            kind, target.name, delay_ms=math.exp(rng.uniform(math.log(10), math.log(300))), egress=rng.random() < 0.7
        )
    return Fault(kind, target.name, error_share=rng.uniform(0.2, 1.0))


@dataclass(frozen=True)
class Hardships:
    """What a ``hard`` case adds, each drawn per case (a benchmark's traces are rougher than ours)."""

    previous: Fault | None = None  # the previous fault, on another service: its tail leaks into the baseline
    previous_tail_s: float = 0.0  # ... fading out linearly over the baseline's first seconds
    load_step_s: float | None = None  # the load changes (x load_step) at this time, inside the baseline
    load_step: float = 1.0
    drop_share: float = 0.0  # spans lost (sampling, a full export queue): their children lose their parent
    skew_ms: float = 0.0  # each service's clock is off by up to this much
    client_cpu: float = 0.0  # cpu: the share of the slowdown its CLIENT spans' client-side work gets
    id_names: tuple[str, ...] = ()  # HTTP operations whose spans are named by the raw path: an id per request

    def text(self) -> str:
        parts = []
        if self.previous is not None:
            parts.append(
                f"previous {self.previous.kind} on {self.previous.service} fading over {self.previous_tail_s:.0f} s"
            )
        if self.load_step_s is not None:
            parts.append(f"load x{self.load_step:.2f} at {self.load_step_s:.0f} s")
        if self.drop_share:
            parts.append(f"{self.drop_share:.0%} of spans dropped")
        if self.skew_ms:
            parts.append(f"clock skew up to {self.skew_ms:.0f} ms")
        if self.client_cpu:
            parts.append(f"its CLIENT spans' client-side work {self.client_cpu:.0%} as contended")
        if self.id_names:
            parts.append(f"an id in the span names of {len(self.id_names)} operation(s)")
        return ", ".join(parts) or "none"


def _hardships(
    rng: random.Random, kind: str, fault: Fault, services: list[Service], baseline_s: float
) -> tuple[Fault, Hardships]:
    """The fault made rougher (intermittent, a delay as a fraction, contention felt by the callers and in the
    contended service's CLIENT spans: a starved process serialises and parses its calls slower too) and the
    case's other hardships; some services also call an external API."""
    if rng.random() < 0.4:
        fault = replace(fault, share=rng.uniform(0.3, 0.8))
    if kind == "delay" and rng.random() < 0.5:
        fault = replace(fault, fraction=rng.uniform(0.3, 3.0))
    if kind == "cpu" and rng.random() < 0.5:
        fault = replace(fault, propagate=rng.uniform(0.1, 0.4))
    for service in services:
        service.external = not service.database and rng.random() < 0.15
    previous = None
    if rng.random() < 0.5:
        other = rng.choice([s for s in services[1:] if s.name != fault.service])
        previous = (
            Fault("cpu", other.name, factor=rng.uniform(1.5, 3.0))
            if not other.database or rng.random() < 0.5
            else Fault("slow_dependency", other.name, factor=rng.uniform(2, 5))
        )
    step = rng.random() < 0.5
    hardships = Hardships(
        previous=previous,
        previous_tail_s=rng.uniform(0.2, 0.6) * baseline_s,
        load_step_s=rng.uniform(0.3, 0.9) * baseline_s if step else None,
        load_step=rng.choice((0.7, 1.3, 1.5)) if step else 1.0,
        drop_share=rng.choice((0.0, 0.01, 0.05)),
        skew_ms=rng.choice((0.0, 2.0, 15.0)),
    )
    if kind == "cpu" and rng.random() < 0.5:  # drawn last: the cases drawn before it stay as they were
        hardships = replace(hardships, client_cpu=rng.uniform(0.5, 1.0))
    if rng.random() < 0.3:  # drawn after those, for the same reason; names only: the spans' times are as before
        raw = [s for s in services if not s.database and rng.random() < 0.3]
        hardships = replace(hardships, id_names=tuple(op.name for s in raw for op in s.operations if " /" in op.name))
    return fault, hardships


def make_case(seed: int, kind: str | None = None, hard: bool = False) -> Case:
    """Case ``seed``: a fresh application, its baseline and one fault (``kind``, else one by the seed).
    ``hard``: baselines of 20-60 s and the :class:`Hardships` of the case."""
    rng = random.Random(seed)
    kind = kind or KINDS[seed % len(KINDS)]
    services, entry = _graph(rng)
    with_status = kind != "error_no_status" and rng.random() < 0.5
    baseline_s = math.exp(rng.uniform(math.log(20), math.log(300)))
    fault_s = rng.uniform(60, 180)
    if hard:
        baseline_s, fault_s = rng.uniform(20, 60), rng.uniform(60, 180)
    rate = min(math.exp(rng.uniform(math.log(2), math.log(10))), 1500 / (baseline_s + fault_s))
    fault = _fault(rng, kind, services, _calls_per_request(services, entry), rate * baseline_s)
    hardships = Hardships()
    if hard:
        fault, hardships = _hardships(random.Random(seed * 7919 + 1), kind, fault, services, baseline_s)
    app = _App(rng, services, fault, with_status, hardships.client_cpu)
    period = rng.uniform(60, 600)
    t = 0.0
    while t < baseline_s + fault_s:
        t += rng.expovariate(rate)
        load = (1 + 0.1 * math.sin(2 * math.pi * t / period)) * math.exp(rng.gauss(0, 0.1))
        if hardships.load_step_s is not None and t >= hardships.load_step_s:
            load *= hardships.load_step
        app.active = _active(fault, hardships, t, baseline_s)
        trace = f"{rng.getrandbits(128) | 1:032x}"
        app.serve(trace, "", rng.choice(entry), T0_NS + t * 1e9, load)
    table = app.spans.table() if not hard else _roughen(app.spans, hardships, random.Random(seed * 7919 + 2))
    return Case(
        seed,
        table,
        T0_NS + int(baseline_s * 1e9),
        fault,
        tuple(s.name for s in services),
        round(baseline_s, 1),
        round(fault_s, 1),
        with_status,
        hardships,
    )


def _active(fault: Fault, hardships: Hardships, t: float, baseline_s: float) -> list[tuple[Fault, float]]:
    active = [(fault, 1.0)] if t >= baseline_s else []
    if hardships.previous is not None and t < hardships.previous_tail_s:
        active.append((hardships.previous, 1 - t / hardships.previous_tail_s))
    return active


def _roughen(spans: _Spans, hardships: Hardships, rng: random.Random) -> SpanTable:
    """The spans with a share dropped (never a trace's root: the trace's start decides its window) and each
    service's clock skewed."""
    c = spans.cols
    skew = {s: rng.uniform(-1, 1) * hardships.skew_ms * _MS for s in sorted(set(c["service"]))}
    keep = [not parent or rng.random() >= hardships.drop_share for parent in c["parent_id"]]
    out = {k: [v for v, kept in zip(values, keep) if kept] for k, values in c.items()}
    for key in ("start_ns", "end_ns"):
        out[key] = [int(v + skew[s]) for v, s in zip(out[key], out["service"])]
    if hardships.id_names:  # the request's id in the path, e.g. GET /svc-07/items/40913 (the caller's too)
        raw = set(hardships.id_names)
        out["name"] = [
            f"{name}/{int(trace[:8], 16) % 100_000}" if name in raw else name
            for name, trace in zip(out["name"], out["trace_id"])
        ]
    return SpanTable.from_columns(**out)


def write_otlp(case: Case, path: Path) -> None:
    """The case as OTLP JSON lines (one ``resourceSpans`` export per service per line), which
    ``drill traces analyze`` reads."""
    table = case.table
    by_service: dict[int, list[int]] = {}
    for row, code in enumerate(table.service.tolist()):
        by_service.setdefault(code, []).append(row)
    with path.open("w") as fh:
        for code, rows in by_service.items():
            spans = [_otlp_span(table, row) for row in rows]
            resource = {"attributes": [{"key": "service.name", "value": {"stringValue": table.services[code]}}]}
            record = {
                "resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {"name": "corpus"}, "spans": spans}]}]
            }
            fh.write(json.dumps(record) + "\n")


def _otlp_span(table: SpanTable, row: int) -> dict:
    attributes = [{"key": k, "value": _otlp_value(v)} for k, v in table.attributes[row].items()]
    span = {
        "traceId": table.trace_id[row],
        "spanId": table.span_id[row],
        "parentSpanId": table.parent_id[row],
        "name": table.names[table.name[row]],
        "kind": int(table.kind[row]),
        "startTimeUnixNano": str(int(table.start_ns[row])),
        "endTimeUnixNano": str(int(table.end_ns[row])),
        "attributes": attributes,
    }
    if table.status[row]:
        span["status"] = {"code": int(table.status[row]), "message": table.status_message[row] or ""}
    return span


def _otlp_value(value: object) -> dict:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=KINDS)
    parser.add_argument("--out", type=Path, required=True, help="OTLP JSON lines file to write")
    parser.add_argument("--hard", action="store_true", help="a hard case (see Hardships)")
    args = parser.parse_args()
    case = make_case(args.seed, args.kind, hard=args.hard)
    write_otlp(case, args.out)
    injection = case.injection_ns / 1e9
    print(
        f"{args.out}: {len(case.table):,} spans, {len(case.services)} services; fault {case.fault.kind} on "
        f"{case.truth}; baseline {case.baseline_s:g} s, fault window {case.fault_s:g} s\n"
        f"  drill traces analyze {args.out} --baseline-until {injection:.3f}"
    )


if __name__ == "__main__":
    main()
