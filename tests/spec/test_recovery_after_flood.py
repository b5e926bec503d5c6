"""What keeps a flood drill's ``recovered: PASS`` independent of how fast the machine serves (issue 22).

With abandoned work aborted (``abort_abandoned: true``, vLLM's behaviour) no attempt of a flood stays on a replica
longer than somebody waits for it: the router gives up on an attempt whose answer has not begun within its upstream
timeout ``T`` (504), closes its upstream, and the replica aborts it wherever it is; an attempt whose stream has begun
is no longer the router's to time out (its timeout bounds the wait for the head), so it lasts until it ends or until
its client's own timeout, when the client closes it and the replica aborts it. An attempt therefore lasts at most
``min(T, client timeout)`` unstreamed and the client's timeout streamed. But a client that
retries (a 504, its own timeout) sends the flood's excess again: with ``attempts`` retries and their backoffs
``b1, b2, ...`` (capped at ``max_backoff``), the flood's last request and its retries are over
``(attempts + 1) * attempt bound + sum(b)`` after the flood ends — on a quiet machine most of the flood is served and
few retries follow, on a loaded one most of it times out and the retries carry the overload on. So a drill that
predicts a flood's overload is left to wait (``fast_failure: FAIL``: requests queue until the router's timeout) and
its recovery phase error-free must (1) abort abandoned work and (2) at its default scale, leave that echo between
the flood's end and the recovery phase. Then the backlog is gone when recovery is judged however slowly the machine
serves the flood; without (2) the verdict depends on the machine's speed, which is what made ``recovered`` FAIL on a
loaded machine (measured: 115 of the 121 failures of a recovery phase 7 s after a short flood were the flood's
retries; and with the echo counted at the router's 30 s alone, the flagship's default run at load average 14-16
still held about 550 of the flood's streamed retries per replica when its recovery phase began 95 s after the
flood — streams begun within 30 s and cut by their clients at 60 s — and 28 batch requests of the recovery phase
timed out behind them; docs/drill-files.md, "Predictions at every scale"). Static: no run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drill.runner.timeline import plan_timeline
from drill.spec.loader import LoadedDrill, load_drill
from drill.spec.scenario import Pool
from drill.stack.config import StackConfig
from tests.vllm import catalogue

REPO = Path(__file__).resolve().parents[2]
FLOOD_DRILLS = sorted(p for p in (REPO / "drills").glob("*.yaml") if "queue_flood" in p.read_text())


def _recovery_checks_predicted_to_pass(loaded: LoadedDrill) -> list[str]:
    drill = loaded.drill
    names = [
        check.name or check.kind
        for check in drill.checks
        if check.kind == "error_rate" and check.params.get("phase") == "recovery"
    ]
    return [name for name in names if (drill.predicts or {}).get(name) == "PASS"]


def flood_to_recovery_gap_s(loaded: LoadedDrill) -> float:
    """Seconds from the last queue flood's end to the recovery phase's start."""
    timeline = plan_timeline(loaded)
    recovery = next(slot for slot in timeline.phases if slot.phase.value == "recovery")
    flood_end = max(
        timeline.fault_phase_start_s + window.end_s for window in timeline.faults if window.kind == "queue_flood"
    )
    return recovery.start_s - flood_end


def attempt_bound_s(pool: Pool, router_timeout_s: float | None) -> float:
    """The longest one attempt of ``pool`` can stay on the stack: the router's timeout while its answer has not
    begun; once a stream has begun, until the client's own timeout. Never longer than the client waits (no router:
    ``None``)."""
    if pool.stream or router_timeout_s is None:
        return pool.timeout
    return min(router_timeout_s, pool.timeout)


def retry_echo_s(loaded: LoadedDrill, router_timeout_s: float | None) -> float:
    """How long after a flood its last attempt can still be on the stack: the longest an attempt lasts, for the first
    attempt and each retry, plus the retries' longest backoffs, for the pool the flood sends to that echoes longest."""
    flooded = {
        pool for fault in loaded.drill.faults if fault.kind == "queue_flood" for pool in fault.selector.pools or ()
    }
    echoes = [router_timeout_s or 0.0]
    for pool in loaded.scenario.pools:
        if flooded and pool.name not in flooded:
            continue
        policy = pool.retry
        attempts = 0 if policy is None else policy.attempts
        backoffs = (
            0.0
            if policy is None
            else sum(min(policy.max_backoff, policy.backoff * policy.multiplier**n) for n in range(attempts))
        )
        echoes.append((attempts + 1) * attempt_bound_s(pool, router_timeout_s) + backoffs)
    return max(echoes)


def test_the_flagship_is_a_flood_drill_that_predicts_recovery() -> None:
    loaded = load_drill(REPO / "drills/unbounded-queue.yaml")
    assert _recovery_checks_predicted_to_pass(loaded) == ["recovered"]


@pytest.mark.parametrize("path", FLOOD_DRILLS, ids=[p.stem for p in FLOOD_DRILLS])
def test_a_flood_drill_predicting_recovery_leaves_the_router_timeout_for_the_backlog(path: Path) -> None:
    loaded = load_drill(path)
    left_to_wait = (loaded.drill.predicts or {}).get("fast_failure") == "FAIL"
    if loaded.drill.target.kind != "embedded" or not left_to_wait or not _recovery_checks_predicted_to_pass(loaded):
        pytest.skip("predicts no flood left to wait on the embedded stack followed by an error-free recovery")
    config = StackConfig.model_validate(loaded.drill.target.config)
    assert config.abort_abandoned, "the backlog is bounded by the router's timeout only when abandoned work is aborted"
    gap, echo = flood_to_recovery_gap_s(loaded), retry_echo_s(loaded, config.router.retries.timeout)
    assert gap >= echo, f"{gap:g} s from the flood's end to recovery, less than its retries' echo ({echo:g} s)"


def test_the_rule_sees_a_fault_phase_too_short_for_the_backlog() -> None:
    """The flagship with its fault phase cut to end 20 s after the flood (less than the router's 30 s) breaks it."""
    loaded = load_drill(REPO / "drills/unbounded-queue.yaml", overrides=["phases.fault=95s"])
    assert flood_to_recovery_gap_s(loaded) == pytest.approx(20.0)
    assert (
        flood_to_recovery_gap_s(loaded) < StackConfig.model_validate(loaded.drill.target.config).router.retries.timeout
    )


def test_the_flagship_fitted_to_vllm_leaves_its_pools_timeouts_for_the_backlog(tmp_path: Path) -> None:
    """vLLM (no router, no retries) aborts what a client left; the flood's last request waits its pool's timeout."""
    path = tmp_path / "unbounded-queue-vllm.yaml"
    path.write_text(yaml.safe_dump(catalogue.unbounded_queue("http://127.0.0.1:9", 4317)), encoding="utf-8")
    loaded = load_drill(path)
    gap, echo = flood_to_recovery_gap_s(loaded), retry_echo_s(loaded, router_timeout_s=None)
    assert echo == 10.0  # the batch pool's timeout
    assert gap >= echo, f"{gap:g} s from the flood's end to recovery, less than its last request's wait ({echo:g} s)"
