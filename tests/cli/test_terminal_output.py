"""What reaches a terminal is literal text (issue 21): no rich markup is parsed from names or messages, and no
control character (ESC/OSC, C0 except newline and tab, DEL, C1, bidi overrides) is printed raw.

Names come from untrusted places: a path typed on the command line, span and service names in a trace file, a
drill's title. Each test prints one through a different command and checks the bytes the command wrote."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.main import cli
from drill.cli.terminal import literal, literal_json
from tests.traces.spankit import T0, span, write_spans
from tests.traces.test_analysis import FAULT_START, drill_spans

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE = "[/nope]\x1b]8;;http://evil.example/\x07link\x1b]8;;\x07\x1b[2J\x9b31m\u202eevil"


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _assert_literal(output: str) -> None:
    assert "Traceback" not in output
    assert not RAW_CONTROL.search(output), repr(output)


def test_literal_escapes_every_control_character_but_newline_and_tab() -> None:
    assert literal("a\tb\nc") == "a\tb\nc"
    assert literal("\x1b[31m\x07\x00\x7f\x85\x9b\u202e") == "\\x1b[31m\\x07\\x00\\x7f\\x85\\x9b\\u202e"
    assert literal_json('{"a": "\u0085"}') == '{"a": "\\u0085"}'


@pytest.mark.parametrize("name", ["[/x]", "[bold]", HOSTILE])
def test_judge_of_a_hostile_path_is_a_located_usage_error(name: str) -> None:
    result = _run("judge", name)
    assert result.exit_code == 2, result.output
    _assert_literal(result.output)
    assert "[/x]" in result.output or "[bold]" in result.output or "[/nope]" in result.output
    assert "no such run directory" in result.output


def test_an_unknown_subcommand_is_printed_literally() -> None:
    result = _run("nope\x1b[31m[/x]")
    assert result.exit_code == 2
    _assert_literal(result.output)
    assert "nope\\x1b[31m[/x]" in result.output


def test_validate_prints_a_hostile_file_name_literally(tmp_path: Path) -> None:
    result = _run("validate", str(tmp_path / "x\x1b[2J[/x].yaml"))
    assert result.exit_code == 2
    _assert_literal(result.output)
    assert "x\\x1b[2J[/x].yaml" in result.output


def test_traces_analyze_prints_hostile_span_and_service_names_literally(tmp_path: Path) -> None:
    spans = drill_spans(lambda i: {"queue_ms": 400.0} if i % 2 == 0 else {})
    for s in spans:
        if s["name"] == "queue":
            s["name"] = HOSTILE
            s["attributes"] = {HOSTILE: HOSTILE}
        if s["service"] == "drill-replica-0":
            s["service"] = "svc\x1b[31m[/x]"
    (tmp_path / "d\x1b[1m[").mkdir()
    path = write_spans(tmp_path / "d\x1b[1m[" / "y].jsonl", spans)  # the path holds "[/y]"
    result = _run("traces", "analyze", str(path), "--baseline-until", f"{FAULT_START / 1e9}")
    assert result.exit_code == 0, result.output
    _assert_literal(result.output)
    assert "first abnormal span: svc\\x1b[31m[/x] / [/nope]\\x1b]8;;http://evil.example/" in result.output


def test_a_drill_title_with_control_characters_is_listed_literally(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "drills").mkdir()
    (tmp_path / "drills" / "evil.yaml").write_text(
        'schema: drill/v1\nname: evil\ntitle: "\\e]0;owned\\a[/x] title"\nhypothesis: "\\e[2J[bold]h"\n'
    )
    monkeypatch.chdir(tmp_path)
    result = _run("drills", "list")
    assert result.exit_code == 0, result.output
    _assert_literal(result.output)
    assert "\\x1b[2J[bold]h" in result.output


def _deep_chain_spans(depth: int) -> list[dict]:
    """60 baseline requests and 20 slow ones (gateway > hop x N > work); the first slow one is ``depth`` hops deep."""

    def request(n: int, start_ms: float, work_ms: float, hops: int) -> list[dict]:
        parent = span(n, "POST /v1/chat", service="gw", kind="SERVER", start_ms=start_ms, end_ms=start_ms + work_ms + 2)
        out = [parent]
        for k in range(hops):
            parent = span(
                n,
                "hop",
                service="svc",
                parent=parent,
                start_ms=start_ms + 0.001 * (k + 1),
                end_ms=start_ms + work_ms + 1,
            )
            out.append(parent)
        return [
            *out,
            span(n, "work", service="svc", parent=parent, start_ms=start_ms + 0.5, end_ms=start_ms + 0.5 + work_ms),
        ]

    spans = [s for i in range(60) for s in request(i + 1, i * 50.0, 1.0 + (i % 5) * 0.01, 3)]
    return spans + [s for i in range(20) for s in request(61 + i, 3000 + i * 50.0, 400.0, depth if i == 0 else 3)]


def test_a_deep_chain_prints_a_bounded_amount_and_says_what_it_left_out(tmp_path: Path) -> None:
    """The chain's text indented by depth without bound: 3,000 deep printed about 9 MB (100,000 deep: 10 GB)."""
    path = write_spans(tmp_path / "deep.jsonl", _deep_chain_spans(3000))
    result = _run("traces", "analyze", str(path), "--baseline-until", f"{(T0 + 3000 * 1e6) / 1e9}")
    assert result.exit_code == 0, result.output[:2000]
    assert "first abnormal span: svc / work" in result.output
    assert "… 2,978 links not shown (the chain is 3,002 spans deep) …" in result.output
    assert len(result.output) < 20_000
    assert max(len(line) for line in result.output.splitlines()) < 300


def test_spans_that_end_before_they_start_are_counted_and_said(tmp_path: Path) -> None:
    spans = drill_spans()
    backwards = [s for s in spans if s["name"] == "decode"][-3:]
    for s in backwards:
        s["start_ns"], s["end_ns"] = s["end_ns"], s["start_ns"]
    path = write_spans(tmp_path / "spans.jsonl", spans)
    args = ("traces", "analyze", str(path), "--baseline-until", f"{FAULT_START / 1e9}")
    result = _run(*args)
    assert result.exit_code == 0, result.output
    first = f"trace {backwards[0]['trace_id']} span {backwards[0]['span_id']}"
    assert f"note: 3 span(s) end before they start (first: {first})" in result.output
    document = json.loads(_run(*args, "--json").output)
    assert document["completeness"]["backwards_spans"] == 3
