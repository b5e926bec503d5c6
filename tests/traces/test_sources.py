"""Every trace source reads into the same SpanTable: OTLP JSON (hex, Tempo base64), OTLP protobuf,
Jaeger JSON, the receiver file; and each counts what it could not read, with where."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import get_args

import pytest

from drill import registry
from drill.errors import InputError
from drill.traces.detect import detect_source
from drill.traces.sources import _KindName, _StatusName, table_to_dicts
from drill.traces.table import KIND_NAMES, STATUS_NAMES, SpanTable
from tests.traces.spankit import drill_request, write_spans

FIXTURES = Path(__file__).parent.parent / "fixtures" / "traces"
TRACE_A = "5b8efff798038103d269b633813fc60c"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"


def _source(kind: str, run_dir: Path, **params):
    cls = registry.traces.get(kind)
    return cls(cls.Params(**params), str(run_dir))


def _rows(table: SpanTable, drop_attributes: tuple[str, ...] = ()) -> list[dict]:
    rows = []
    for row in table_to_dicts(table):
        row["attributes"] = {k: v for k, v in row["attributes"].items() if k not in drop_attributes}
        rows.append(row)
    return sorted(rows, key=lambda r: (r["trace_id"], r["span_id"]))


def _otlp(name: str) -> tuple[SpanTable, object]:
    source = _source("otlp_file", FIXTURES, path=name)
    return source.table(), source.report


def test_otlp_json_hex_ids_decode_to_the_span_model() -> None:
    table, report = _otlp("otlp_hex.jsonl")
    assert report.unreadable == 0 and report.spans == 5
    spans = {s["span_id"]: s for s in _rows(table)}
    client = spans["eee19b7ec3c1b175"]  # written in upper-case hex
    assert client["trace_id"] == TRACE_A and client["parent_span_id"] == "eee19b7ec3c1b174"
    assert client["kind"] == "CLIENT" and client["service"] == "drill-router"
    assert client["attributes"] == {"drill.upstream": "replica-0", "drill.attempt": 1}
    root = spans["eee19b7ec3c1b174"]
    assert root["parent_span_id"] is None and root["status"] == {"code": "ERROR", "message": "upstream failed"}
    assert root["start_ns"] == 1_700_000_000_000_000_000 and root["duration_ms"] == 100.0
    llm = spans["2222222222222222"]
    assert llm["attributes"] == {
        "gen_ai.latency.time_to_first_token": 0.02,
        "gen_ai.usage.prompt_tokens": 12,
        "drill.replica": 0,
        "drill.retried": True,
        "drill.chunks": [1, 2],
    }
    assert llm["service"] == "drill-replica-0" and llm["status"]["message"] == "engine dead"
    assert spans["3333333333333333"]["trace_id"] == TRACE_B and spans["3333333333333333"]["kind"] == "INTERNAL"
    assert table.parent_row[table.span_id.tolist().index("2222222222222222")] == table.span_id.tolist().index(
        "1111111111111111"
    )


def test_tempo_batches_with_base64_ids_and_numeric_times_give_the_same_table() -> None:
    hex_table, _ = _otlp("otlp_hex.jsonl")
    tempo_table, report = _otlp("tempo_base64.jsonl")
    assert report.unreadable == 0
    assert _rows(tempo_table) == _rows(hex_table)


def test_otlp_file_counts_lines_it_cannot_decode(tmp_path: Path) -> None:
    good = (FIXTURES / "otlp_hex.jsonl").read_text().splitlines()
    bad_id = good[1].replace("3333333333333333", "33333333333333zz")
    lines = [good[0], "not json at all", '{"resourceSpans": 5}', bad_id, good[1][:80]]  # last one torn
    (tmp_path / "export.jsonl").write_text("\n".join(lines))
    source = _source("otlp_file", tmp_path, path="export.jsonl")
    table = source.table()
    assert len(table) == 2  # the first line's spans; nothing of the bad-id line
    (file_report,) = source.report.files
    assert file_report.bad_count == 3 and [b.line for b in file_report.bad_lines] == [2, 3, 4]
    assert "33333333333333zz" in file_report.bad_lines[2].reason
    assert file_report.torn_last_line is not None and file_report.torn_last_line.line == 5
    assert source.report.unreadable == 4
    assert source.report.where[0].startswith(f"{tmp_path / 'export.jsonl'}:2: ")


def test_otlp_protobuf_message_file_gives_the_json_fixture_table() -> None:
    hex_table, _ = _otlp("otlp_hex.jsonl")
    source = _source("otlp_proto_file", FIXTURES, path="otlp.binpb")
    assert _rows(source.table()) == _rows(hex_table)
    assert source.report.unreadable == 0


@pytest.mark.parametrize("framing", ["uint32", "varint"])
def test_otlp_protobuf_length_delimited_frames_and_a_cut_frame(tmp_path: Path, framing: str) -> None:
    message = (FIXTURES / "otlp.binpb").read_bytes()
    prefix = struct.pack(">I", len(message)) if framing == "uint32" else _varint(len(message))
    (tmp_path / "spans.pb").write_bytes(prefix + message + prefix + message + prefix + message[:10])
    source = _source("otlp_proto_file", tmp_path, path="spans.pb", framing=framing)
    table = source.table()
    assert len(table) == 10
    (report,) = source.report.files
    assert report.lines_read == 2 and report.bad_count == 1 and "cut short" in report.bad_lines[0].reason


def test_otlp_protobuf_directory_of_messages_and_a_broken_one(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "otlp.binpb", tmp_path / "a.binpb")
    (tmp_path / "b.binpb").write_bytes(b"\xff\xff\xff\xff garbage")
    source = _source("otlp_proto_file", tmp_path, path=".")
    assert len(source.table()) == 5
    assert source.report.unreadable == 1 and "b.binpb byte 0: invalid protobuf" in source.report.where[0]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_jaeger_ui_json_gives_the_otlp_table_for_the_same_traces() -> None:
    source = _source("jaeger_file", FIXTURES, path="jaeger_ui.json")
    table = source.table()
    hex_table, _ = _otlp("otlp_hex.jsonl")
    jaeger_rows = [r for r in _rows(table) if r["trace_id"] in (TRACE_A, TRACE_B)]
    assert jaeger_rows == _rows(hex_table, drop_attributes=("drill.chunks",))
    # the span whose id is not hex is counted and located, not skipped silently
    assert source.report.unreadable == 1
    assert source.report.where[0].startswith(f"{FIXTURES / 'jaeger_ui.json'}: data[2].spans[1]: ")


def test_jaeger_64_bit_trace_ids_follows_from_error_tag_and_binary_tags() -> None:
    table = _source("jaeger_file", FIXTURES, path="jaeger_ui.json").table()
    (row,) = [r for r in _rows(table) if r["service"] == "customer"]
    assert row["trace_id"] == "0000000000000000665b3cc06e48f122"
    assert row["parent_span_id"] == "665b3cc06e48f122"  # FOLLOWS_FROM when there is no CHILD_OF
    assert row["status"] == {"code": "ERROR", "message": None} and row["kind"] == "SERVER"
    assert row["attributes"] == {"payload": "deadbeef"}
    assert row["end_ns"] - row["start_ns"] == 179_848_000


def test_jaeger_file_that_is_not_jaeger_json_is_a_located_input_error(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"data": 5}')
    with pytest.raises(InputError, match=r"x\.json: not Jaeger JSON"):
        _source("jaeger_file", tmp_path, path="x.json").table()
    with pytest.raises(InputError, match="no such Jaeger JSON file"):
        _source("jaeger_file", tmp_path, path="missing.json").table()


def test_receiver_source_table_spans_and_window(tmp_path: Path) -> None:
    spans = drill_request(1) + drill_request(2, start_ms=1000)
    write_spans(tmp_path / "spans.jsonl", spans)
    source = _source("receiver", tmp_path)
    table = source.table()
    assert len(table) == 14 and source.report.unreadable == 0 and source.report.spans == 14
    assert [s["span_id"] for s in source.spans()] == [s["span_id"] for s in spans]
    late = source.table((spans[7]["start_ns"], spans[7]["end_ns"]))
    assert set(late.trace_id.tolist()) == {spans[7]["trace_id"]}
    as_dicts = list(source.spans())
    assert as_dicts[3]["attributes"] == spans[3]["attributes"] and as_dicts[3]["status"] == spans[3]["status"]


def test_receiver_file_larger_than_a_block_keeps_every_line_and_its_numbers(tmp_path: Path, monkeypatch) -> None:
    import drill.traces.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 700)  # a few lines per block, one line longer than a block
    spans = [s for i in range(30) for s in drill_request(i + 1)]
    spans[40]["attributes"] = {"big": "x" * 2000}
    lines = [json.dumps(s) for s in spans]
    lines[100] = "{broken"
    (tmp_path / "spans.jsonl").write_text("\n".join(lines) + "\n")
    source = _source("receiver", tmp_path)
    table = source.table()
    assert len(table) == 209
    (report,) = source.report.files
    assert report.bad_count == 1 and report.bad_lines[0].line == 101
    assert table.attributes[40] == {"big": "x" * 2000}
    assert table.span_id.tolist() == [s["span_id"] for i, s in enumerate(spans) if i != 100]


def test_the_names_the_receiver_writes_are_the_tables_kind_and_status_names() -> None:
    assert get_args(_KindName) == KIND_NAMES and get_args(_StatusName) == STATUS_NAMES


def test_receiver_names_it_does_not_write_are_read_in_any_block_and_bad_lines_still_counted(
    tmp_path: Path, monkeypatch
) -> None:
    """Blocks as the receiver writes them are decoded with its own kind and status names as literals; a later
    block with other spellings (another tool's file) or a bad line is read by the general decoder, line for line."""
    import drill.traces.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 2000)
    spans = [s for i in range(12) for s in drill_request(i + 1)]
    spans[30]["kind"], spans[31]["kind"] = "SPAN_KIND_CLIENT", "server"
    spans[32]["status"] = {"code": "STATUS_CODE_ERROR", "message": "boom"}
    spans[60]["kind"] = "PRODUCER"
    lines = [json.dumps(s) for s in spans]
    lines[70] = '{"trace_id": 1}'
    (tmp_path / "spans.jsonl").write_text("\n".join(lines) + "\n")
    source = _source("receiver", tmp_path)
    table = source.table()
    expected = SpanTable.from_spans([s for i, s in enumerate(spans) if i != 70])
    assert table.kind.tolist() == expected.kind.tolist() and table.status.tolist() == expected.status.tolist()
    assert table.kind[30] == 3 and table.kind[31] == 2 and table.status[32] == 2 and table.kind[60] == 4
    (report,) = source.report.files
    assert report.bad_count == 1 and report.bad_lines[0].line == 71 and len(table) == len(spans) - 1


