"""Azure LLM inference trace files (``TIMESTAMP,ContextTokens,GeneratedTokens``).

Read when a drill with a ``trace`` arrival process is validated (:mod:`drill.spec.loader`, so a malformed row is
a validation error before anything runs), when its schedule is built (:mod:`drill.load.schedule`) and by tests
that compare a replay against the file: here, in the spec, because both the loader and the load driver read it.
Format and statistics: ``docs/serving-facts.md`` §7.1 (the 2023 traces; excerpts in ``scenarios/data/``); the
same schema is used by the 2024 traces (§7.2).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import IO

from drill.errors import InputError
from drill.rundir.files import open_input, read_lines

__all__ = ["TraceRow", "read_trace", "per_bucket_counts"]

_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of the trace: seconds after the trace's first row, and its token counts."""

    offset_s: float
    context_tokens: int
    generated_tokens: int


def read_trace(path: Path | str) -> tuple[TraceRow, ...]:
    """All rows of the CSV at ``path``, sorted by time, offsets from the first row (s).

    Cached per path. Raises InputError naming the file and line when the header or
    a row is malformed.
    """
    return _read_cached(str(Path(path).resolve()))


@lru_cache(maxsize=8)
def _read_cached(path: str) -> tuple[TraceRow, ...]:
    try:
        fh = open_input(path)
    except OSError as exc:
        raise InputError(f"cannot read trace file {path}: {exc.strerror or exc}") from None
    with fh:
        reader = csv.reader(_text_lines(path, fh))
        try:
            header = next(reader, None)
            if header is None or tuple(c.strip() for c in header) != _COLUMNS:
                raise InputError(
                    f"{path}:1: expected the header {','.join(_COLUMNS)} (Azure LLM inference trace format)"
                )
            parsed = [_row(path, reader.line_num, row) for row in reader if row]
        except (csv.Error, UnicodeDecodeError) as exc:
            raise InputError(f"{path}:{reader.line_num + 1}: not an Azure trace CSV row: {exc}") from None
    parsed.sort(key=lambda r: r[0])
    first = parsed[0][0] if parsed else 0.0
    return tuple(TraceRow(ts - first, ctx, gen) for ts, ctx, gen in parsed)


#: A trace row is a timestamp and two counts: a line longer than this is not one (and is not read whole).
MAX_ROW_BYTES = 64 * 1024


def _text_lines(path: str, fh: IO[bytes]) -> Iterator[str]:
    for line in read_lines(fh, limit=MAX_ROW_BYTES):
        if line.data is None:
            raise InputError(f"{path}:{line.number}: a line of {line.size} bytes is not a trace row")
        yield line.data.decode("utf-8")


def _row(path: str, number: int, row: list[str]) -> tuple[float, int, int]:
    try:
        stamp = datetime.fromisoformat(row[0].strip())
        seconds = stamp.timestamp() if stamp.tzinfo else (stamp - _EPOCH).total_seconds()  # naive: no DST jumps
        return seconds, int(row[1]), int(row[2])
    except (ValueError, IndexError) as exc:
        raise InputError(f"{path}:{number}: cannot read trace row {row!r}: {exc}") from exc


def per_bucket_counts(offsets_s: list[float], bucket_s: float, span_s: float) -> list[int]:
    """Arrivals per bucket of ``bucket_s`` seconds over ``[0, span_s)``: per-minute counts with 60."""
    counts = [0] * max(1, math.ceil(span_s / bucket_s - 1e-9))
    for offset in offsets_s:
        index = int(offset // bucket_s)
        if 0 <= index < len(counts):
            counts[index] += 1
    return counts
