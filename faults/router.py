"""``router_retry_storm``: the router turns on naive retries — a configuration fault."""

from __future__ import annotations

from pydantic import Field

from drill.api import (
    AdminApiError,
    Capability,
    Duration,
    Fault,
    FaultContext,
    FaultNotLanded,
    FaultParams,
    LandingProof,
    Realism,
    RouterRetryOn,
    Saved,
)
from faults._toxics import refused

__all__ = ["RouterRetryStorm", "RouterRetryStormParams"]


class RouterRetryStormParams(FaultParams):
    attempts: int = Field(3, ge=1, le=10, description="extra tries after the first")
    retry_on: list[RouterRetryOn] = Field(
        [RouterRetryOn.ERROR, RouterRetryOn.TIMEOUT],
        min_length=1,
        description=("failures retried (YAML reads a bare key 'on' as true, hence the name)"),
    )
    attempt_timeout: Duration | None = Field(
        None,
        description=(
            "per-attempt timeout; a short one makes slow answers count as failures (default: keep the router's)"
        ),
    )
    idempotency: bool | None = Field(
        None,
        description=(
            "set the router's Idempotency-Key handling (default: keep it; false = every retry may duplicate work)"
        ),
    )


class RetryStormSaved(Saved):
    """The router settings the fault changes, as they were before."""

    attempts: int = 0
    retry_on: list[str] = Field(default_factory=list)
    timeout_s: float = 30.0
    idempotency: bool = False


class RouterRetryStorm(Fault):
    """The router retries failed and slow requests naively, for the fault's window.

    The way duplicate side effects happen in production: a gateway re-sends a request whose
    first attempt timed out — same body, same ``Idempotency-Key`` — to another replica, while
    the abandoned attempt may still be running and billed. Under overload it multiplies the
    load (a retry storm). ``attempts`` extra tries on the ``retry_on`` failures, each bounded by
    ``attempt_timeout``; ``idempotency`` optionally switches the router's Idempotency-Key store.
    Combine it with ``slow_replica`` or ``partition`` to see the storm.

    verify: ``GET /admin/config`` reports the retries (and idempotency) set.

    .. code-block:: yaml

        faults:
          - kind: router_retry_storm
            start: 0s
            duration: 60s
            params: {attempts: 3, retry_on: [error, timeout], attempt_timeout: 500ms, idempotency: false}
    """

    kind = "router_retry_storm"
    Params = RouterRetryStormParams
    params: RouterRetryStormParams
    Saved = RetryStormSaved
    needs = frozenset({Capability.ROUTER_ADMIN})
    realism = Realism.REAL
    scope = "none"
    summary = "the router's naive retries turned on (a configuration fault: duplicate side effects, storms)"
    revert_semantics = (
        "PATCHes back the retries and idempotency settings saved by prepare; idempotent. A router "
        "that refuses connections is not running (it restarts with its configured settings)."
    )

    def prepare(self, ctx: FaultContext) -> RetryStormSaved:
        config = ctx.router_admin().config()
        return RetryStormSaved(
            attempts=config.retries.attempts,
            retry_on=list(config.retries.on),
            timeout_s=config.retries.timeout,
            idempotency=config.idempotency,
        )

    def _patch(self) -> dict:
        p: RouterRetryStormParams = self.params
        retries: dict = {"attempts": p.attempts, "on": [o.value for o in p.retry_on]}
        if p.attempt_timeout is not None:
            retries["timeout"] = f"{p.attempt_timeout:g}s"
        patch: dict = {"retries": retries}
        if p.idempotency is not None:
            patch["idempotency"] = p.idempotency
        return patch

    def inject(self, ctx: FaultContext) -> None:
        ctx.router_admin().patch_config(self._patch())

    def verify(self, ctx: FaultContext) -> LandingProof:
        p: RouterRetryStormParams = self.params
        config = ctx.router_admin().config()
        wrong = []
        if config.retries.attempts != p.attempts or set(config.retries.on) != {o.value for o in p.retry_on}:
            wrong.append(f"retries {config.retries.attempts} on {list(config.retries.on)}")
        if p.attempt_timeout is not None and abs(config.retries.timeout - p.attempt_timeout) > 1e-6:
            wrong.append(f"attempt timeout {config.retries.timeout:g}s")
        if p.idempotency is not None and config.idempotency != p.idempotency:
            wrong.append(f"idempotency {config.idempotency}")
        if wrong:
            raise FaultNotLanded(f"the router reports {', '.join(wrong)}", fault=ctx.fault_id)
        return LandingProof(
            summary=f"router retries {config.retries.attempts} time(s) on "
            f"{', '.join(config.retries.on)} (attempt timeout {config.retries.timeout:g}s, "
            f"idempotency {config.idempotency})",
            observations={
                "attempts": config.retries.attempts,
                "timeout_s": config.retries.timeout,
                "idempotency": config.idempotency,
            },
        )

    def revert(self, ctx: FaultContext) -> None:
        saved = ctx.saved if isinstance(ctx.saved, RetryStormSaved) else RetryStormSaved()
        retries = {
            "attempts": saved.attempts,
            "on": saved.retry_on or ["error", "timeout"],
            "timeout": f"{saved.timeout_s:g}s",
        }
        try:
            ctx.router_admin().patch_config({"retries": retries, "idempotency": saved.idempotency})
        except AdminApiError as exc:
            if not refused(exc):
                raise  # a router that refuses connections is not running: its restart reads its own config
            ctx.note(f"router_retry_storm: {exc.message}; nothing to restore")
