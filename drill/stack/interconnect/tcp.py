"""The TP/PP interconnect of one replica: real processes, real TCP, real round trips.

Implements stack-contracts.md §8. The engine calls :func:`connect` once while it loads weights
(from the event loop's thread: the rank processes die with that thread's process), then
``await interconnect.exchange(plan)`` once per engine step, and adds the returned *excess*
seconds to the step: ``step = compute + modelled_comm + excess``.

What one step does on the wire (the same rules :mod:`drill.stack.interconnect.link_model` predicts from):

* **TP** — ``plan.tp_rounds`` sequential rounds (one per all-reduce). In each round rank 0 sends
  a message of ``scaled_bytes(plan.tp_bytes_per_round)`` to every TP rank and waits until each
  answers with as many bytes. A round is a real round trip, so link latency counts once per
  round for each direction it is applied to.
* **PP** — ``plan.pp_transfers`` stage-boundary crossings, i.e.
  ``m = micro_batches(pp_transfers, pp - 1)`` micro-batches (1 with the engine's cost model).
  Stage 0 sends each micro-batch's activation (``scaled_bytes(plan.pp_bytes_per_transfer)``) to
  stage 1 back to back; every stage stores and forwards the whole activation to the next; the
  last stage answers each micro-batch with :data:`PP_REPLY_BYTES` (the sampled tokens) that
  travel back to stage 0. Micro-batches are pipelined, so link latency counts once per step and
  direction, while a bandwidth cap serialises all micro-batches. The pipeline bubbles are
  compute, modelled by the engine's cost model.

Byte volumes are multiplied by ``byte_scale`` (default 1/1024; ``links.byte_scale`` in the stack
config) so that real volumes (a 64 MiB prefill all-reduce) do not swamp loopback Python; the
prediction uses the same factor, so the expected slowdown stays exact. The baseline (loopback
and proxy overhead, no toxic) is calibrated at start-up and subtracted: ``excess`` is what the
links add beyond it, never negative. The exchange thread and the rank processes run on one CPU with the
stack's Toxiproxy (:mod:`drill.stack.interconnect.affinity`): spread over CPUs, the clean links' cost
flips between regimes on its own and the baseline stops describing them.
"""

from __future__ import annotations

import asyncio
import functools
import math
import select
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from drill.api import LinkKind
from drill.errors import StackError
from drill.stack.interconnect.affinity import pin_to_link_cpu, pinned_preexec
from drill.stack.interconnect.rank import HEADER, RankLaunch, recv_exactly, split_address
from drill.stack.interconnect.step_exchange import ExchangePlan, NoopInterconnect
from drill.stack.launch import PeerLaunch
from drill.stack.lifeline import die_with_parent

__all__ = [
    "Baseline",
    "LinkError",
    "InterconnectLaunch",
    "PP_REPLY_BYTES",
    "TcpInterconnect",
    "connect",
    "micro_batches",
    "scaled_bytes",
]

PP_REPLY_BYTES = 16
MAX_MESSAGE_BYTES = 1 << 20  # per message; keeps send-then-receive free of buffer deadlocks
DEFAULT_BYTE_SCALE = 1 / 1024
_TP_CAL_SIZES = (0, 256, 4096, 65536)
_TP_CAL_RUN = 64
_CAL_GAP_S = 0.003


class InterconnectLaunch(BaseModel):
    """The links of one replica: its ``peers`` (as the launcher arranged them) and tunables.

    Built from a ``ReplicaLaunch`` by :func:`connect` (``byte_scale`` from ``links.byte_scale``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    links: tuple[PeerLaunch, ...] = ()
    byte_scale: float = DEFAULT_BYTE_SCALE
    calibration_samples: int = 9
    start_timeout_s: float = 20.0
    exchange_timeout_s: float = 30.0


class LinkError(StackError, ConnectionError):
    """A TP/PP link broke or stayed silent during a step; the engine dies as on a worker death."""


def micro_batches(pp_transfers: int, pp_links: int) -> int:
    """Micro-batches per step: ``pp_transfers`` stage-boundary crossings over ``pp_links`` links."""
    if pp_transfers <= 0 or pp_links <= 0:
        return 0
    return math.ceil(pp_transfers / pp_links)


def scaled_bytes(real_bytes: int, byte_scale: float) -> int:
    """Bytes actually sent for ``real_bytes``: ``ceil(real × scale)``, capped at 1 MiB."""
    if real_bytes <= 0:
        return 0
    return min(MAX_MESSAGE_BYTES, math.ceil(real_bytes * byte_scale))


@dataclass(frozen=True)
class Baseline:
    """Calibrated cost of the links without toxics, in seconds.

    TP round of ``b`` scaled bytes: ``tp_round_s + tp_byte_s × b``. PP step of ``m``
    micro-batches of ``b`` bytes: ``pp_step_s + m × (pp_transfer_s + pp_byte_s × b)``.
    """

    tp_round_s: float = 0.0
    tp_byte_s: float = 0.0
    pp_step_s: float = 0.0
    pp_transfer_s: float = 0.0
    pp_byte_s: float = 0.0

    def seconds(self, tp_rounds: int, tp_bytes: int, pp_transfers: int, pp_bytes: int) -> float:
        """Expected clean-link time of one step's exchange (scaled byte counts)."""
        tp = tp_rounds * (self.tp_round_s + self.tp_byte_s * tp_bytes) if tp_rounds else 0.0
        pp = self.pp_step_s + pp_transfers * (self.pp_transfer_s + self.pp_byte_s * pp_bytes) if pp_transfers else 0.0
        return tp + pp


