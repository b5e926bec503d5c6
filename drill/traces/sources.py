"""Built-in trace sources (``drill.traces`` entry points): where a run's spans can be read from.

``receiver``
    The spans the run's own OTLP receiver wrote to ``spans.jsonl`` (the default).
``otlp_file``
    An OpenTelemetry Collector ``file`` exporter's output: one OTLP/JSON export request per line,
    with hex ids (decoded with the hex/base64 fix of :mod:`drill.traces.otlp`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from drill.api import PluginParams, TraceSource
from drill.jsonl import read_jsonl
from drill.traces.otlp import OtlpDecodeError, decode_request, normalize

__all__ = ["OtlpFileSource", "ReceiverSource"]


class ReceiverParams(PluginParams):
    file: str = "spans.jsonl"


class OtlpFileParams(PluginParams):
    path: str


def _overlaps(span: dict, window: tuple[int, int] | None) -> bool:
    return window is None or (span["end_ns"] >= window[0] and span["start_ns"] <= window[1])


class ReceiverSource(TraceSource):
    kind = "receiver"
    Params = ReceiverParams

    def spans(self, window: tuple[int, int] | None = None) -> Iterator[dict]:
        for span in read_jsonl(Path(self.run_dir) / self.params.file):
            if _overlaps(span, window):
                yield span


class OtlpFileSource(TraceSource):
    kind = "otlp_file"
    Params = OtlpFileParams

    def spans(self, window: tuple[int, int] | None = None) -> Iterator[dict]:
        path = Path(self.params.path)
        if not path.is_absolute():
            path = Path(self.run_dir) / path
        with path.open("rb") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    request = decode_request(line, "application/json")
                except OtlpDecodeError:
                    continue
                yield from (s for s in normalize(request) if _overlaps(s, window))
