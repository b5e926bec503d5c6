"""The planned timeline of a drill: phases and fault windows, as offsets from the start of load.

Used by ``drill plan`` to show what a run would do, and by the runner to
schedule faults. Offsets are seconds after the warmup phase begins (the moment
load starts); the cold start before it has no fixed length.
"""

from __future__ import annotations

from dataclasses import dataclass

from drill.spec.loader import LoadedDrill
from drill.spec.models import Phase

__all__ = ["FaultWindow", "PhaseSlot", "Timeline", "plan_timeline"]


@dataclass(frozen=True)
class PhaseSlot:
    phase: Phase
    start_s: float
    length_s: float | None  # None: until done (cold start, replay)

    @property
    def end_s(self) -> float | None:
        return None if self.length_s is None else self.start_s + self.length_s


@dataclass(frozen=True)
class FaultWindow:
    index: int
    fault_id: str
    kind: str
    start_s: float  # offset into the fault phase
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Timeline:
    phases: tuple[PhaseSlot, ...]
    faults: tuple[FaultWindow, ...]
    fault_phase_start_s: float
    load_length_s: float


def plan_timeline(loaded: LoadedDrill) -> Timeline:
    drill = loaded.drill
    p = drill.phases
    slots: list[PhaseSlot] = []
    if p.cold_start.enabled:
        slots.append(PhaseSlot(Phase.COLD_START, 0.0, None))
    offset = 0.0
    for phase, length in (
        (Phase.WARMUP, p.warmup),
        (Phase.BASELINE, p.baseline),
        (Phase.FAULT, p.fault),
        (Phase.RECOVERY, p.recovery),
    ):
        if length > 0:
            slots.append(PhaseSlot(phase, offset, length))
        offset += length
    if p.replay.enabled:
        slots.append(PhaseSlot(Phase.REPLAY, offset, None))
    names = drill.fault_names()
    faults = tuple(
        FaultWindow(
            i, names[i], f.kind, f.start, f.start + (f.duration if f.duration is not None else p.fault - f.start)
        )
        for i, f in enumerate(drill.faults)
    )
    return Timeline(tuple(slots), faults, p.warmup + p.baseline, p.loaded_length())
