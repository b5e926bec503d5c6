"""Which trace source reads a span file, from the file's content: each source's ``sniff`` decides.

``drill traces analyze SPANS...`` takes files of any supported format, whatever they are called. Every
``drill.traces`` source that reads a file format says whether a file is in its format from its first bytes
(:meth:`drill.api.TraceSource.sniff` of a :class:`drill.api.SpanFileHead`), so a new format is one module and
one entry point, and nothing here changes. The built-in formats: receiver JSON lines (``receiver``, and an empty
file), OTLP JSON lines (``otlp_file``), OTLP protobuf (``otlp_proto_file``, anything that is not text), Jaeger
JSON (``jaeger_file``), Zipkin v2 JSON (``zipkin_file``), CSV span tables (``csv_file``: a header line naming a
trace id and a span id column).
A file no source claims, or one that two claim, is a located error (exit 2).
"""

from __future__ import annotations

import re
from pathlib import Path

from drill import registry
from drill.api import SpanFileHead, TraceSource
from drill.errors import InputError
from drill.rundir.files import loads_json, open_input

__all__ = ["HEAD_BYTES", "detect_source", "open_span_file", "span_file_head"]

#: Bytes of a file looked at to tell its format.
HEAD_BYTES = 64 * 1024


def span_file_head(path: Path) -> SpanFileHead:
    """The first :data:`HEAD_BYTES` of ``path``, whether they are text, and the keys of its first JSON object."""
    with open_input(path) as fh:
        head = fh.read(HEAD_BYTES)
    text = _is_text(head)
    keys = _top_keys(head.lstrip()) if text and head.lstrip()[:1] == b"{" else set()
    return SpanFileHead(head, text, frozenset(keys))


def detect_source(path: Path) -> str:
    """The ``drill.traces`` source kind that reads ``path``, from its content (not its name)."""
    head = span_file_head(path)
    claims = [kind for kind in registry.traces.kinds() if registry.traces.get(kind).sniff(head)]
    if len(claims) == 1:
        return claims[0]
    if claims:
        raise InputError(f"{path}: its first bytes fit more than one span format: {', '.join(claims)}")
    supported = ", ".join(_formats())
    text = head.head.lstrip()
    if head.text and text[:1] == b"[":
        raise InputError(
            f"{path}: a JSON array, but in none of the supported span formats ({supported}); Zipkin's v1 model "
            "(annotations with an endpoint) is not read: have Zipkin serve it as v2 (/api/v2/traces)"
        )
    if not head.text or text[:1] != b"{":
        raise InputError(f"{path}: not a span file (it starts with {text[:20]!r}); supported: {supported}")
    raise InputError(
        f"{path}: JSON, but in none of the supported span formats ({supported}); "
        f"its first keys: {', '.join(sorted(head.keys)[:8]) or 'none'}"
    )


def open_span_file(path: Path) -> tuple[str, TraceSource]:
    """The source kind that reads ``path`` and that source, set to read it (``path`` given absolute)."""
    kind = detect_source(path)
    source_cls = registry.traces.get(kind)
    field = source_cls.file_param or "path"
    params = source_cls.Params.model_validate({field: str(path.resolve())})
    return kind, source_cls(params, str(path.resolve().parent))


def _formats() -> list[str]:
    sources = (registry.traces.get(kind) for kind in registry.traces.kinds())
    return [source.format_name or source.kind for source in sources if source.file_param is not None]


def _is_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 4  # a multi-byte character cut by HEAD_BYTES
    return True


def _top_keys(text: bytes) -> set[str]:
    """Keys of the first JSON object: from the first line that parses (JSON lines; a bad line is the reader's
    to count), else found by pattern (one pretty-printed JSON document)."""
    for line in text.split(b"\n")[:50]:
        try:
            value = loads_json(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return set(value)
    return set(re.findall(r'"([A-Za-z_]+)"\s*:', text.decode("utf-8", "replace")[:4096]))
