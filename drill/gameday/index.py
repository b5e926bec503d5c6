"""The game day's index page (``index.md``, ``index.html``): every drill, its result in one line, a link to its report.

A view of the game-day folder: the record plus which report files exist (a run's ``report.md``/``report.html``,
else its ``summary.md`` or ``verdicts.json``, else the drill's log), so re-rendering after ``drill report``
links the new reports. The same folder renders byte-identical pages.
"""

from __future__ import annotations

from pathlib import Path

from drill.gameday.layout import badge, esc, md_cell, page, report_link
from drill.gameday.record import DrillOutcome, DrillResult, GameDayRecord

__all__ = ["one_line_verdict", "render_index_html", "render_index_markdown"]

_MESSAGE_CHARS = 160


def _short(text: str, limit: int = _MESSAGE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line_verdict(outcome: DrillOutcome, stopped_by: str | None = None) -> str:
    """What a reader of the index needs first: which checks did not pass and why, or that all did."""
    if outcome.result is DrillResult.NOT_RUN:
        return f"not run: the game day stopped ({stopped_by})" if stopped_by else "not run"
    lead = (
        "revert failed: the target may still be faulted (run `drill cleanup`); "
        if outcome.result is DrillResult.REVERT_FAILED
        else ""
    )
    if not outcome.checks:
        return _short(lead + (outcome.problem or "no verdicts"))
    bad = [c for c in outcome.checks if c.status != "PASS"]
    if not bad:
        return lead + f"all {len(outcome.checks)} checks passed"
    names = ", ".join(f"{c.name} {c.status}" for c in bad)
    return lead + _short(f"{len(bad)} of {len(outcome.checks)} checks did not pass ({names}): {bad[0].message}")


def _header_facts(record: GameDayRecord) -> list[str]:
    facts = [
        f"result: **{record.status.value}**, exit {record.exit_code}"
        if record.exit_code is not None
        else f"result: **{record.status.value}**"
    ]
    facts += [
        f"owner: {record.owner or 'unset'}",
        f"started {record.started_at}",
        f"finished {record.finished_at or '(not finished)'}",
        f"time scale {record.time_scale:g}",
        f"cooldown {record.cooldown_s:g}s",
        f"on_first_fail: {str(record.on_first_fail).lower()}",
    ]
    return facts


def render_index_markdown(folder: Path, record: GameDayRecord) -> str:
    lines = [f"# Game day `{record.name}` — {record.stamp}", ""]
    if record.title:
        lines += [record.title, ""]
    lines += [" · ".join(_header_facts(record)), ""]
    if record.stopped_by:
        lines += [f"**Stopped early: {record.stopped_by}.**", ""]
    lines += ["| # | drill | result | verdict | report | time |", "|---|---|---|---|---|---|"]
    for d in record.drills:
        link = report_link(folder, d, "md")
        shown = f"[{link[1]}]({link[0]})" if link else "—"
        took = f"{d.wall_s:.0f} s" if d.wall_s is not None else "—"
        lines.append(
            f"| {d.number} | {md_cell(d.label)} | {d.result.value} | "
            f"{md_cell(one_line_verdict(d, record.stopped_by))} | {shown} | {took} |"
        )
    lines += [
        "",
        "Trend across game days: [trend.md](trend.md). Game-day file as run: [gameday.yaml](gameday.yaml); "
        "record: [gameday.json](gameday.json).",
        "",
    ]
    lines += _check_sections_md(record)
    return "\n".join(lines)


def _check_sections_md(record: GameDayRecord) -> list[str]:
    lines = ["## Checks", ""]
    for d in record.drills:
        if not d.checks:
            continue
        lines += [f"### {d.number}. {d.label}", ""]
        lines += [f"- {c.status} {c.name}: {_short(c.message)}" for c in d.checks]
        lines.append("")
    return lines if len(lines) > 2 else []


def render_index_html(folder: Path, record: GameDayRecord) -> str:
    body = [f"<h1>Game day <code>{esc(record.name)}</code> — {esc(record.stamp)}</h1>"]
    if record.title:
        body.append(f"<p>{esc(record.title)}</p>")
    facts = [
        f"result: {badge(record.status.value)}" + (f" exit {record.exit_code}" if record.exit_code is not None else "")
    ]
    facts += [esc(f) for f in _header_facts(record)[1:]]
    body.append(f'<p class="note">{" · ".join(facts)}</p>')
    if record.stopped_by:
        body.append(f'<p class="stop"><strong>Stopped early:</strong> {esc(record.stopped_by)}.</p>')
    body.append(
        "<table><thead><tr><th>#</th><th>drill</th><th>result</th><th>verdict</th><th>report</th>"
        "<th>time</th></tr></thead><tbody>"
    )
    for d in record.drills:
        link = report_link(folder, d, "html")
        shown = f'<a href="{esc(link[0])}">{esc(link[1])}</a>' if link else "—"
        took = f"{d.wall_s:.0f} s" if d.wall_s is not None else "—"
        body.append(
            f"<tr><td>{d.number}</td><td>{esc(d.label)}</td><td>{badge(d.result.value)}</td>"
            f"<td>{esc(one_line_verdict(d, record.stopped_by))}</td><td>{shown}</td>"
            f'<td class="num">{took}</td></tr>'
        )
    body.append("</tbody></table>")
    body.append(
        '<p>Trend across game days: <a href="trend.html">trend.html</a>. Game-day file as run: '
        '<a href="gameday.yaml">gameday.yaml</a>; record: <a href="gameday.json">gameday.json</a>.</p>'
    )
    body += _check_sections_html(record)
    return page(f"Game day {record.name} — {record.stamp}", "\n".join(body))


def _check_sections_html(record: GameDayRecord) -> list[str]:
    out: list[str] = []
    for d in record.drills:
        if not d.checks:
            continue
        out.append(f"<h3>{d.number}. {esc(d.label)}</h3><ul>")
        out += [f"<li>{badge(c.status)} {esc(c.name)}: {esc(_short(c.message))}</li>" for c in d.checks]
        out.append("</ul>")
    return (["<h2>Checks</h2>"] + out) if out else []
