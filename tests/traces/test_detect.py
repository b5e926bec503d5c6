"""Each trace source says which files it reads (``sniff``): ``drill traces analyze`` asks every registered source,
so a new span format is one module and one entry point (``tests/plugins/traces.py``, a Zipkin v1 reader)."""

from __future__ import annotations

import json
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from drill import registry
from drill.errors import InputError
from drill.traces.detect import detect_source, open_span_file, span_file_head
from drill.traces.sources import TableSource
from tests.cli.test_traces_cli import FAULT_START_S, analysed, jaeger_json, write_otlp_json, write_otlp_proto
from tests.traces.spankit import write_spans, zipkin_span
from tests.traces.test_analysis import drill_spans
from tests.traces.test_csvfile import write_csv

BUILT_IN = sorted(
    ep.name for ep in entry_points(group="drill.traces") if ep.dist is not None and ep.dist.name == "llm-drill"
)
ZIPKIN_V1 = "drill.traces:test_zipkin_v1_file=tests.plugins.traces:ZipkinV1FileSource"


@pytest.fixture(scope="module")
def spans() -> list[dict]:
    """180 requests; from the 121st on, replica 0's queue takes 400 ms."""
    return drill_spans(lambda i: {"queue_ms": 400.0} if i % 2 == 0 else {})


@pytest.fixture
def samples(tmp_path: Path, spans: list[dict]) -> dict[str, Path]:
    """A file of each built-in format, named so that no name hints at its format."""
    (tmp_path / "d").write_text(json.dumps(jaeger_json(spans[:20]), indent=2))
    (tmp_path / "f").write_text(json.dumps([zipkin_span(s) for s in spans[:20]]))
    return {
        "receiver": write_spans(tmp_path / "a", spans[:20]),
        "otlp_file": write_otlp_json(tmp_path / "b", spans[:20]),
        "otlp_proto_file": write_otlp_proto(tmp_path / "c", spans[:20]),
        "jaeger_file": tmp_path / "d",
        "csv_file": write_csv(tmp_path / "e", spans[:20], "rcaeval"),
        "zipkin_file": tmp_path / "f",
    }


def _claims(path: Path) -> list[str]:
    head = span_file_head(path)
    return [kind for kind in registry.traces.kinds() if registry.traces.get(kind).sniff(head)]


def test_every_built_in_file_source_claims_its_format_and_no_other(samples: dict[str, Path]) -> None:
    file_sources = [kind for kind in BUILT_IN if registry.traces.get(kind).file_param is not None]
    assert sorted(samples) == file_sources and "jaeger_api" in BUILT_IN  # the API source reads no file
    for kind, path in samples.items():
        assert _claims(path) == [kind], kind
        assert registry.traces.get(kind).format_name, kind


def test_the_source_that_claims_a_file_reads_it(samples: dict[str, Path]) -> None:
    for kind, path in samples.items():
        found, source = open_span_file(path)
        assert found == kind and isinstance(source, TableSource)
        assert len(source.table()) == 20 and source.report.unreadable == 0, kind


def test_an_empty_file_is_receiver_output_with_no_span_yet(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("  \n")
    assert _claims(tmp_path / "empty") == ["receiver"]


def test_a_file_two_formats_claim_is_an_error_naming_both(tmp_path: Path) -> None:
    (tmp_path / "both.json").write_text('{"resourceSpans": [], "data": []}\n')
    with pytest.raises(InputError, match="more than one span format: jaeger_file, otlp_file"):
        detect_source(tmp_path / "both.json")


def test_json_no_source_claims_lists_every_supported_format(tmp_path: Path) -> None:
    (tmp_path / "other.json").write_text('{"foo": 1, "bar": 2}\n')
    with pytest.raises(InputError) as caught:
        detect_source(tmp_path / "other.json")
    message = str(caught.value)
    assert "its first keys: bar, foo" in message
    formats = [registry.traces.get(kind).format_name for kind in BUILT_IN if registry.traces.get(kind).file_param]
    assert f"supported span formats ({', '.join(formats)})" in message


def _zipkin_v1(spans: list[dict]) -> list[dict]:
    """``spans`` in Zipkin's v1 model: the service on the annotations' endpoint, no kind but the annotations'."""
    out = []
    for s in spans:
        start_us, end_us = s["start_ns"] // 1000, s["end_ns"] // 1000
        endpoint = {"serviceName": s["service"]}
        first, last = ("cs", "cr") if s["kind"] == "CLIENT" else ("sr", "ss")
        annotations = [{"timestamp": start_us, "value": first, "endpoint": endpoint}]
        annotations.append({"timestamp": end_us, "value": last, "endpoint": endpoint})
        span = {"traceId": s["trace_id"], "id": s["span_id"], "name": s["name"], "timestamp": start_us}
        span |= {"duration": end_us - start_us, "annotations": annotations, "binaryAnnotations": []}
        out.append(span | ({"parentId": s["parent_span_id"]} if s.get("parent_span_id") else {}))
    return out


def test_a_new_format_is_one_module_and_one_entry_point(
    tmp_path: Path, spans: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "spans.zipkin"
    path.write_text(json.dumps(_zipkin_v1(spans)))
    with pytest.raises(InputError, match=r"Zipkin's v1 model .* is not read"):
        detect_source(path)
    monkeypatch.setenv("DRILL_EXTRA_PLUGINS", os.environ["DRILL_EXTRA_PLUGINS"] + ";" + ZIPKIN_V1)
    assert detect_source(path) == "test_zipkin_v1_file"
    data = analysed(str(path), "--baseline-until", f"{FAULT_START_S}", "--fault-start", f"{FAULT_START_S}")
    assert data["files"] == [
        {"path": str(path), "format": "test_zipkin_v1_file", "compression": None, "spans": len(spans)}
        | {"unreadable": 0, "where": [], "notes": []}
    ]
    assert (data["analysis"]["first"]["service"], data["analysis"]["first"]["name"]) == ("drill-replica-0", "queue")
