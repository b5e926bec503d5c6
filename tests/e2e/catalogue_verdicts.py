"""The verdicts a catalogue drill predicts (its ``predicts:``), asserted against a finished run of it.

Used by ``test_catalogue.py`` for the drills it runs and by ``test_drill_verdicts.py`` for issue 8's drills, whose
runs there are the drills as written (only their timeline shortened): one run per drill proves both.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.e2e.conftest import REPO, DrillRun

__all__ = ["UNPREDICTED", "assert_predicted", "predicted"]

#: Checks a drill's runbook does not commit to, with why; the catalogue test allows these alone to go unpredicted.
UNPREDICTED: dict[str, dict[str, str]] = {}


def predicted(drill: str | Path) -> dict[str, str]:
    """``predicts:`` of ``drills/NAME.yaml`` (or of a drill file)."""
    path = REPO / drill if str(drill).endswith(".yaml") else REPO / "drills" / f"{drill}.yaml"
    return dict(yaml.safe_load(path.read_text()).get("predicts") or {})


def assert_predicted(run: DrillRun, drill: str | Path, changes: dict[str, str] | None = None) -> None:
    """Every verdict of ``run`` is the one ``drill`` predicts (``changes``: what a documented variant changes);
    a verdict the drill does not predict is a failure unless :data:`UNPREDICTED` says why."""
    name = Path(str(drill)).stem
    predicts = {**predicted(drill), **(changes or {})}
    wrong = {
        check: f"{run.status(check)} (predicted {status})"
        for check, status in predicts.items()
        if run.status(check) != status
    }
    assert not wrong, f"verdicts against the drill's predicts: {wrong}\n{run.summary()}"
    stray = set(run.verdicts) - set(predicts) - set(UNPREDICTED.get(name, {}))
    assert not stray, f"verdicts the drill does not predict: {sorted(stray)}\n{run.summary()}"
    failed = any(v["status"] == "FAIL" for v in run.verdicts.values())
    assert run.exit_code == (1 if failed else 0), run.summary()
