"""What keeps a flood drill's ``recovered: PASS`` independent of how fast the machine serves (issue 22).

With abandoned work aborted (``abort_abandoned: true``, vLLM's behaviour) no attempt of a flood is still queued on a
replica longer than the router's upstream timeout ``T``: the router gives up on it then (504), closes its upstream,
and the replica aborts it wherever it is. But a client that retries a 504 sends the flood's excess again: with
``attempts`` retries and their backoffs ``b1, b2, ...`` (capped at ``max_backoff``), the flood's last request and
its retries are over ``(attempts + 1) * T + sum(b)`` after the flood ends — on a quiet machine most of the flood is
served and few retries follow, on a loaded one most of it times out and the retries carry the overload on. So a drill
that predicts a flood's overload is left to wait (``fast_failure: FAIL``: requests queue until the router's timeout)
and its recovery phase error-free must (1) abort abandoned work and (2) at its default scale, leave that echo between
the flood's end and the recovery phase. Then the backlog is gone when recovery is judged however slowly the machine
serves the flood; without (2) the verdict depends on the machine's speed, which is what made ``recovered`` FAIL on a
loaded machine (measured: 115 of the 121 failures of a recovery phase 7 s after a short flood were the flood's
retries; docs/drill-files.md, "Predictions at every scale"). Static: no run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.runner.timeline import plan_timeline
from drill.spec.loader import LoadedDrill, load_drill
from drill.stack.config import StackConfig

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


def retry_echo_s(loaded: LoadedDrill, timeout_s: float) -> float:
    """How long after a flood its last attempt can still be waiting: the router's timeout for the first attempt and
    each retry, plus the retries' longest backoffs, for the most retrying pool the flood sends to."""
    flooded = {
        pool for fault in loaded.drill.faults if fault.kind == "queue_flood" for pool in fault.selector.pools or ()
    }
    echoes = [0.0]
    for pool in loaded.scenario.pools:
        policy = pool.retry
        if flooded and pool.name not in flooded or policy is None:
            continue
        backoffs = sum(min(policy.max_backoff, policy.backoff * policy.multiplier**n) for n in range(policy.attempts))
        echoes.append(policy.attempts * timeout_s + backoffs)
    return timeout_s + max(echoes)


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