class TcpInterconnect:
    """Rank 0's side of the links: sockets to the TP ranks and to PP stage 1.

    Built by :func:`connect`; every exchange runs in one dedicated thread with blocking
    sockets (lower and steadier latency than asyncio streams), one step at a time.
    """

    def __init__(
        self,
        launch: InterconnectLaunch,
        processes: list[subprocess.Popen[bytes]],
        tp_socks: list[socket.socket],
        pp_sock: socket.socket | None,
    ) -> None:
        """Called by :func:`connect` once the ranks listen and the sockets are dialled."""
        self.launch = launch
        self._processes = processes
        self._tp = tp_socks
        self._pp = pp_sock
        self._pp_links = sum(1 for link in launch.links if link.kind == LinkKind.PP.value)
        self._buffer = bytearray(MAX_MESSAGE_BYTES)
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="interconnect", initializer=pin_to_link_cpu
        )
        self.baseline = Baseline()

    async def exchange(self, plan: ExchangePlan) -> float:
        """Run one step's TP rounds and PP transfers for real; return the excess seconds.

        Raises StackError when a link breaks or stays silent past ``exchange_timeout_s``
        (as NCCL's watchdog would end the engine).
        """
        loop = asyncio.get_running_loop()
        tp_bytes = scaled_bytes(plan.tp_bytes_per_round, self.launch.byte_scale)
        pp_bytes = scaled_bytes(plan.pp_bytes_per_transfer, self.launch.byte_scale)
        batches = micro_batches(plan.pp_transfers, self._pp_links)
        measured = await loop.run_in_executor(self._executor, self._run, plan.tp_rounds, tp_bytes, batches, pp_bytes)
        expected = self.baseline.seconds(plan.tp_rounds, tp_bytes, batches, pp_bytes)
        return max(0.0, measured - expected)

    def _run(self, tp_rounds: int, tp_bytes: int, pp_transfers: int, pp_bytes: int) -> float:
        started = time.perf_counter()
        try:
            for _ in range(tp_rounds if self._tp else 0):
                self._tp_round(tp_bytes)
            if pp_transfers and self._pp is not None:
                self._pp_step(pp_transfers, pp_bytes)
        except (OSError, ConnectionError) as exc:
            raise LinkError(
                f"interconnect link failed during a step: {exc}",
                hint="a TP rank or PP stage died, or a toxic cut the link",
            ) from exc
        return time.perf_counter() - started

    def _tp_round(self, payload: int) -> None:
        message = HEADER.pack(payload, payload) + bytes(payload)
        for sock in self._tp:
            sock.sendall(message)
        for sock in self._tp:
            recv_exactly(sock, payload, self._buffer)

    def _pp_step(self, transfers: int, payload: int) -> None:
        assert self._pp is not None
        message = HEADER.pack(payload, PP_REPLY_BYTES) + bytes(payload)
        for _ in range(transfers):
            self._pp.sendall(message)
        recv_exactly(self._pp, transfers * PP_REPLY_BYTES, self._buffer)

    def calibrate(self) -> Baseline:
        """Measure the clean-link cost (median of ``calibration_samples``) and keep it.

        Called once by :func:`connect` before the first step; assumes no toxic is active. It measures
        in the exchange thread, on the CPU the steps' exchanges run on.
        """
        return self._executor.submit(self._calibrate).result()

    def _calibrate(self) -> Baseline:
        samples = self.launch.calibration_samples
        tp_round_s = tp_byte_s = 0.0
        if self._tp:  # rounds in runs, as steps make them: isolated rounds measure cheaper
            points = [
                (size, _median(functools.partial(self._run, _TP_CAL_RUN, size, 0, 0), samples) / _TP_CAL_RUN)
                for size in _TP_CAL_SIZES
            ]
            tp_byte_s, tp_round_s = _line(points)
        pp = (0.0, 0.0, 0.0)
        if self._pp is not None:
            t1 = _median(lambda: self._run(0, 0, 1, 0), samples)
            t4 = _median(lambda: self._run(0, 0, 4, 0), samples)
            t4b = _median(lambda: self._run(0, 0, 4, 65536), samples)
            per_transfer = max(0.0, (t4 - t1) / 3)
            pp = (max(0.0, t1 - per_transfer), per_transfer, max(0.0, (t4b - t4) / (4 * 65536)))
        self.baseline = Baseline(tp_round_s, tp_byte_s, *pp)
        return self.baseline

    async def close(self) -> None:
        """Close the links (the ranks exit on end of stream) and reap the rank processes."""
        for sock in [*self._tp, *([self._pp] if self._pp else [])]:
            sock.close()
        self._executor.shutdown(wait=False)
        await asyncio.to_thread(_reap, self._processes)


