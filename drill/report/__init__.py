"""Reports: what a person reads about a finished run, rendered from its run directory.

``report.md`` and a self-contained ``report.html`` are a view of the run directory, modelled on an incident
postmortem: the verdicts, the impact on users, a timeline, detection (the first abnormal span), the injected
fault, per-phase metrics and cost, the recovery replay, the runbook and the action items the verdicts imply,
the decision record, and what the drill did not cover. :func:`build_report` makes the typed model
(:mod:`drill.report.model`), :mod:`drill.report.render` renders it (deterministically: the same directory gives
byte-identical Markdown) and :func:`write_reports` writes both files; ``drill report RUN_DIR`` re-renders them.
Nothing is imported here eagerly: ``import drill.report`` costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drill.report.build import build_report
    from drill.report.model import Report
    from drill.report.render import render_html, render_json, render_markdown, write_reports

__all__ = ["Report", "build_report", "render_html", "render_json", "render_markdown", "write_reports"]

_HOMES = {
    "Report": "drill.report.model",
    "build_report": "drill.report.build",
    "render_html": "drill.report.render",
    "render_json": "drill.report.render",
    "render_markdown": "drill.report.render",
    "write_reports": "drill.report.render",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'drill.report' has no attribute {name!r}")

    return getattr(importlib.import_module(_HOMES[name]), name)
