"""One resolved drill variant, run with the existing runner: what ``drill compare`` and sweeps run per variant.

A *variant* is a drill as :func:`drill.spec.loader.load_drill` resolved it (file, ``--set`` overrides, time
scale). :func:`run_variant` runs it into a fresh run directory under ``out_dir`` (``<out_dir>/<drill>/<run id>/``,
never an existing one, like ``drill run --out``) and returns the runner's :class:`RunResult`: its run
directory, status, exit code (``drill run``'s), verdicts and reports. Nothing here checks hosts or prints;
callers check :func:`drill.runner.safety.check_hosts` before they start anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from drill.runner.listeners import RunListener
from drill.runner.run import Runner, RunOptions, RunResult
from drill.spec.loader import LoadedDrill

__all__ = ["run_variant"]


def run_variant(
    loaded: LoadedDrill,
    out_dir: Path,
    options: RunOptions | None = None,
    listeners: Sequence[RunListener] = (),
) -> RunResult:
    """Run ``loaded`` into a new run directory under ``out_dir`` (``options.out_dir`` is replaced by it)."""
    runner = Runner(loaded, replace(options or RunOptions(), out_dir=Path(out_dir)), list(listeners))
    return runner.run()
