"""What the game-day pages share: the self-contained HTML shell (inline CSS, no script, no external request),
status badges, escaping for HTML and for Markdown table cells, and the links to a drill's report."""

from __future__ import annotations

from html import escape
from pathlib import Path

from drill.gameday.record import DrillOutcome

__all__ = ["badge", "esc", "md_cell", "page", "report_link"]

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;
color:#1b1f24;background:#fff}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}h3{font-size:1.05rem}
table{border-collapse:collapse;margin:.5rem 0 1rem;width:100%}
th,td{border:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:0 .4rem;border-radius:.3rem;font-weight:600;font-size:.85rem;white-space:nowrap}
.PASS{background:#dafbe1;color:#116329}.FAIL,.REVERT_FAILED,.ERROR{background:#ffebe9;color:#a40e26}
.INCONCLUSIVE,.INTERRUPTED{background:#fff8c5;color:#7d4e00}.NOT_RUN,.none{background:#eaeef2;color:#57606a}
.note{color:#57606a}.stop{border-left:4px solid #a40e26;padding:.3rem .8rem;background:#fff5f5}
tr.current td{background:#f6fbff}
"""


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def badge(status: str) -> str:
    css = status.replace(" ", "_") if status else "none"
    return f'<span class="badge {esc(css)}">{esc(status or "—")}</span>'


def md_cell(text: object) -> str:
    """Text for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{esc(title)}</title>\n'
        f"<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def report_link(folder: Path, outcome: DrillOutcome, fmt: str) -> tuple[str, str] | None:
    """(relative path, what it is) of the best page for a drill: its report, else its summary or verdicts, else its log.

    ``folder`` is the drill's game-day folder; the path is relative to it. ``fmt`` is "md" or "html": the report
    of the same format first.
    """
    if outcome.run_dir:
        order = ("report.html", "report.md") if fmt == "html" else ("report.md", "report.html")
        for name in (*order, "summary.md", "verdicts.json"):
            if (folder / outcome.run_dir / name).is_file():
                return f"{outcome.run_dir}/{name}", name
    if outcome.log and (folder / outcome.log).is_file():
        return outcome.log, "log"
    return None
