"""JSON-lines files as every part of a run writes them: appended whole lines, maybe a torn last one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator, TypeVar

__all__ = ["read_jsonl"]

T = TypeVar("T")


def read_jsonl(path: Path, parse: Callable[[dict], T] = dict) -> Iterator[T]:
    """Each line's object, through ``parse``; a missing file is empty, and a line that is torn (a crash
    mid-write), not an object, or that ``parse`` rejects (ValueError/TypeError/KeyError) is skipped."""
    if not path.exists():
        return
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if isinstance(data, dict):
                    yield parse(data)
            except (ValueError, TypeError, KeyError):
                continue
