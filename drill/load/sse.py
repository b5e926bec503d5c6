"""Classify the lines of an OpenAI-compatible SSE stream (vLLM's format, ``docs/serving-facts.md`` §3.1).

Called for every line the load generator and ``replay_failing`` read, so the
common case (a content chunk) is decided from bytes without parsing JSON:

- ``data: {...}`` with non-empty ``choices``: a content chunk. It counts for
  TTFT and ITL, as in ``vllm bench serve`` (the chat role-only first chunk
  counts too, §5.1);
- ``data: {"error": ...}``: a mid-stream error (HTTP status already 200). vLLM's ``code`` in it is the HTTP
  status the error would have had (:func:`parse_error_code`): a refusal that comes after the 200 has gone
  out carries 503 there (``vllm/entrypoints/openai/protocol.py`` ``ErrorInfo``);
- ``data: {..."choices":[],"usage":{...}}``: the final usage chunk (llama.cpp adds its ``timings`` to it);
  llama.cpp's streamed ``/v1/completions`` sends ``usage`` in its last content chunk instead (beside
  ``finish_reason``): :func:`carries_usage`;
- ``data: [DONE]``: the end of the stream;
- anything else (blank lines, comments, ``event:`` fields): ignored.
"""

from __future__ import annotations

import enum
import json

from drill.rundir.records import ServerTimings

__all__ = [
    "LineKind",
    "classify_line",
    "carries_usage",
    "parse_usage",
    "parse_timings",
    "parse_error_message",
    "parse_error_code",
    "is_role_only",
]


class LineKind(enum.Enum):
    IGNORED = 0
    CONTENT = 1
    USAGE = 2
    ERROR = 3
    DONE = 4


_DATA = b"data:"
_CHOICES = (b'"choices":[{', b'"choices": [{')


def classify_line(line: bytes) -> LineKind:
    """What one raw SSE line (with or without its newline) is."""
    if not line.startswith(_DATA):
        return LineKind.IGNORED
    if _CHOICES[0] in line:  # the hot path: a vLLM content chunk
        return LineKind.CONTENT if not line.startswith(b'data: {"error"') else LineKind.ERROR
    payload = line[5:].strip()
    if payload.startswith(b"{"):
        if payload.startswith(b'{"error"'):
            return LineKind.ERROR
        if _CHOICES[1] in payload:
            return LineKind.CONTENT
        return _slow(payload)
    if payload == b"[DONE]":
        return LineKind.DONE
    return LineKind.IGNORED


def _slow(payload: bytes) -> LineKind:
    """Lines the byte checks cannot decide (other key order, spacing): parse them."""
    try:
        data = json.loads(payload)
    except ValueError:
        return LineKind.IGNORED
    if not isinstance(data, dict):
        return LineKind.IGNORED
    if "error" in data or data.get("object") == "error":  # current and legacy (<= 0.9) vLLM error shapes
        return LineKind.ERROR
    if data.get("choices"):
        return LineKind.CONTENT
    if data.get("usage"):
        return LineKind.USAGE
    return LineKind.IGNORED


def carries_usage(line: bytes) -> bool:
    """Whether a content chunk carries ``usage`` too (llama.cpp's streamed completions: its last content chunk).

    A generated text that spells ``"usage"`` is escaped in JSON (``\\"usage\\"``), so the byte check does not
    match it.
    """
    return b'"usage"' in line and parse_usage(line) != (None, None)


def parse_usage(line: bytes) -> tuple[int | None, int | None]:
    """``(prompt_tokens, completion_tokens)`` of a chunk or body that carries ``usage``; Nones otherwise."""
    try:
        data = json.loads(line[5:] if line.startswith(_DATA) else line)
    except ValueError:
        return None, None
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None, None
    return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))


def parse_timings(line: bytes) -> ServerTimings | None:
    """The server's own ``timings`` of a final chunk or body (llama.cpp's server); None when it has none."""
    try:
        data = json.loads(line[5:] if line.startswith(_DATA) else line)
    except ValueError:
        return None
    return ServerTimings.from_json(data.get("timings")) if isinstance(data, dict) else None


def parse_error_message(data: bytes, limit: int = 300) -> str:
    """A short message from a vLLM/OpenAI error body or error event (current or legacy shape, §3.2)."""
    raw = data[5:] if data.startswith(_DATA) else data
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:limit]
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or json.dumps(error)
    else:
        message = str(error)
    return str(message)[:limit]


def parse_error_code(data: bytes) -> int | None:
    """The ``code`` of a vLLM/OpenAI error event or body (``{"error": {"code": 503, ...}}``, or the legacy flat
    ``{"object": "error", "code": 503}``); None when it has none that is an HTTP status (OpenAI's own errors carry
    string codes such as ``"rate_limit_exceeded"``)."""
    raw = data[5:] if data.startswith(_DATA) else data
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    error = body.get("error", body)
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    return code if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599 else None


def is_role_only(line: bytes) -> bool:
    """Whether a chat chunk is the role-only first chunk (``delta`` with ``role`` and empty content)."""
    try:
        data = json.loads(line[5:])
        delta = data["choices"][0].get("delta") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return False
    return "role" in delta and not delta.get("content")


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
