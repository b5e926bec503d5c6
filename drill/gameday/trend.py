"""The trend view (``trend.md``, ``trend.html``): per drill, its verdicts and headline figures across game days.

Rows are the game days of the same name in the same reports folder (their ``gameday.json`` records), oldest
first, the newest :data:`TREND_DEPTH`; the game day the page belongs to is marked. Per drill (by its label in the
game day) one table of results and verdicts per check, and one of headline figures (see
:mod:`drill.gameday.headline`). A check or figure a game day does not have is "—", never 0. Records that could
not be read are counted and named under the tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drill.gameday.headline import HeadlineFigure
from drill.gameday.layout import badge, esc, md_cell, page, report_link
from drill.gameday.record import DrillOutcome, GameDayRecord, History

__all__ = [
    "TREND_DEPTH",
    "DrillTrend",
    "TrendRow",
    "build_trends",
    "render_trend_html",
    "render_trend_markdown",
    "sparkline",
]

#: Most game days a trend view shows (the newest).
TREND_DEPTH = 20


@dataclass(frozen=True)
class TrendRow:
    stamp: str
    outcome: DrillOutcome
    current: bool

    def status_of(self, check: str) -> str | None:
        found = next((c for c in self.outcome.checks if c.name == check), None)
        return found.status if found else None

    def figure(self, check: str, name: str) -> HeadlineFigure | None:
        found = next((c for c in self.outcome.checks if c.name == check), None)
        return next((f for f in found.figures if f.name == name), None) if found else None


@dataclass(frozen=True)
class DrillTrend:
    label: str
    rows: tuple[TrendRow, ...]  # oldest first
    checks: tuple[str, ...]  # check names, in order of first appearance
    figures: tuple[tuple[str, str, str], ...]  # (check, figure, unit), in order of first appearance


def build_trends(history: History, current: GameDayRecord, depth: int = TREND_DEPTH) -> tuple[DrillTrend, ...]:
    """One trend per drill label: the current game day's drills first, then labels only earlier game days had."""
    records = list(history.records[-depth:])
    if not any(r.stamp == current.stamp for r in records):
        records = [*records[-(depth - 1) :], current] if depth > 1 else [current]
    labels = list(dict.fromkeys([d.label for d in current.drills] + [d.label for r in records for d in r.drills]))
    return tuple(_trend(label, records, current.stamp) for label in labels)


def _trend(label: str, records: list[GameDayRecord], current: str) -> DrillTrend:
    rows = tuple(TrendRow(r.stamp, d, r.stamp == current) for r in records for d in r.drills if d.label == label)
    checks = dict.fromkeys(c.name for row in rows for c in row.outcome.checks)
    figures = dict.fromkeys((c.name, f.name, f.unit) for row in rows for c in row.outcome.checks for f in c.figures)
    unique = dict.fromkeys((check, name) for check, name, _ in figures)  # one column per figure, first unit
    first_unit = {(check, name): unit for check, name, unit in reversed(list(figures))}
    return DrillTrend(label, rows, tuple(checks), tuple((c, n, first_unit[(c, n)]) for c, n in unique))


def _figure_header(check: str, name: str, unit: str) -> str:
    return f"{check}: {name}" + (f" ({unit})" if unit else "")


def _value(row: TrendRow, check: str, name: str) -> str:
    figure = row.figure(check, name)
    return figure.shown() if figure else "—"


def _unreadable_md(history: History) -> list[str]:
    if not history.unreadable:
        return []
    lines = [f"{len(history.unreadable)} earlier game-day record(s) could not be read and are not shown:", ""]
    return lines + [f"- {md_cell(u)}" for u in history.unreadable] + [""]


def render_trend_markdown(folder: Path, record: GameDayRecord, history: History) -> str:
    trends = build_trends(history, record)
    shown = len({row.stamp for t in trends for row in t.rows})
    lines = [
        f"# Trend of game day `{record.name}`",
        "",
        f"{shown} game day(s) named `{record.name}` in this reports folder (the newest {TREND_DEPTH} at most); "
        f"this one, {record.stamp}, in bold. Back to [the index](index.md).",
        "",
    ]
    for trend in trends:
        lines += [f"## {trend.label}", ""]
        lines += _results_md(folder, trend) + _figures_md(trend)
    return "\n".join(lines + _unreadable_md(history))


def _stamp_md(row: TrendRow) -> str:
    link = f"[{row.stamp}](../{row.stamp}/index.md)"
    return f"**{link}**" if row.current else link


