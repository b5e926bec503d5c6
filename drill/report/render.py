"""Render a :class:`~drill.report.model.Report` as Markdown, self-contained HTML or JSON, and write a run's reports.

Deterministic: the templates print only what the model holds, numbers through one formatter
(:func:`drill.report.build.format_value`), and JSON with sorted keys — the same run directory renders
byte-identical Markdown. The HTML has its CSS inline and its charts as inline SVG; it loads nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from drill.checks.base import RunEvidence, Verdict
from drill.errors import InputError
from drill.report.build import format_value
from drill.report.model import Report, build_report
from drill.rundir.files import check_run_dir, read_json, write_in_run_dir

__all__ = [
    "LATENCY_CHART_FILE",
    "REPORT_FILES",
    "REPORT_SCHEMA",
    "load_verdicts",
    "render_html",
    "render_json",
    "render_markdown",
    "report_for",
    "write_reports",
]

REPORT_FILES = ("report.md", "report.html")
#: The latency-over-time chart beside the reports, for ``report.md`` to show (HTML has it inline).
LATENCY_CHART_FILE = "latency-over-time.svg"
#: The ``schema`` of ``drill report --format json``.
REPORT_SCHEMA = "llm-drill/report/v1"
_TEMPLATES = Path(__file__).parent / "templates"


def _cell(value: Any) -> str:
    """A value fit for a Markdown table cell: one line, pipes escaped."""
    text = value if isinstance(value, str) else format_value(value)
    return " ".join(text.split()).replace("|", "\\|")


def _pct(value: Any) -> str:
    return (
        format_value(value, "ratio")
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else format_value(value)
    )


def _markdown_html(text: str) -> str:
    """Runbook Markdown as HTML (raw HTML in it is escaped, not passed through)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def _signed(value: Any, unit: str = "") -> str:
    """A delta with its sign: ``+12 ms``, ``-3%``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return format_value(value, unit)
    return ("+" if value > 0 else "") + format_value(value, unit)


@lru_cache(maxsize=2)
def template_environment(html: bool) -> jinja2.Environment:
    """The Jinja environment of every template in ``drill/report/templates/`` (run, capacity, comparison, scaling).

    HTML templates are autoescaped; an undefined name is an error, never an empty string. Filters: ``num``
    (a figure with its unit), ``pct``, ``signed`` (a delta), ``cell`` (a Markdown table cell), ``markdown``.
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=html,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(num=format_value, pct=_pct, signed=_signed, cell=_cell, markdown=_markdown_html)
    return env


def render_markdown(report: Report) -> str:
    return template_environment(False).get_template("report.md.j2").render(r=report, latency_svg=LATENCY_CHART_FILE)


def render_html(report: Report) -> str:
    return template_environment(True).get_template("report.html.j2").render(r=report)


def render_json(report: Report) -> str:
    document = {"schema": REPORT_SCHEMA, **report.to_json()}
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _standalone_svg(svg: str) -> str:
    """An inline chart as an SVG file of its own (the XML prolog the inline form leaves out)."""
    return '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n' + svg + ("" if svg.endswith("\n") else "\n")


def load_verdicts(run_dir: Path) -> list[Verdict]:
    """The verdicts of ``verdicts.json`` ([] when the run was not judged)."""
    path = Path(run_dir) / "verdicts.json"
    try:
        document = read_json(path, root=run_dir)
    except FileNotFoundError:
        return []
    checks = document.get("checks") if isinstance(document, dict) else None
    try:
        return [Verdict.from_json(v) for v in checks or ()]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(
            f"{path}: not a verdicts.json document ({type(exc).__name__}: {exc})",
            hint="`drill judge RUN_DIR --json` writes the verdicts again from the raw evidence",
        ) from None


def report_for(run_dir: Path, progress: Callable[[str], None] | None = None) -> Report:
    """The report model of one run directory (its verdicts from ``verdicts.json``); refuses a run directory
    with links or special files in it (:func:`drill.rundir.files.check_run_dir`)."""
    run_dir = Path(run_dir)
    check_run_dir(run_dir)
    return build_report(RunEvidence(run_dir), load_verdicts(run_dir), progress=progress)


def write_reports(run_dir: Path, progress: Callable[[str], None] | None = None) -> list[Path]:
    """Render ``report.md`` and ``report.html`` into the run directory (replacing earlier renders: a report is a
    view of the directory, not evidence), and beside them the latency chart ``report.md`` shows
    (:data:`LATENCY_CHART_FILE`, when the run has one); returns the reports' paths. Each is written through a
    fresh temporary name and renamed, never through a link (:func:`drill.rundir.files.write_in_run_dir`)."""
    run_dir = Path(run_dir)
    report = report_for(run_dir, progress)
    out = []
    for name, render in zip(REPORT_FILES, (render_markdown, render_html)):
        out.append(write_in_run_dir(run_dir, name, render(report).encode("utf-8")))
    chart = report.latency_chart
    if chart is not None and chart.svg:
        write_in_run_dir(run_dir, LATENCY_CHART_FILE, _standalone_svg(chart.svg).encode("utf-8"))
    return out
