"""Two minimal faults on real mechanisms, for engine tests before the fault library existed.

They use only :mod:`drill.api`, like any plugin.
"""

from __future__ import annotations

from drill.api import Fault, FaultContext, FaultNotLanded, FaultParams, LandingProof


class ToxicLatencyParams(FaultParams):
    proxy: str
    latency_ms: int = 100


class ToxicLatency(Fault):
    """Adds a latency toxic to a named Toxiproxy proxy."""

    kind = "test_toxic_latency"
    Params = ToxicLatencyParams
    scope = "none"
    summary = "latency toxic on a named proxy (test plugin)"

    def _name(self, ctx: FaultContext) -> str:
        return f"drill-{ctx.fault_id}"

    def inject(self, ctx: FaultContext) -> None:
        ctx.toxiproxy.add_toxic(self.params.proxy, "latency", {"latency": self.params.latency_ms}, name=self._name(ctx))

    def verify(self, ctx: FaultContext) -> LandingProof:
        names = [t.name for t in ctx.toxiproxy.toxics(self.params.proxy)]
        if self._name(ctx) not in names:
            raise FaultNotLanded(f"toxic {self._name(ctx)} is not on proxy {self.params.proxy}")
        return LandingProof(summary=f"toxic {self._name(ctx)} listed on {self.params.proxy}")

    def revert(self, ctx: FaultContext) -> None:
        ctx.toxiproxy.delete_toxic(self.params.proxy, self._name(ctx), missing_ok=True)


class DockerPauseParams(FaultParams):
    container: str


class DockerPause(Fault):
    """Pauses a named Docker container."""

    kind = "test_docker_pause"
    Params = DockerPauseParams
    scope = "none"
    summary = "docker pause of a named container (test plugin)"

    def inject(self, ctx: FaultContext) -> None:
        ctx.docker.pause(self.params.container)

    def verify(self, ctx: FaultContext) -> LandingProof:
        state = ctx.docker.info(self.params.container).state
        if str(state) != "paused":
            raise FaultNotLanded(f"container {self.params.container} is {state}, not paused")
        return LandingProof(summary=f"container {self.params.container} paused")

    def revert(self, ctx: FaultContext) -> None:
        if str(ctx.docker.info(self.params.container).state) == "paused":
            ctx.docker.unpause(self.params.container)


class RaisingRevert(Fault):
    """Injects nothing and fails to revert: for testing exit code 4."""

    kind = "test_raising_revert"
    Params = FaultParams
    scope = "none"

    def inject(self, ctx: FaultContext) -> None:
        pass

    def verify(self, ctx: FaultContext) -> LandingProof:
        return LandingProof(summary="nothing to see")

    def revert(self, ctx: FaultContext) -> None:
        raise RuntimeError("revert failed on purpose")
