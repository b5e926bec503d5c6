"""The comparison folder's documents: ``comparison.json``, ``decision.md``, ``comparison.md``, ``comparison.html``.

``comparison.json`` (schema :data:`COMPARISON_SCHEMA`) is written for every comparison that started, finished
or not; the decision record and the comparison report need both runs judged. The Markdown and HTML render
through the report templates (``drill/report/templates/compare.*``) with the report's number formatter.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drill.report.render import template_environment

if TYPE_CHECKING:  # the comparison writes its documents with this module
    from drill.compare.comparison import ComparisonResult

__all__ = ["COMPARISON_SCHEMA", "comparison_json", "write_documents"]

COMPARISON_SCHEMA = "llm-drill/comparison/v1"
#: document -> template (Markdown first; the HTML is escaped)
_RENDERED = (
    ("decision.md", "compare.decision.md.j2"),
    ("comparison.md", "compare.md.j2"),
    ("comparison.html", "compare.html.j2"),
)


def comparison_json(result: ComparisonResult) -> dict[str, Any]:
    plan, outcome = result.plan, result.outcome
    document: dict[str, Any] = {
        "schema": COMPARISON_SCHEMA,
        "drill": plan.baseline.drill.name,
        "change": plan.change.to_json(),
        "labels_differing": [d.to_json() for d in plan.labels],
        "time_scale": plan.baseline.time_scale,
        "seed": plan.baseline.drill.seed,
        "exit_code": result.exit_code,
        "message": result.message,
        "runs": [
            {
                "side": s.label,
                "run_dir": str(s.result.run_dir),
                "status": s.result.status.value,
                "exit_code": s.result.exit_code,
                "message": s.result.message,
            }
            for s in result.sides
        ],
        "judged": outcome is not None,
    }
    if outcome is None:
        return document
    document.update(
        verdicts=[{"name": v.name, "baseline": v.baseline, "candidate": v.candidate} for v in outcome.verdicts],
        headline=[r.to_json() for r in outcome.headline.rows],
        cost_note=outcome.headline.cost_note,
        request_set=outcome.requests.to_json(),
        acceptance=[i.to_json() for i in outcome.acceptance],
        accepted=outcome.accepted,
        candidate_passed=outcome.candidate_passed,
        decision=asdict(outcome.record),
    )
    return document


def _render(template: str, result: ComparisonResult) -> str:
    env = template_environment(template.endswith(".html.j2"))
    return env.get_template(template).render(c=result, o=result.outcome)


def write_documents(result: ComparisonResult) -> list[Path]:
    """Write the comparison's documents into its folder (new files: a comparison folder is never reused)."""
    written = []
    path = result.folder / "comparison.json"
    path.write_text(json.dumps(comparison_json(result), indent=2, sort_keys=False, default=str) + "\n")
    written.append(path)
    if result.outcome is None:
        return written
    for name, template in _RENDERED:
        path = result.folder / name
        path.write_text(_render(template, result), encoding="utf-8")
        written.append(path)
    return written
