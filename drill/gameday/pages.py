"""Write a game day's pages: ``index.md``/``index.html`` and ``trend.md``/``trend.html``, views of its folder.

Pages are rewritten whenever they are rendered (they are views; the record and the run directories are the
evidence): :func:`write_pages` after every game day, and again any time on an existing game-day folder.
"""

from __future__ import annotations

from pathlib import Path

from drill.gameday.index import render_index_html, render_index_markdown
from drill.gameday.record import GameDayRecord, read_history
from drill.gameday.trend import render_trend_html, render_trend_markdown

__all__ = ["write_pages"]


def write_pages(folder: Path, record: GameDayRecord) -> list[Path]:
    """The four pages of the game day in ``folder``; the trend reads the records beside it (``folder.parent``)."""
    history = read_history(folder.parent.parent, record.name)
    pages = {
        "index.md": render_index_markdown(folder, record),
        "index.html": render_index_html(folder, record),
        "trend.md": render_trend_markdown(folder, record, history),
        "trend.html": render_trend_html(folder, record, history),
    }
    written = []
    for name, text in pages.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
