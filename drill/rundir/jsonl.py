"""JSON-lines files as every part of a run writes them: appended whole lines, maybe a torn last one.

Evidence is never dropped silently. A reader is given a :class:`ReadReport` (or makes one) and every
line it cannot read is counted there with its line number and the reason: a torn **last** line is what
a crash mid-write leaves and is reported as such (``torn_last_line``); any other unreadable line is a
``bad_line``, and the checks that depend on the file say so instead of passing.

Files are opened through :mod:`drill.rundir.files`: a regular file only, no link inside a run directory
(``ReadReport.root``), one line at most :data:`~drill.rundir.files.MAX_LINE_BYTES` (a longer one is a bad line,
skipped in bounded memory), JSON at most :data:`~drill.rundir.files.MAX_JSON_DEPTH` deep. A run of NUL bytes
(the zero-filled tail a crash can leave, maybe followed by what ``drill cleanup`` appended) is skipped and
counted in ``ReadReport.nul_bytes``, like a torn last line: a note, not a bad line.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from drill.rundir.files import MAX_DOCUMENT_BYTES, UnsafeFileError, loads_json, open_input, read_bytes, read_lines

__all__ = ["BadLine", "ReadReport", "read_jsonl", "read_lines_or_document", "unreadable_reason"]

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
    root: Path | None = None  # the run directory ``path`` is in: opened inside it, no link followed
    nul_bytes: int = 0  # NUL bytes skipped (a crash's zero-filled tail)
    nul_line: int | None = None  # the first line of them

    @property
    def clean(self) -> bool:
        """True when every line but possibly a torn last one was read."""
        return self.bad_count == 0

    def open_input(self, path: Path) -> io.BufferedReader | None:
        """``path`` opened for reading (:func:`~drill.rundir.files.open_input`, inside :attr:`root` when it is set);
        None when there is no such file, and then :attr:`exists` is False."""
        try:
            return open_input(path, root=self.root)
        except FileNotFoundError:
            self.exists = False
            return None

    def add_bad(self, bad: BadLine) -> None:
        self.bad_count += 1
        if len(self.bad_lines) < KEPT_BAD_LINES:
            self.bad_lines.append(bad)

    def add_unreadable(self, number: int, reason: str, newline: bool) -> None:
        """Line ``number`` could not be read: the torn last line when it has no newline, else a bad line."""
        bad = BadLine(number, reason[:200])
        if newline:
            self.add_bad(bad)
        else:
            self.torn_last_line = bad

    def describe(self) -> str:
        """One line for a verdict or a log: what could not be read, and where."""
        parts = []
        if self.bad_count:
            first = self.bad_lines[0].where(self.path.name)
            parts.append(f"{self.bad_count} unreadable line(s) in {self.path.name} (first: {first})")
        if self.torn_last_line is not None:
            parts.append(f"a torn last line in {self.path.name} (line {self.torn_last_line.line}, a crash mid-write)")
        if self.nul_bytes:
            parts.append(
                f"{self.nul_bytes} NUL bytes skipped in {self.path.name} from line {self.nul_line} "
                "(the zero-filled tail a crash can leave)"
            )
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
            "nul_bytes": self.nul_bytes,
        }


def read_jsonl(
    path: Path,
    parse: Callable[[dict], T] = dict,  # type: ignore[assignment]  # T is dict when parse is left out
    report: ReadReport | None = None,
) -> Iterator[T]:
    """Each line's object, through ``parse``; a missing file is empty (``report.exists`` False).

    A line that is not JSON, not an object, or that ``parse`` rejects (ValueError/TypeError/KeyError/OverflowError) is
    counted in ``report``: as ``torn_last_line`` when it is the file's last line and does not end in a
    newline (a crash mid-write), otherwise as a bad line. Nothing is skipped without a count.
    """
    report = report if report is not None else ReadReport(path)
    fh = report.open_input(path)
    if fh is None:
        return
    with fh:
        for line in read_lines(fh):
            if line.only_nul:
                report.nul_bytes += line.size
                report.nul_line = report.nul_line or line.number
                continue
            raw = line.data
            if raw is not None and not raw.strip():
                continue
            try:
                if raw is None:
                    raise ValueError(line.problem())
                data = loads_json(raw)
                if not isinstance(data, dict):
                    raise TypeError(f"expected a JSON object, found {type(data).__name__}")
                value = parse(data)
            except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as exc:
                bad = BadLine(line.number, unreadable_reason(exc))
                if not line.newline:  # only the last line can lack its newline
                    report.torn_last_line = bad
                else:
                    report.add_bad(bad)
                continue
            report.lines_read += 1
            yield value


def unreadable_reason(exc: BaseException) -> str:
    """Why a record could not be read, for a report: the exception's type and the first line of its message."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]


def read_lines_or_document(
    path: Path,
    report: ReadReport,
    read_line: Callable[[bytes, int], str | None],
    read_document: Callable[[bytes], bool],
    what: str = "",
) -> bool:
    """Each non-blank line of ``path`` (with its number) to ``read_line``, which keeps what it reads and returns
    None, or the reason it could not read the line (counted and located in ``report``). True when the file is one
    JSON document over several lines instead: some line did not read on its own, ``read_document`` read the whole
    (at most :data:`~drill.rundir.files.MAX_DOCUMENT_BYTES`) and ``report`` is one record read; what ``read_line``
    kept is then the caller's to drop (a line of the document may have read alone: a span a line, the last without
    its comma)."""
    fh = report.open_input(path)
    if fh is None:
        return False
    long_lines = 0
    with fh:
        for line in read_lines(fh):
            problem = line.problem()
            long_lines += problem is not None and line.data is None
            if problem is None and line.data is not None and line.data.strip():
                problem = read_line(line.data, line.number)
                report.lines_read += problem is None
            if problem is not None:
                report.add_unreadable(line.number, problem, line.newline)
    if not (report.bad_count or report.torn_last_line) or long_lines > 1:
        return False
    try:
        document = read_bytes(path, limit=MAX_DOCUMENT_BYTES, what=what, root=report.root)
    except UnsafeFileError:
        return False
    if not read_document(document):
        return False
    report.bad_count, report.bad_lines, report.torn_last_line, report.lines_read = 0, [], None, 1
    return True