def _median(measure: Callable[[], float], samples: int) -> float:
    """Median of ``samples`` measurements, each after an idle gap like the one between steps
    (a link that just idled answers slower than one kept busy back to back)."""
    measure()  # warm-up
    values = []
    for _ in range(samples):
        time.sleep(_CAL_GAP_S)
        values.append(measure())
    return statistics.median(values)


def _line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares slope and intercept through ``(x, y)`` points, both clamped at >= 0."""
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    var = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0
    slope = max(0.0, slope)
    return slope, max(0.0, mean_y - slope * mean_x)


def _reap(processes: list[subprocess.Popen[bytes]], timeout_s: float = 2.0) -> None:
    for process in processes:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)


def _spawn_rank(link: PeerLaunch, next_connect: str | None) -> subprocess.Popen[bytes]:
    launch = RankLaunch(kind=LinkKind(link.kind), rank=link.rank, listen=link.listen, next_connect=next_connect)
    return subprocess.Popen(
        [sys.executable, "-m", "drill.stack.interconnect.rank", "--launch", launch.model_dump_json()],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        preexec_fn=pinned_preexec(die_with_parent()),
    )


def _wait_ready(process: subprocess.Popen[bytes], deadline: float, what: str) -> None:
    assert process.stdout is not None
    remaining = deadline - time.monotonic()
    readable, _, _ = select.select([process.stdout], [], [], max(0.0, remaining))
    line = process.stdout.readline() if readable else b""
    if line.strip() != b"ready":
        raise StackError(
            f"{what} did not start (exit code {process.poll()})", hint="see the replica's log for the rank's error"
        )


def _dial(address: str, timeout_s: float) -> socket.socket:
    sock = socket.create_connection(split_address(address), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _spawn_ranks(launch: InterconnectLaunch) -> tuple[list[PeerLaunch], list[subprocess.Popen[bytes]]]:
    """Start every rank process (TP ranks, then PP stages in order); called in the loop's thread."""
    pp_links = sorted((p for p in launch.links if p.kind == LinkKind.PP.value), key=lambda p: p.rank)
    tp_links = sorted((p for p in launch.links if p.kind == LinkKind.TP.value), key=lambda p: p.rank)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for link in tp_links:
            processes.append(_spawn_rank(link, None))
        for index, link in enumerate(pp_links):
            derived = pp_links[index + 1].connect if index + 1 < len(pp_links) else None
            processes.append(_spawn_rank(link, link.next_connect or derived))
    except BaseException:
        _kill(processes)
        raise
    return [*tp_links, *pp_links], processes


def _link_up(
    launch: InterconnectLaunch, links: list[PeerLaunch], processes: list[subprocess.Popen[bytes]]
) -> TcpInterconnect:
    """Wait until every rank listens, dial them, calibrate; kills the ranks on any failure."""
    try:
        deadline = time.monotonic() + launch.start_timeout_s
        for process, link in zip(processes, links):
            _wait_ready(process, deadline, f"{link.kind} rank {link.rank}")
        tp_socks = [_dial(p.connect, launch.start_timeout_s) for p in links if p.kind == LinkKind.TP.value]
        pp_first = next((p for p in links if p.kind == LinkKind.PP.value), None)
        pp_sock = _dial(pp_first.connect, launch.start_timeout_s) if pp_first else None
        for sock in [*tp_socks, *([pp_sock] if pp_sock else [])]:
            sock.settimeout(launch.exchange_timeout_s)
        interconnect = TcpInterconnect(launch, processes, tp_socks, pp_sock)
        interconnect.calibrate()
        return interconnect
    except BaseException:
        _kill(processes)
        raise


def _kill(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
    _reap(processes)


def _interconnect_launch(launch: object) -> InterconnectLaunch:
    if isinstance(launch, InterconnectLaunch):
        return launch
    links_config = getattr(getattr(launch, "config", None), "links", None)
    scale = getattr(links_config, "byte_scale", DEFAULT_BYTE_SCALE)
    return InterconnectLaunch(links=tuple(getattr(launch, "peers", ())), byte_scale=scale)


async def connect(launch: object) -> NoopInterconnect | TcpInterconnect:
    """Start this replica's TP ranks and PP stages, connect to them and calibrate the baseline.

    ``launch`` is the replica's ``ReplicaLaunch`` (its ``peers`` and ``config.links.byte_scale``) or
    an :class:`InterconnectLaunch`. Call it from the event loop's thread (rank processes die with
    it). Returns a :class:`NoopInterconnect` when there are no peers. Raises StackError when a
    rank does not start within ``start_timeout_s``.
    """
    links = _interconnect_launch(launch)
    if not links.links:
        return NoopInterconnect()
    ordered, processes = _spawn_ranks(links)  # here, in the loop's thread: pdeathsig binds to it
    return await asyncio.to_thread(_link_up, links, ordered, processes)
