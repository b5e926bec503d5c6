"""A sweep's variants: the drill as written with exactly one assignment each, resolved before anything starts.

:func:`resolve_sweep` loads every variant with :func:`drill.spec.loader.load_drill` (the user's ``--set``
overrides, then the sweep's variable set to the variant's value and no sweep of its own; the same seed, scenario
and time scale), so a variant that cannot run is a located error before the first one starts. One variable
changes per variant by construction; the only other difference a variant may have is a fault its target cannot
take, left out when the sweep says ``skip_unsupported_faults`` and named in :attr:`SweepVariant.skipped_faults`.

Checks split in two: a :class:`SweepCheck` judges the sweep (the parent run directory, with every variant's
evidence under it), every other check judges each variant's own run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from drill import registry
from drill.api import Check, Status, Verdict
from drill.rundir.evidence import RunEvidence
from drill.spec.loader import LoadedDrill, load_drill
from drill.spec.models import SweepSpec
from drill.sweeps.scaling import read_sweep_record

__all__ = ["SweepCheck", "SweepPlan", "SweepVariant", "is_sweep_check", "resolve_sweep"]


class SweepCheck(Check):
    """A check that judges a whole sweep: its evidence is the sweep's run directory (``sweep.json`` and every
    variant's run directory under ``variants/``). Outside a sweep it has nothing to judge: INCONCLUSIVE."""

    reads = ("sweep.json",)

    def outside_a_sweep(self, evidence: RunEvidence) -> Verdict | None:
        """INCONCLUSIVE when the run directory is not a sweep's (no ``sweep.json``); None when it is one."""
        if read_sweep_record(evidence.run_dir) is not None:
            return None
        return self.verdict(
            Status.INCONCLUSIVE, f"not a sweep: {self.kind} judges a drill with a sweep: block (no sweep.json)"
        )


def is_sweep_check(kind: str) -> bool:
    """True when the check of ``kind`` judges a sweep rather than one run."""
    return issubclass(registry.checks.get(kind), SweepCheck)


@dataclass(frozen=True)
class SweepVariant:
    """One value of the sweep's variable and the drill it makes (its run-level checks only)."""

    label: str  # the folder under variants/, e.g. "tp-2"
    value: Any
    loaded: LoadedDrill

    @property
    def skipped_faults(self) -> tuple[str, ...]:
        return self.loaded.skipped_faults

    @property
    def assignment(self) -> str:
        """``target.config.engine.tensor_parallel_size=2``: the one change this variant makes."""
        return self.loaded.overrides[-2]


@dataclass(frozen=True)
class SweepPlan:
    """The sweep drill as loaded and its variants, in the order of ``sweep.values``."""

    base: LoadedDrill
    sweep: SweepSpec
    variants: tuple[SweepVariant, ...]

    @property
    def sweep_checks(self) -> list[tuple[str, str, Any]]:
        """(kind, name, params) of each check that judges the sweep."""
        drill = self.base.drill
        return [
            (c.kind, c.name or c.kind, p)
            for c, p in zip(drill.checks, self.base.check_params)
            if is_sweep_check(c.kind)
        ]


def resolve_sweep(base: LoadedDrill) -> SweepPlan:
    """Every variant of ``base`` (a drill with a ``sweep``), loaded; raises SpecError for one that cannot load."""
    sweep = base.drill.sweep
    if sweep is None:
        raise ValueError(f"{base.path} has no sweep block")
    variants = []
    for value in sweep.values:
        loaded = load_drill(
            base.path,
            overrides=(*base.overrides, *sweep.overrides(value)),
            time_scale=base.time_scale,
            skip_unsupported_faults=sweep.skip_unsupported_faults,
        )
        variants.append(SweepVariant(sweep.variant_label(value), value, _run_checks_only(loaded)))
    return SweepPlan(base, sweep, tuple(variants))


def _run_checks_only(loaded: LoadedDrill) -> LoadedDrill:
    """The variant without the checks that judge the sweep (they have no sweep to judge inside one run)."""
    kept = [i for i, c in enumerate(loaded.drill.checks) if not is_sweep_check(c.kind)]
    if len(kept) == len(loaded.drill.checks):
        return loaded
    drill = loaded.drill.model_copy(update={"checks": [loaded.drill.checks[i] for i in kept]})
    return replace(loaded, drill=drill, check_params=tuple(loaded.check_params[i] for i in kept))
