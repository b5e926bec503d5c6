"""The embedded router's own added latency per request during the main drill's flood, and requests/s per router core.

Run::

    .venv/bin/python bench/router_overhead.py                      # drills/unbounded-queue.yaml at --time-scale 0.3
    .venv/bin/python bench/router_overhead.py --time-scale 1       # the drill's full scale (about 7 minutes)
    .venv/bin/python bench/router_overhead.py --set target.config.engine.max_num_queued_reqs=16
    .venv/bin/python bench/router_overhead.py --run-dir reports/unbounded-queue/<stamp>   # an existing run's spans

It runs the drill (``drill run``, a real embedded stack: two replicas behind the router, Locust's open-loop load, the
queue flood at 12x the arrival rate) and, while it runs, samples the router process's CPU time (psutil) once every
``--sample`` seconds. Afterwards it reads the run directory's spans with :mod:`drill.traces.overhead` (what the report's
"router overhead" table shows) and prints, for the requests the router read during the flood (the fault's injection
to its revert, from the journal) and during the baseline:

* **router-added TTFT** (ms, p50/p95/p99): the router's share of the client's TTFT, from its SERVER span's start
  and the first chunk it wrote to the client, against the replica's ``llm_request`` (arrival + TTFT);
* **router-added E2E** (ms, p50/p95/p99): the router SERVER span's duration minus the replica's ``llm_request``;
* **requests/s per router core**: requests the router read in the window over the router's CPU seconds in it (the
  ``attempts`` figure counts each upstream attempt, retries included);
* the router-added TTFT **leg by leg**: in the router before its upstream call, sent until the replica's
  ``llm_request`` starts, and from the replica's first token to the router's first chunk out.

``--synthetic`` instead starts the router process alone in front of two upstreams on the stack's HTTP server that
stream ``--tokens`` events ``--gap`` seconds apart (spans exported to a sink), drives it with ``--clients`` streaming
clients for ``--duration`` seconds and prints the router's CPU per stream.

Figures on a shared 2-core machine depend on the load of the moment: ``uptime``'s load average is printed with them.
Both the router and the replicas run on the same cores, so what the router adds includes the time the OS gave other
processes while a request's bytes waited in the router.

Measured 2026-12-02 on the shared 2-vCPU VM in one session: the httpx router (commit 27c8f77; ``--synthetic`` runs it
with ``PYTHONPATH`` set to a checkout of that commit) against the stack's own client on uvloop, with spans exported
by the SDK's thread and then from the router's loop (two runs)::

                                                 httpx, asyncio         own client, uvloop  and spans from the loop
    --synthetic: CPU per stream of 1 / 30 events  4.37 / 11.88 ms        0.29 / 0.76 ms      0.38 / 0.81 ms
    flood: router-added TTFT p50 / p95 / p99      344 / 6,344 / 6,762    16 / 74 / 146       14 / 42 / 65, 12 / 28 / 38
    flood: router-added E2E p50 / p95 / p99       1,018 / 6,055 / 6,624  23 / 251 / 408      17 / 50 / 74, 14 / 39 / 75
    flood: requests per router CPU second         233                    659                 602, 676
    load average (1 min) at the end               9.0                    6.3                 1.4, 1.4

The drill runs were ``--time-scale 0.3``, the drill as written (milliseconds); docs/reference-stack.md ("The router's
relay") has the leg-by-leg figures and what they say.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from drill.rundir.evidence import RunEvidence  # noqa: E402  (the repository root is on the path only now)
from drill.stack.http.server import HttpRequest, HttpResponse, HttpServer, ResponseStream, Router  # noqa: E402
from drill.stats import percentiles  # noqa: E402
from drill.traces.overhead import FIRST_CHUNK_ATTRIBUTE, ROUTER_SERVICE, RouterHop, router_hops  # noqa: E402
from drill.traces.run_traces import run_traces  # noqa: E402
from drill.traces.table import kind_code  # noqa: E402

DRILL = REPO / "drills" / "unbounded-queue.yaml"
ROUTER_MODULE = "drill.stack.router.gateway"
RUN_DIR_LINE = re.compile(r"^run directory: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class CpuSample:
    """The router's CPU seconds (user + system) at a UNIX time."""

    ts: float
    cpu_s: float


