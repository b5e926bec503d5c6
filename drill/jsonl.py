"""JSON-lines files as every part of a run writes them: appended whole lines, maybe a torn last one.

Evidence is never dropped silently. A reader is given a :class:`ReadReport` (or makes one) and every
line it cannot read is counted there with its line number and the reason: a torn **last** line is what
a crash mid-write leaves and is reported as such (``torn_last_line``); any other unreadable line is a
``bad_line``, and the checks that depend on the file say so instead of passing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

__all__ = ["BadLine", "ReadReport", "read_jsonl"]

T = TypeVar("T")

#: How many unreadable lines a report keeps verbatim (all are counted).
KEPT_BAD_LINES = 20


@dataclass(frozen=True)
class BadLine:
    line: int  # 1-based
    reason: str

    def where(self, path: Path | str) -> str:
        return f"{path}:{self.line}: {self.reason}"


@dataclass
class ReadReport:
    """What one read of one JSON-lines file could and could not use."""

    path: Path
    exists: bool = True
    lines_read: int = 0  # records returned
    bad_count: int = 0  # unreadable lines other than a torn last line
    bad_lines: list[BadLine] = field(default_factory=list)  # the first KEPT_BAD_LINES of them
    torn_last_line: BadLine | None = None

    @property
    def clean(self) -> bool:
        """True when every line but possibly a torn last one was read."""
        return self.bad_count == 0

    def add_bad(self, bad: BadLine) -> None:
        self.bad_count += 1
        if len(self.bad_lines) < KEPT_BAD_LINES:
            self.bad_lines.append(bad)

    def describe(self) -> str:
        """One line for a verdict or a log: what could not be read, and where."""
        parts = []
        if self.bad_count:
            first = self.bad_lines[0].where(self.path.name)
            parts.append(f"{self.bad_count} unreadable line(s) in {self.path.name} (first: {first})")
        if self.torn_last_line is not None:
            parts.append(f"a torn last line in {self.path.name} (line {self.torn_last_line.line}, a crash mid-write)")
        return "; ".join(parts) or f"{self.path.name}: every line read"

    def to_json(self) -> dict:
        return {
            "file": self.path.name,
            "exists": self.exists,
            "lines_read": self.lines_read,
            "bad_count": self.bad_count,
            "bad_lines": [{"line": b.line, "reason": b.reason} for b in self.bad_lines],
            "torn_last_line": (
                None
                if self.torn_last_line is None
                else {"line": self.torn_last_line.line, "reason": self.torn_last_line.reason}
            ),
        }


def read_jsonl(
    path: Path,
    parse: Callable[[dict], T] = dict,  # type: ignore[assignment]  # T is dict when parse is left out
    report: ReadReport | None = None,
) -> Iterator[T]:
    """Each line's object, through ``parse``; a missing file is empty (``report.exists`` False).

    A line that is not JSON, not an object, or that ``parse`` rejects (ValueError/TypeError/KeyError) is
    counted in ``report``: as ``torn_last_line`` when it is the file's last line and does not end in a
    newline (a crash mid-write), otherwise as a bad line. Nothing is skipped without a count.
    """
    report = report if report is not None else ReadReport(path)
    if not path.exists():
        report.exists = False
        return
    with path.open("rb") as fh:
        number = 0
        for raw in fh:
            number += 1
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
                if not isinstance(data, dict):
                    raise TypeError(f"expected a JSON object, found {type(data).__name__}")
                value = parse(data)
            except (ValueError, TypeError, KeyError) as exc:
                bad = BadLine(number, _reason(exc))
                if not raw.endswith(b"\n"):  # only the last line can lack its newline
                    report.torn_last_line = bad
                else:
                    report.add_bad(bad)
                continue
            report.lines_read += 1
            yield value


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]