def _results_md(folder: Path, trend: DrillTrend) -> list[str]:
    head = ["game day", "result", *trend.checks]
    lines = ["| " + " | ".join(md_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    for row in trend.rows:
        link = report_link(folder.parent / row.stamp, row.outcome, "md")
        result = f"[{row.outcome.result.value}](../{row.stamp}/{link[0]})" if link else row.outcome.result.value
        cells = [_stamp_md(row), result, *(row.status_of(c) or "—" for c in trend.checks)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _figures_md(trend: DrillTrend) -> list[str]:
    if not trend.figures:
        return ["No headline figures.", ""]
    head = ["game day", *(_figure_header(*f) for f in trend.figures)]
    lines = ["| " + " | ".join(md_cell(h) for h in head) + " |", "|---|" + "--:|" * len(trend.figures)]
    for row in trend.rows:
        lines.append("| " + " | ".join([_stamp_md(row), *(_value(row, c, n) for c, n, _ in trend.figures)]) + " |")
    return lines + [""]


def render_trend_html(folder: Path, record: GameDayRecord, history: History) -> str:
    trends = build_trends(history, record)
    shown = len({row.stamp for t in trends for row in t.rows})
    body = [
        f"<h1>Trend of game day <code>{esc(record.name)}</code></h1>",
        f'<p class="note">{shown} game day(s) named {esc(record.name)} in this reports folder (the newest '
        f"{TREND_DEPTH} at most); this one, {esc(record.stamp)}, highlighted. "
        'Back to <a href="index.html">the index</a>.</p>',
    ]
    for trend in trends:
        body.append(f"<h2>{esc(trend.label)}</h2>")
        body += _results_html(folder, trend) + _figures_html(trend)
    if history.unreadable:
        body.append(
            f"<p>{len(history.unreadable)} earlier game-day record(s) could not be read and are not "
            "shown:</p><ul>" + "".join(f"<li>{esc(u)}</li>" for u in history.unreadable) + "</ul>"
        )
    return page(f"Trend of game day {record.name}", "\n".join(body))


def _row_open(row: TrendRow) -> str:
    return '<tr class="current">' if row.current else "<tr>"


def _stamp_html(row: TrendRow) -> str:
    link = f'<a href="../{esc(row.stamp)}/index.html">{esc(row.stamp)}</a>'
    return f"<strong>{link}</strong>" if row.current else link


def _results_html(folder: Path, trend: DrillTrend) -> list[str]:
    out = [
        "<table><thead><tr><th>game day</th><th>result</th>"
        + "".join(f"<th>{esc(c)}</th>" for c in trend.checks)
        + "</tr></thead><tbody>"
    ]
    for row in trend.rows:
        link = report_link(folder.parent / row.stamp, row.outcome, "html")
        result = badge(row.outcome.result.value)
        if link:
            result = f'<a href="../{esc(row.stamp)}/{esc(link[0])}">{result}</a>'
        cells = "".join(f"<td>{badge(row.status_of(c) or '')}</td>" for c in trend.checks)
        out.append(f"{_row_open(row)}<td>{_stamp_html(row)}</td><td>{result}</td>{cells}</tr>")
    return out + ["</tbody></table>"]


def _figures_html(trend: DrillTrend) -> list[str]:
    if not trend.figures:
        return ['<p class="note">No headline figures.</p>']
    out = [
        "<table><thead><tr><th>game day</th>"
        + "".join(f"<th>{esc(_figure_header(*f))}</th>" for f in trend.figures)
        + "</tr></thead><tbody>"
    ]
    for row in trend.rows:
        cells = "".join(f'<td class="num">{_value(row, c, n)}</td>' for c, n, _ in trend.figures)
        out.append(f"{_row_open(row)}<td>{_stamp_html(row)}</td>{cells}</tr>")
    if len(trend.rows) > 1:
        lines = "".join(f"<td>{sparkline(_series(trend, c, n))}</td>" for c, n, _ in trend.figures)
        out.append(f'<tr class="spark"><td class="note">oldest → newest</td>{lines}</tr>')
    return out + ["</tbody></table>"]


def _series(trend: DrillTrend, check: str, name: str) -> list[float | None]:
    return [f.value if (f := row.figure(check, name)) else None for row in trend.rows]


def sparkline(values: list[float | None], width: int = 120, height: int = 28) -> str:
    """An inline SVG line of ``values`` (oldest first; a game day without the figure is a gap), or "" with < 2."""
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return ""
    low, high = min(known), max(known)
    span = (high - low) or 1.0
    step = (width - 4) / (len(values) - 1)
    points = [
        (2 + i * step, height - 2 - (v - low) / span * (height - 4)) for i, v in enumerate(values) if v is not None
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.8"/>' for x, y in points)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="from {low:.4g} to {high:.4g}"><polyline fill="none" stroke="#0969da" '
        f'stroke-width="1.5" points="{path}"/><g fill="#0969da">{dots}</g></svg>'
    )
