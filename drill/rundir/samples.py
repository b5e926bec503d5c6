"""Failing requests kept for replay: one JSON line each in ``failing_samples.jsonl``.

Written by the load generator for every attempt that failed after it was sent
(every error class except ``client_drop`` and ``cancelled``), read by
:func:`drill.load.replay.replay_failing`. The body is stored base64-encoded so
the replay sends exactly the same bytes; ``payload_digest`` checks it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from drill.rundir.jsonl import ReadReport, read_jsonl

__all__ = ["FailingSample", "read_samples"]


@dataclass(frozen=True, slots=True)
class FailingSample:
    """The full payload of one failed attempt and a reference to its record."""

    request_id: str  # the record's request_id (X-Request-Id of the failed attempt)
    logical_id: str
    pool: str
    attempt: int
    trace_id: str
    idempotency_key: str
    payload_digest: str
    method: str
    endpoint: str  # path, e.g. /v1/chat/completions
    headers: dict[str, str] = field(default_factory=dict)
    body_b64: str = ""
    stream: bool = True
    timeout_s: float = 60.0
    error: str | None = None
    status: int | None = None
    intended_ts: float = 0.0
    burst: str | None = None

    @property
    def body(self) -> bytes:
        return base64.b64decode(self.body_b64)

    @staticmethod
    def encode_body(body: bytes) -> str:
        return base64.b64encode(body).decode("ascii")

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> FailingSample:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def read_samples(path: Path, report: ReadReport | None = None) -> Iterator[FailingSample]:
    """Samples of a ``failing_samples.jsonl``; unreadable lines are counted in ``report``."""
    return read_jsonl(path, FailingSample.from_dict, report)
