"""A flooded pool predicted to wait, not fail, is not failed by the router first (issue 22).

A drill that floods a pool and predicts no 5xx for it in the fault phase (an ``error_rate`` check on that pool whose
classes include ``server_error``, predicted PASS) says the pool's excess waits its turn until its own client gives
up. On the embedded stack the router answers 504 when an upstream has not answered within its upstream timeout
(``router.retries.timeout``, 30 s by default, not scaled by ``--time-scale``): a timeout shorter than the pool's
client timeout turns that wait into 5xx once the backlog is longer than it, which a longer flood (the default scale)
reaches and a short one does not. A real proxy in front of a batch workload has its upstream timeout at least the
longest client timeout it serves. Measured: ``priority-isolation`` at its default scale, with the router at 30 s and
the batch clients at 300 s, failed 248 of 523 batch requests with 504 (docs/drill-files.md, "Predictions at every
scale"). Static: no run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.spec.loader import LoadedDrill, load_drill
from drill.stack.config import StackConfig

REPO = Path(__file__).resolve().parents[2]
FLOOD_DRILLS = sorted(p for p in (REPO / "drills").glob("*.yaml") if "queue_flood" in p.read_text())


def pools_predicted_not_failed(loaded: LoadedDrill) -> set[str]:
    """The flooded pools a fault-phase ``error_rate`` check predicted PASS holds to no ``server_error``."""
    drill = loaded.drill
    flooded = {pool for f in drill.faults if f.kind == "queue_flood" for pool in f.selector.pools or ()}
    flooded = flooded or {pool.name for pool in loaded.scenario.pools}
    predicts = drill.predicts or {}
    held: set[str] = set()
    for check in drill.checks:
        params = check.params
        classes = params.get("classes")
        if check.kind != "error_rate" or params.get("phase") != "fault" or predicts.get(check.name or "") != "PASS":
            continue
        if classes is None or "server_error" in classes:
            held |= flooded & set(params.get("pools") or flooded)
    return held


def router_cuts(loaded: LoadedDrill) -> dict[str, tuple[float, float]]:
    """Pool -> (its client timeout, the router's upstream timeout) where the router gives up first."""
    router_s = StackConfig.model_validate(loaded.drill.target.config).router.retries.timeout
    held = pools_predicted_not_failed(loaded)
    return {
        pool.name: (pool.timeout, router_s)
        for pool in loaded.scenario.pools
        if pool.name in held and pool.timeout > router_s
    }


@pytest.mark.parametrize("path", FLOOD_DRILLS, ids=[p.stem for p in FLOOD_DRILLS])
def test_the_router_waits_as_long_as_a_flooded_pool_predicted_not_to_fail(path: Path) -> None:
    loaded = load_drill(path)
    if loaded.drill.target.kind != "embedded" or not pools_predicted_not_failed(loaded):
        pytest.skip("predicts no flooded pool on the embedded stack free of 5xx in the fault phase")
    assert router_cuts(loaded) == {}, "pool: (client timeout s, router upstream timeout s)"


def test_priority_isolation_is_held_to_the_rule() -> None:
    loaded = load_drill(REPO / "drills/priority-isolation.yaml")
    assert pools_predicted_not_failed(loaded) == {"batch"}


def test_the_rule_sees_the_router_timeout_priority_isolation_had() -> None:
    """priority-isolation with the router back at its default 30 s (what failed at the default scale) breaks it."""
    loaded = load_drill(REPO / "drills/priority-isolation.yaml", overrides=["target.config.router.retries.timeout=30s"])
    assert router_cuts(loaded) == {"batch": (300.0, 30.0)}
