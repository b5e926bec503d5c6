"""``--time-scale F``: shrink (or stretch) every duration of a drill's timeline.

Scaled: phase lengths, fault start offsets and durations, stop-condition
windows and the maximum drill length, scenario stage durations and length, and
trace replay speed (a trace replays ``1/F`` times faster). Not scaled, because
they are properties of the system rather than of the schedule: latency SLOs and
thresholds, client timeouts, cold-start and replay timeouts, the scrape interval.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from drill.spec.models import Drill
from drill.spec.scenario import Arrival, Scenario

if TYPE_CHECKING:
    from drill.spec.loader import LoadedDrill  # the loader scales a drill with this module

__all__ = ["scale_timeline"]


def scale_timeline(loaded: LoadedDrill, factor: float) -> LoadedDrill:
    if factor <= 0:
        raise ValueError(f"--time-scale must be positive, got {factor}")
    drill = _scale_drill(loaded.drill, factor)
    scenario = scale_scenario(loaded.scenario, factor)
    return replace(loaded, drill=drill, scenario=scenario, time_scale=loaded.time_scale * factor)


def _scale_drill(drill: Drill, f: float) -> Drill:
    p = drill.phases
    phases = p.model_copy(update={k: getattr(p, k) * f for k in ("warmup", "baseline", "fault", "recovery")})
    faults = [
        x.model_copy(update={"start": x.start * f, "duration": None if x.duration is None else x.duration * f})
        for x in drill.faults
    ]
    stops = [
        s.model_copy(update={"for_": s.for_ * f, "value": None if s.value is None else s.value * f})
        for s in drill.stop_conditions
    ]
    return drill.model_copy(update={"phases": phases, "faults": faults, "stop_conditions": stops})


def scale_scenario(scenario: Scenario, f: float) -> Scenario:
    pools = [p.model_copy(update={"arrival": _scale_arrival(p.arrival, f)}) for p in scenario.pools]
    return scenario.model_copy(
        update={
            "arrival": _scale_arrival(scenario.arrival, f),
            "duration": None if scenario.duration is None else scenario.duration * f,
            "pools": pools,
        }
    )


def _scale_arrival(arrival: Arrival | None, f: float) -> Arrival | None:
    if arrival is None:
        return None
    stages = [s.model_copy(update={"duration": s.duration * f}) for s in arrival.stages]
    trace = None if arrival.trace is None else arrival.trace.model_copy(update={"speedup": arrival.trace.speedup / f})
    return arrival.model_copy(update={"stages": stages, "trace": trace})
