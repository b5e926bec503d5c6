"""Plan and run a comparison: the one-variable check first, then baseline and candidate, one after the other.

:func:`plan_comparison` diffs the two resolved drills and refuses (InputError, exit 2) unless exactly one
variable differs — before anything is started or any folder made. :func:`run_comparison` makes a fresh
comparison folder ``<out>/comparisons/<drill>/<UTC timestamp>-<id>/`` and runs the baseline into its
``baseline/`` and the candidate into its ``candidate/`` (each a normal run directory, via
:func:`drill.runner.variants.run_variant`), then judges the pair and writes the comparison's documents.

Exit codes (``drill run``'s conventions): 0 the candidate passed every check and met every acceptance item the
drill sets; 1 it did not (a check FAIL/INCONCLUSIVE/ERROR, an item not met or not available); 2 bad input or
not exactly one variable changed (nothing started); 3 a run could not run (the candidate is not started after
a baseline that could not); 4 a revert failed (stop at once: ``drill cleanup``); 130 interrupted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drill.compare.decision import ComparisonOutcome, judge_comparison
from drill.compare.diff import Difference, diff_drills, diff_labels, require_one
from drill.compare.documents import write_documents
from drill.errors import InputError
from drill.rundir.directory import create_run_dir
from drill.rundir.journal import RunStatus
from drill.runner.listeners import RunListener
from drill.runner.run import RunOptions, RunResult
from drill.runner.variants import run_variant
from drill.spec.loader import LoadedDrill

__all__ = ["SIDES", "ComparisonPlan", "ComparisonResult", "SideRun", "plan_comparison", "run_comparison"]

SIDES = ("baseline", "candidate")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ComparisonPlan:
    baseline: LoadedDrill
    candidate: LoadedDrill
    change: Difference  # the one variable that differs
    labels: tuple[Difference, ...] = ()  # labels that differ (not variables; the baseline's decision is used)


def plan_comparison(baseline: LoadedDrill, candidate: LoadedDrill) -> ComparisonPlan:
    """The comparison of two resolved drills; InputError (exit 2) unless exactly one variable differs."""
    for label, loaded in zip(SIDES, (baseline, candidate)):
        if loaded.drill.sweep is not None:
            raise InputError(
                f"the {label} drill {loaded.drill.name!r} is a sweep (`drill run` runs its variants); "
                "nothing was started",
                hint="compare one variant with another: --set-both sweep=null and the variant's --set on one side",
            )
    change = require_one(diff_drills(baseline, candidate))
    return ComparisonPlan(baseline, candidate, change, tuple(diff_labels(baseline, candidate)))


@dataclass(frozen=True)
class SideRun:
    label: str
    result: RunResult

    @property
    def completed(self) -> bool:
        return self.result.status is RunStatus.COMPLETED and self.result.exit_code in (0, 1)


@dataclass
class ComparisonResult:
    folder: Path
    plan: ComparisonPlan
    sides: list[SideRun] = field(default_factory=list)
    outcome: ComparisonOutcome | None = None  # None when a side did not complete
    message: str = ""
    files: list[Path] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        codes = [s.result.exit_code for s in self.sides]
        for code in (4, 130, 3):
            if code in codes:
                return code
        if self.outcome is None:
            return 3
        return self.outcome.exit_code


def run_comparison(
    plan: ComparisonPlan,
    out_dir: Path,
    options: RunOptions | None = None,
    listeners: Callable[[str], Sequence[RunListener]] = lambda _label: (),
    say: Callable[[str], None] = lambda _line: None,
) -> ComparisonResult:
    """Run baseline, then candidate (not when the baseline did not complete), judge, write the documents."""
    folder = create_run_dir(Path(out_dir) / "comparisons", plan.baseline.drill.name).path
    result = ComparisonResult(folder, plan)
    for label, loaded in zip(SIDES, (plan.baseline, plan.candidate)):
        say(f"{label}: running {loaded.drill.name} into {folder / label}")
        side = SideRun(label, run_variant(loaded, folder / label, options, listeners(label)))
        result.sides.append(side)
        say(f"{label}: exit {side.result.exit_code}, run directory {side.result.run_dir}")
        if not side.completed:
            result.message = f"the {label} run did not complete ({side.result.message or side.result.status.value})"
            break
    if len(result.sides) == 2 and all(s.completed for s in result.sides):
        _judge(result)
    result.files = write_documents(result)
    return result


def _judge(result: ComparisonResult) -> None:
    """Judge the finished pair; a failure to judge costs the comparison (exit 3), never the runs' evidence."""
    a, b = (Path(str(s.result.run_dir)) for s in result.sides)
    try:
        result.outcome = judge_comparison(result.plan.change, a, b)
    except Exception as exc:  # noqa: BLE001 - both run directories stand; `drill report` still reads each
        log.error("judging the comparison failed: %s", exc, exc_info=True)
        result.message = f"judging the comparison failed: {type(exc).__name__}: {exc} (both run directories stand)"