def test_receiver_file_with_upper_case_ids_and_null_fields(tmp_path: Path) -> None:
    spans = drill_request(1)
    for s in spans:
        s["trace_id"], s["span_id"] = s["trace_id"].upper(), s["span_id"].upper()
        s["parent_span_id"] = s["parent_span_id"].upper() if s["parent_span_id"] else None
    spans[0]["status"] = None
    spans[1]["kind"] = 3  # a code instead of a name
    spans[2]["status"] = {"code": "STATUS_CODE_ERROR", "message": "boom"}  # beside the null, in one block
    del spans[3]["status"]
    write_spans(tmp_path / "spans.jsonl", spans)
    table = _source("receiver", tmp_path).table()
    assert table.trace_id[0] == spans[0]["trace_id"].lower() and table.parent_row.tolist()[1:4] == [0, 1, 2]
    assert table.status[0] == 0 and table.kind[1] == 3
    assert table.status.tolist()[:4] == [0, 0, 2, 0] and table.status_message.tolist()[:4] == [None, None, "boom", None]


@pytest.mark.parametrize(
    "ids",
    [
        ("00000000000000a", "000000000000000a1"),  # 15 and 17 characters: 32 hex digits in all, misaligned
        ("000000 000000 0a", "ffffffffffffff0b"),  # 16 characters, two spaces: bytes.fromhex skips them
        ("00000000000000zz", "ffffffffffffff0b"),  # not hex
    ],
)
def test_receiver_ids_that_are_not_all_16_hex_still_find_their_parents(tmp_path: Path, ids: tuple[str, str]) -> None:
    """The receiver reads a block's span ids as 64-bit values at once; a block with one id that is not 16 hex
    characters falls back to the ids as strings, whatever the total of hex digits."""
    spans = drill_request(1)
    expected = SpanTable.from_spans(spans).parent_row.tolist()  # renaming two ids consistently changes no parent
    old = [s["span_id"] for s in spans[:2]]
    for s in spans:
        s["span_id"] = dict(zip(old, ids)).get(s["span_id"], s["span_id"])
        s["parent_span_id"] = dict(zip(old, ids)).get(s["parent_span_id"], s["parent_span_id"])
    write_spans(tmp_path / "spans.jsonl", spans)
    table = _source("receiver", tmp_path).table()
    assert table.span_id.tolist()[:2] == list(ids)
    assert table.parent_row.tolist() == expected and (table.parent_row >= 0).sum() == len(spans) - 1


