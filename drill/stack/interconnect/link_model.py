"""Predicted slowdown of one engine step when a Toxiproxy toxic sits on one TP or PP link.

The prediction follows what :mod:`drill.stack.interconnect.tcp` puts on the wire (its module
docstring states the rules) and what Toxiproxy does to it (docs/dependencies.md §2.3): a
``latency`` toxic delays every chunk by ``latency`` ms from its arrival (stream gaps are kept),
a ``bandwidth`` toxic delays ``n`` bytes by ``n / rate`` ms with ``rate`` in KB/s (1 KB = 1000
bytes). So:

* TP: every round is a round trip, so per round ``latency`` for each toxic direction, plus
  ``bytes / rate`` for the bytes crossing the capped direction (rank 0 → rank i carries an
  8-byte header and the payload; the answer carries the payload).
* PP: micro-batches (``pp_transfers / (pp - 1)``) are pipelined, so ``latency`` counts once per
  step and direction; a cap serialises all micro-batches' bytes (activations going down,
  sampled tokens coming back).

Tests compare measured TPOT increases to :func:`predict_step_increase`.
"""

from __future__ import annotations

from dataclasses import dataclass

from drill.api import LinkKind
from drill.backends.toxiproxy import Stream
from drill.stack.interconnect.rank import HEADER
from drill.stack.interconnect.step_exchange import ExchangePlan
from drill.stack.interconnect.tcp import DEFAULT_BYTE_SCALE, PP_REPLY_BYTES, micro_batches, scaled_bytes

__all__ = ["LinkToxic", "predict_step_increase"]


@dataclass(frozen=True)
class LinkToxic:
    """Toxics on one link: added ``latency_ms`` and/or a ``bandwidth_kbps`` cap (KB/s, 1 KB = 1000 B),
    applied to the listed ``streams`` (``upstream`` = towards the rank/next stage)."""

    kind: LinkKind
    latency_ms: float = 0.0
    bandwidth_kbps: float | None = None
    streams: frozenset[Stream] = frozenset({Stream.DOWNSTREAM})


def _cap_seconds(nbytes: int, bandwidth_kbps: float | None) -> float:
    return nbytes / (bandwidth_kbps * 1000.0) if bandwidth_kbps else 0.0


def _tp_increase(plan: ExchangePlan, toxic: LinkToxic, byte_scale: float) -> float:
    payload = scaled_bytes(plan.tp_bytes_per_round, byte_scale)
    wire = {Stream.UPSTREAM: HEADER.size + payload, Stream.DOWNSTREAM: payload}
    per_round = sum(toxic.latency_ms / 1000.0 + _cap_seconds(wire[s], toxic.bandwidth_kbps) for s in toxic.streams)
    return plan.tp_rounds * per_round


def _pp_increase(plan: ExchangePlan, toxic: LinkToxic, byte_scale: float, pp: int) -> float:
    batches = micro_batches(plan.pp_transfers, pp - 1)
    if batches == 0:
        return 0.0
    payload = scaled_bytes(plan.pp_bytes_per_transfer, byte_scale)
    wire = {Stream.UPSTREAM: batches * (HEADER.size + payload), Stream.DOWNSTREAM: batches * PP_REPLY_BYTES}
    return sum(toxic.latency_ms / 1000.0 + _cap_seconds(wire[s], toxic.bandwidth_kbps) for s in toxic.streams)


def predict_step_increase(
    plan: ExchangePlan, toxic: LinkToxic, *, byte_scale: float = DEFAULT_BYTE_SCALE, pp: int = 2
) -> float:
    """Seconds one engine step with ``plan`` grows when ``toxic`` is on one link of its kind.

    ``byte_scale`` must be the replica's (``links.byte_scale``) and ``pp`` its
    pipeline_parallel_size. Returns 0.0 when the plan does not use that kind of link.
    """
    if toxic.kind is LinkKind.TP:
        return _tp_increase(plan, toxic, byte_scale)
    return _pp_increase(plan, toxic, byte_scale, pp)