class RouterCpu:
    """Samples the CPU time of every router process under ``root`` (the ``drill run`` process) in a thread."""

    def __init__(self, root: int, every_s: float) -> None:
        self.root, self.every_s = root, every_s
        self.samples: list[CpuSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        router: psutil.Process | None = None
        while not self._stop.wait(self.every_s):
            try:
                router = router if router is not None and router.is_running() else self._find()
                if router is not None:
                    cpu = router.cpu_times()
                    self.samples.append(CpuSample(time.time(), cpu.user + cpu.system))
            except psutil.Error:
                router = None

    def _find(self) -> psutil.Process | None:
        try:
            children = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return None
        for child in children:
            try:
                if ROUTER_MODULE in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                continue
        return None

    def seconds_between(self, start: float, end: float) -> float | None:
        """CPU seconds the router used from ``start`` to ``end`` (the nearest samples inside), or None."""
        inside = [s for s in self.samples if start <= s.ts <= end]
        if len(inside) < 2:
            return None
        return (inside[-1].cpu_s - inside[0].cpu_s) * (end - start) / (inside[-1].ts - inside[0].ts)


def run_drill(args: argparse.Namespace, out: Path) -> tuple[Path, RouterCpu]:
    """``drill run`` the drill under ``out``; its run directory and the router's CPU samples."""
    command = [sys.executable, "-m", "drill", "run", str(args.drill), "--time-scale", str(args.time_scale),
               "--out", str(out), "--no-progress"]  # fmt: skip
    for item in args.set:
        command += ["--set", item]
    print("running:", " ".join(command[2:]), flush=True)
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cpu = RouterCpu(child.pid, args.sample)
    cpu.start()
    output, _ = child.communicate()
    cpu.stop()
    found = RUN_DIR_LINE.search(output)
    if found is None:
        sys.exit(f"drill run exited {child.returncode} without a run directory:\n{output[-2000:]}")
    run_dir = Path(found.group(1).strip())
    return (run_dir if run_dir.is_absolute() else REPO / run_dir), cpu


def _fmt(values: list[float]) -> str:
    if not values:
        return "no samples"
    p = percentiles(values, (50.0, 95.0, 99.0))
    return f"p50 {p['p50']:8.2f}   p95 {p['p95']:8.2f}   p99 {p['p99']:8.2f}   ({len(values)} requests)"


def _router_counts(evidence: RunEvidence, start: float, end: float) -> tuple[int, int]:
    """Requests the router read (SERVER spans) and upstream attempts it sent (CLIENT spans) from start to end."""
    table = run_traces(evidence).table
    service = table.service_code(ROUTER_SERVICE)
    if service is None:
        return 0, 0
    starts = table.start_ns / 1e9
    inside = (table.service == service) & (starts >= start) & (starts < end)
    return int((inside & (table.kind == kind_code("SERVER"))).sum()), int(
        (inside & (table.kind == kind_code("CLIENT"))).sum()
    )


@dataclass(frozen=True)
class Legs:
    """Where one request's router-added TTFT went (ms), from the spans of its last attempt."""

    before_upstream: float  # router SERVER start -> its last attempt's CLIENT start: the router alone
    to_replica: float  # CLIENT start -> the replica's llm_request start: send, Toxiproxy, the replica's accept
    first_token_back: float  # the replica's first token -> the router's first chunk out: replica write, relay


def legs_by_trace(evidence: RunEvidence) -> dict[str, Legs]:
    """Each streamed request's TTFT legs, keyed by trace id."""
    table = run_traces(evidence).table
    service = table.service_code(ROUTER_SERVICE)
    llm_code = table.name_code("llm_request")
    if service is None or llm_code is None:
        return {}
    server, client, llm = {}, {}, {}
    for row in np.argsort(table.start_ns, kind="stable").tolist():
        trace = table.trace_id[row]
        if table.service[row] == service and table.kind[row] == kind_code("SERVER"):
            server.setdefault(trace, row)
        elif table.service[row] == service and table.kind[row] == kind_code("CLIENT"):
            client[trace] = row
        elif table.name[row] == llm_code:
            llm[trace] = row
    legs = {}
    for trace, s_row in server.items():
        c_row, l_row = client.get(trace), llm.get(trace)
        if c_row is None or l_row is None:
            continue
        first_chunk = table.attributes[c_row].get(FIRST_CHUNK_ATTRIBUTE)
        ttft = table.attributes[l_row].get("gen_ai.latency.time_to_first_token")
        if not isinstance(first_chunk, int) or not isinstance(ttft, (int, float)):
            continue
        l_start = int(table.start_ns[l_row])
        legs[trace] = Legs(
            before_upstream=(int(table.start_ns[c_row]) - int(table.start_ns[s_row])) / 1e6,
            to_replica=(l_start - int(table.start_ns[c_row])) / 1e6,
            first_token_back=(first_chunk - l_start - int(round(float(ttft) * 1e9))) / 1e6,
        )
    return legs


def report_window(
    label: str,
    evidence: RunEvidence,
    hops: list[RouterHop],
    legs_of: dict[str, Legs],
    window: tuple[float, float],
    cpu: RouterCpu | None,
) -> None:
    start, end = window
    inside = [h for h in hops if start <= h.start_ns / 1e9 < end]
    print(f"\n{label}: {end - start:.1f} s")
    print(f"  router-added TTFT (ms)  {_fmt([h.added_ttft_ms for h in inside if h.added_ttft_ms is not None])}")
    print(f"  router-added E2E  (ms)  {_fmt([h.added_e2e_ms for h in inside])}")
    legs = [legs_of[h.trace_id] for h in inside if h.trace_id in legs_of]
    print("  router-added TTFT, leg by leg (ms):")
    print(f"    in the router before its upstream call  {_fmt([leg.before_upstream for leg in legs])}")
    print(f"    sent to the replica's llm_request       {_fmt([leg.to_replica for leg in legs])}")
    print(f"    replica's first token to the client     {_fmt([leg.first_token_back for leg in legs])}")
    requests, attempts = _router_counts(evidence, start, end)
    cpu_s = cpu.seconds_between(start, end) if cpu is not None else None
    if cpu_s:
        print(
            f"  router CPU {cpu_s:.1f} s ({cpu_s / (end - start):.2f} cores): {requests / cpu_s:.0f} requests/s and "
            f"{attempts / cpu_s:.0f} attempts/s per router core ({requests} requests, {attempts} attempts)"
        )
    else:
        print(f"  router CPU not sampled ({requests} requests, {attempts} attempts)")


# -- --synthetic: the router alone, in front of upstreams that stream at once ------------------------------------
#: One SSE event as the stack's replica writes a completion token.
TOKEN_EVENT = (
    b'data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"llama-3-8b",'
    b'"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]}\n\n'
)


class Upstreams:
    """Two upstreams on the stack's HTTP server streaming ``tokens`` events ``gap_s`` apart, and an OTLP sink."""

    def __init__(self, tokens: int, gap_s: float) -> None:
        self.tokens, self.gap_s = tokens, gap_s
        router = Router()
        router.add("POST", "/v1/completions", self._stream)
        router.add("GET", "/health", self._ok)
        sink = Router()
        sink.add("POST", "/v1/traces", self._ok)
        self.replicas = [HttpServer(router), HttpServer(router)]
        self.sink = HttpServer(sink)

    async def start(self) -> None:
        for server in (*self.replicas, self.sink):
            await server.start()

    async def close(self) -> None:
        for server in (*self.replicas, self.sink):
            await server.close()

    async def _ok(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        return HttpResponse(200, b"", "text/plain")

    async def _stream(self, request: HttpRequest, stream: ResponseStream) -> None:
        stream.start(200, "text/event-stream; charset=utf-8", (("X-Request-Id", "bench"),))
        for _ in range(self.tokens):
            await asyncio.sleep(self.gap_s)
            if not stream.write(TOKEN_EVENT):
                return
        stream.write(b"data: [DONE]\n\n")
        stream.end()


async def _stream_client(port: int, stop_at: float, done: list[float]) -> None:
    """One client: a streamed completion at a time on a keep-alive connection; records each one's duration."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "llama-3-8b", "prompt": "hello", "max_tokens": 16, "stream": True}).encode()
    request = b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    request += b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    try:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            writer.write(request)
            await reader.readuntil(b"\r\n\r\n")
            while size := int((await reader.readline()).strip(), 16):
                await reader.readexactly(size + 2)
            await reader.readexactly(2)
            done.append(time.perf_counter() - started)
    finally:
        writer.close()


async def synthetic(args: argparse.Namespace) -> None:
    """The router process in front of :class:`Upstreams`, driven by ``--clients`` streaming clients."""
    upstreams = Upstreams(args.tokens, args.gap)
    await upstreams.start()
    folder = Path(tempfile.mkdtemp(prefix="router-bench-"))
    launch = {
        "replicas": [
            {"name": f"drill-replica-{i}", "index": i, "url": s.url} for i, s in enumerate(upstreams.replicas)
        ],
        "admin_token": "bench-token-0000",
        "otlp_endpoint": upstreams.sink.url,
        "ready_file": str(folder / "ready.json"),
    }
    (folder / "launch.json").write_text(json.dumps(launch), encoding="utf-8")
    command = [sys.executable, "-m", "drill.stack.router.gateway", "--launch", str(folder / "launch.json")]
    # run from the temporary folder: PYTHONPATH (another checkout) or the installed package decides which router runs
    router = subprocess.Popen(command, cwd=folder, stderr=subprocess.DEVNULL)
    try:
        while not (folder / "ready.json").exists():
            await asyncio.sleep(0.05)
        port = json.loads((folder / "ready.json").read_text(encoding="utf-8"))["port"]
        process = psutil.Process(router.pid)
        before = sum(process.cpu_times()[:2])
        done: list[float] = []
        stop_at = time.monotonic() + args.duration
        await asyncio.gather(*(_stream_client(port, stop_at, done) for _ in range(args.clients)))
        cpu_s = sum(process.cpu_times()[:2]) - before
    finally:
        router.send_signal(signal.SIGTERM)
        router.wait()
        await upstreams.close()
    print(f"router: {' '.join(command[1:3])} ({os.environ.get('PYTHONPATH') or 'this checkout'})")
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{len(done)} streams of {args.tokens} events in {args.duration:g} s from {args.clients} clients; router CPU "
        f"{cpu_s:.2f} s: {len(done) / cpu_s:.0f} streams/s per router core, {cpu_s / len(done) * 1e3:.2f} ms CPU each"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drill", type=Path, default=DRILL, help="drill file (default: drills/unbounded-queue.yaml)")
    parser.add_argument("--time-scale", type=float, default=0.3, help="drill run --time-scale (default 0.3)")
    parser.add_argument("--set", action="append", default=[], help="passed to drill run --set (repeatable)")
    parser.add_argument("--sample", type=float, default=0.5, help="router CPU sampling interval, s (default 0.5)")
    parser.add_argument("--run-dir", type=Path, help="read this run directory's spans instead of running the drill")
    parser.add_argument("--synthetic", action="store_true", help="the router alone in front of streaming upstreams")
    parser.add_argument("--clients", type=int, default=100, help="--synthetic: concurrent streaming clients")
    parser.add_argument("--tokens", type=int, default=30, help="--synthetic: events per stream (default 30)")
    parser.add_argument("--gap", type=float, default=0.02, help="--synthetic: seconds between events (default 0.02)")
    parser.add_argument("--duration", type=float, default=10.0, help="--synthetic: seconds of load (default 10)")
    args = parser.parse_args(argv)
    if args.synthetic:
        asyncio.run(synthetic(args))
        return 0
    cpu: RouterCpu | None = None
    if args.run_dir is not None:
        run_dir = args.run_dir
    else:
        run_dir, cpu = run_drill(args, Path(tempfile.mkdtemp(prefix="router-overhead-")))
    print(f"run directory: {run_dir}\nload average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    evidence = RunEvidence(run_dir)
    hops = router_hops(run_traces(evidence).table)
    legs = legs_by_trace(evidence)
    if not hops:
        print("no request has both the router's span and a replica's llm_request: nothing to measure")
        return 1
    if "baseline" in evidence.phases:
        baseline = evidence.phases["baseline"]
        report_window("baseline", evidence, hops, legs, (baseline.start_ts, baseline.end_ts), cpu)
    flood = evidence.fault_window
    if flood is None:
        print("the run has no fault window")
        return 1
    report_window("flood (fault injected to reverted)", evidence, hops, legs, flood, cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
