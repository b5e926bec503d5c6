"""Render a :class:`~drill.report.model.Report` as Markdown, self-contained HTML or JSON, and write a run's reports.

Deterministic: the templates print only what the model holds, numbers through one formatter
(:func:`drill.report.formatting.format_value`), and JSON with sorted keys — the same run directory renders
byte-identical Markdown. The HTML has its CSS inline and its charts as inline SVG; it loads nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import escape

from drill.api import Verdict
from drill.errors import InputError
from drill.report.build import build_report
from drill.report.formatting import format_value
from drill.report.model import Report
from drill.rundir.evidence import RunEvidence
from drill.rundir.files import check_run_dir, read_json, write_in_run_dir
from drill.rundir.redact import escape_controls

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
    """Runbook Markdown as HTML (raw HTML in it is escaped, not passed through). An image becomes a link to it
    (``image: alt``): the report loads nothing from outside itself, whatever a runbook someone sent holds."""
    # lazy: markdown-it (~0.15 s, 60 modules) loads only when a runbook is rendered, not with the runner
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.add_render_rule("image", _image_as_link)
    return md.render(text)


def _image_as_link(self: Any, tokens: list, idx: int, options: Any, env: Any) -> str:
    """markdown-it's render rule for an image token: a link, never an ``<img>``."""
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    src = str(token.attrGet("src") or "")
    return f'<a href="{escape(src)}" rel="noreferrer">image: {escape(alt or src)}</a>'


def _signed(value: Any, unit: str = "") -> str:
    """A delta with its sign: ``+12 ms``, ``-3%``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return format_value(value, unit)
    return ("+" if value > 0 else "") + format_value(value, unit)


@lru_cache(maxsize=2)
def template_environment(html: bool) -> jinja2.Environment:
    """The Jinja environment of every template in ``drill/report/templates/`` (run, capacity, comparison, scaling).

    HTML templates are autoescaped; an undefined name is an error, never an empty string; control characters are
    escaped in every document (:class:`_ControlFreeTemplate`). Filters: ``num``
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
    env.template_class = _ControlFreeTemplate
    return env


class _ControlFreeTemplate(jinja2.Template):
    """A template whose rendered document holds no raw control character (a span name's ESC sequence would act on
    the terminal of whoever runs ``cat report.md``): each is written as its escape, ``\\x1b``."""

    def render(self, *args: Any, **kwargs: Any) -> str:

        return escape_controls(super().render(*args, **kwargs))


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
    try:
        checks = document.get("checks") if isinstance(document, dict) else None
        if not isinstance(checks, (list, type(None))):
            raise TypeError(f"'checks' must be a list, not {type(checks).__name__}")
        if not isinstance(document, dict):
            raise TypeError(f"the document must be an object, not {type(document).__name__}")
        return [_verdict(item) for item in checks or ()]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(
            f"{path}: not a verdicts document: {type(exc).__name__}: {exc}",
            hint="the run directory is damaged; `drill judge RUN_DIR --json` judges its evidence again",
        ) from None


def _verdict(item: object) -> Verdict:
    """One entry of ``verdicts.json``: TypeError unless its texts are texts (the report shows them as such)."""
    if not isinstance(item, dict):
        raise TypeError(f"a check must be an object, not {type(item).__name__}")
    verdict = Verdict.from_json(item)
    texts = [verdict.kind, verdict.name, verdict.message, *verdict.notes]
    if not all(isinstance(t, str) for t in texts) or not isinstance(verdict.window, (str, type(None))):
        raise TypeError(f"check {verdict.name!r}: kind, name, message, window and notes must be text")
    return verdict


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
