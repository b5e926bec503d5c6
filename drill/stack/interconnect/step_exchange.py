"""The seam between the engine and the TP/PP interconnect (stack-contracts.md §8).

The engine (:mod:`drill.stack.inference.core`) calls :meth:`Interconnect.exchange` once per step with the
:class:`ExchangePlan` that the cost model computed for the step's batch
(:meth:`drill.stack.inference.cost_model.CostModel.exchange_plan`). The topology half implements the TCP
interconnect between rank processes in :mod:`drill.stack.interconnect.tcp` and returns it from
``drill.stack.interconnect.tcp.connect(launch)``; with tp = pp = 1 the engine uses
:class:`NoopInterconnect` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ExchangePlan", "Interconnect", "NoopInterconnect"]


@dataclass(frozen=True, slots=True)
class ExchangePlan:
    """One engine step's communication, as the cost model sees it.

    ``tp_rounds`` all-reduces of ``tp_bytes_per_round`` bytes each (2 per layer when
    tensor_parallel_size > 1, else 0) and ``pp_transfers`` stage-to-stage activation transfers of
    ``pp_bytes_per_transfer`` bytes each (pipeline_parallel_size − 1, else 0).
    """

    tp_rounds: int
    tp_bytes_per_round: int
    pp_transfers: int
    pp_bytes_per_transfer: int

    @property
    def empty(self) -> bool:
        """True when the step needs no communication (tp = pp = 1)."""
        return self.tp_rounds == 0 and self.pp_transfers == 0


@runtime_checkable
class Interconnect(Protocol):
    """What the engine needs from the links between its rank processes."""

    async def exchange(self, plan: ExchangePlan) -> float:
        """Run one engine step's communication for real; return the excess seconds over the calibrated baseline.

        Called by the engine once per step, before it sleeps out the step. The excess (added link
        latency, a bandwidth cap, a slow peer) is added to the modelled step time, so loopback's own
        overhead does not distort the model. Raises ``ConnectionError`` when a link is broken; the
        engine then dies as vLLM does when a worker dies.
        """
        ...

    async def close(self) -> None:
        """Stop the rank processes and close the links. Called once at shutdown; idempotent."""
        ...


class NoopInterconnect:
    """The interconnect of a single-GPU replica (tp = pp = 1): nothing to exchange, no excess."""

    async def exchange(self, plan: ExchangePlan) -> float:
        """Return 0.0 at once."""
        return 0.0

    async def close(self) -> None:
        """Nothing to close."""