def test_a_pretty_printed_tempo_document_is_read_whole(tmp_path: Path) -> None:
    document = json.loads((FIXTURES / "tempo_base64.jsonl").read_text())
    (tmp_path / "trace.json").write_text(json.dumps(document, indent=2))
    source = _source("otlp_file", tmp_path, path="trace.json")
    assert _rows(source.table()) == _rows(_otlp("otlp_hex.jsonl")[0])
    assert source.report.unreadable == 0
    merged = [
        rs
        for line in (FIXTURES / "otlp_hex.jsonl").read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
    ]
    one_per_line = '{"resourceSpans": [\n' + ",\n".join(json.dumps(rs) for rs in merged) + "\n]}\n"
    (tmp_path / "rows.json").write_text(one_per_line)  # its last line reads on its own (as a TracesData of nothing)
    rows = _source("otlp_file", tmp_path, path="rows.json")
    assert _rows(rows.table()) == _rows(_otlp("otlp_hex.jsonl")[0]) and rows.report.unreadable == 0
    (tmp_path / "junk.json").write_text("{\n  nope\n")
    junk = _source("otlp_file", tmp_path, path="junk.json")
    assert len(junk.table()) == 0 and junk.report.unreadable == 2


def test_jaeger_api_v3_answers_wrapped_in_result_read_as_otlp_pretty_or_as_lines(tmp_path: Path) -> None:
    lines = (FIXTURES / "otlp_hex.jsonl").read_text().splitlines()
    wrapped = [json.dumps({"result": json.loads(line)}) for line in lines if line.strip()]
    (tmp_path / "lines.json").write_text("\n".join(wrapped) + "\n")  # a streamed answer: one envelope per message
    (tmp_path / "pretty.json").write_text(json.dumps(json.loads(wrapped[0]), indent=2))
    assert detect_source(tmp_path / "lines.json") == detect_source(tmp_path / "pretty.json") == "otlp_file"
    streamed = _source("otlp_file", tmp_path, path="lines.json")
    assert _rows(streamed.table()) == _rows(_otlp("otlp_hex.jsonl")[0]) and streamed.report.unreadable == 0
    first = _source("otlp_file", tmp_path, path="pretty.json")
    assert len(first.table()) > 0 and first.report.unreadable == 0
    (tmp_path / "other.json").write_text('{"result": {"rows": []}}\n')  # another API's envelope: not claimed
    with pytest.raises(InputError, match="none of the supported span formats"):
        detect_source(tmp_path / "other.json")


def test_ids_that_only_python_int_would_take_are_not_hex(tmp_path: Path) -> None:
    line = (FIXTURES / "otlp_hex.jsonl").read_text().splitlines()[1]
    for fake in ("0x33333333333333", "3333_33333333333"):
        (tmp_path / "x.jsonl").write_text(line.replace("3333333333333333", fake) + "\n")
        source = _source("otlp_file", tmp_path, path="x.jsonl")
        assert len(source.table()) == 0 and source.report.unreadable == 1
    document = json.loads((FIXTURES / "jaeger_ui.json").read_text())
    document["data"][1]["spans"][0]["spanID"] = "0x33333333333333"
    (tmp_path / "j.json").write_text(json.dumps(document))
    jaeger = _source("jaeger_file", tmp_path, path="j.json")
    jaeger.table()
    assert jaeger.report.unreadable == 2 and "data[1].spans[0]" in jaeger.report.where[0]
