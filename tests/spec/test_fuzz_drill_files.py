"""No input file, however malformed, produces a Python traceback: only located diagnostics (exit 2)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drill.errors import SpecError
from drill.spec.diagnostics import Diagnostic
from drill.spec.loader import load_drill
from drill.spec.yamlio import MAX_NODES, load_located
from tests.minimal_drill import minimal_drill

KEYS = [
    "name",
    "target",
    "kind",
    "config",
    "url",
    "scenario",
    "pools",
    "arrival",
    "process",
    "rate",
    "phases",
    "fault",
    "baseline",
    "faults",
    "params",
    "start",
    "duration",
    "selector",
    "replicas",
    "checks",
    "stop_conditions",
    "above",
    "for",
    "slo",
    "ttft_p95",
    "input_tokens",
    "dist",
    "value",
    "output_tokens",
    "share",
    "stages",
    "trace",
    "file",
    "seed",
    "<<",
    "on",
    "yes",
    "null",
    "1",
    "max",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "30s",
            "-5s",
            "1e309",
            "embedded",
            "openai",
            "http://127.0.0.1:1",
            "poisson",
            "fixed",
            "&a",
            "*a",
            "test_toxic_latency",
            "",
            "\x00",
            "\u2028",
            "{",
            "[",
            "!!python/object:os.system",
        ]
    ),
    st.text(max_size=12),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), children, max_size=6),
    ),
    max_leaves=40,
)

EXAMPLES = int(os.environ.get("DRILL_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FUZZ_FEWER = settings(
    max_examples=EXAMPLES // 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

VALID = minimal_drill(
    "ok", "faults:\n  - kind: test_toxic_latency\n    params: {proxy: p, latency_ms: 10}\n    start: 1s\n"
)


def _check(tmp_path: Path, text: str | bytes) -> None:
    path = tmp_path / "drill.yaml"
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    path.write_bytes(raw)
    try:
        load_drill(path)
    except SpecError as exc:
        assert exc.diagnostics, exc.render()
        for d in exc.diagnostics:
            assert_inside(d, path, raw)


_BREAKS = re.compile(r"\r\n|[\r\n\x85\u2028\u2029]")


def assert_inside(d: Diagnostic, path: Path, raw: bytes) -> None:
    """``d`` names this file (or a scenario file it names) at a ``line:col`` that exists in it."""
    rendered = d.render()
    if d.position.source != str(path):  # a scenario file found in scenarios/ or next to the drill
        other = Path(d.position.source)
        assert other.is_file(), rendered
        raw = other.read_bytes()
    assert rendered.startswith(f"{d.position.source}:{d.position.line}:{d.position.col}: error: "), rendered
    text = raw.decode("utf-8", "replace")
    lines = _BREAKS.split(text)
    assert 1 <= d.position.line <= len(lines), (rendered, len(lines))
    assert 1 <= d.position.col <= len(lines[d.position.line - 1]) + 1, (rendered, lines[d.position.line - 1][:80])


@FUZZ
@given(documents)
def test_generated_structures_never_crash(tmp_path: Path, doc: object) -> None:
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return
    _check(tmp_path, text)


@FUZZ
@given(st.data())
def test_mutated_valid_file_never_crashes(tmp_path: Path, data: st.DataObject) -> None:
    raw = bytearray(VALID.encode())
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        pos = data.draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[pos] = data.draw(st.integers(0, 255))
        elif op == "delete":
            del raw[pos]
        else:
            raw[pos:pos] = data.draw(st.sampled_from([b":", b"\n  ", b"-", b"{", b"'", b"&x", b"*x", b"\t", b"\xff"]))
    _check(tmp_path, bytes(raw))


def test_recursive_alias_does_not_crash(tmp_path: Path) -> None:
    _check(tmp_path, "name: &a [*a]\n")
    _check(tmp_path, "a: &x\n  b: *x\n")


def test_the_location_check_catches_a_position_outside_the_file(tmp_path: Path) -> None:
    """The check above must be able to fail: a line past the end or a column past the line is refused."""
    path = tmp_path / "drill.yaml"
    raw = b"name: x\nseed: y\n"
    from drill.spec.diagnostics import Position

    assert_inside(Diagnostic(Position(str(path), 2, 7), (), "fine"), path, raw)
    for line, col in ((4, 1), (2, 9), (0, 1), (1, 0)):
        with pytest.raises(AssertionError):
            assert_inside(Diagnostic(Position(str(path), line, col), (), "outside"), path, raw)
    with pytest.raises(AssertionError):
        assert_inside(Diagnostic(Position("elsewhere.yaml", 1, 1), (), "another file"), path, raw)


# --- generated anchors, aliases and deep nesting --------------------------------------------------


@st.composite
def aliased_documents(draw: st.DrawFn) -> str:
    """YAML text with anchors on some values and aliases (sometimes to undefined or open anchors) to them."""
    anchors: list[str] = []
    lines = []
    for i in range(draw(st.integers(1, 12))):
        key = draw(st.sampled_from(KEYS))
        name = f"a{i}"
        if anchors and draw(st.booleans()):
            refs = [draw(st.sampled_from(anchors + ["missing", name])) for _ in range(draw(st.integers(1, 12)))]
            body = f"[{', '.join('*' + r for r in refs)}]"
        else:
            body = draw(
                st.sampled_from(
                    [
                        "[x, y, z]",
                        "{dist: fixed, value: 1}",
                        "1",
                        "30s",
                        ".inf",
                        "'a'",
                        "[" * draw(st.integers(1, 80)) + "]" * draw(st.integers(0, 80)),
                        "{<<: *a0, x: 1}" if anchors else "{}",
                    ]
                )
            )
        anchor = f"&{name} " if draw(st.booleans()) else ""
        if anchor:
            anchors.append(name)
        lines.append(f"{'  ' * draw(st.integers(0, 2))}{key}: {anchor}{body}")
    return "\n".join(lines) + "\n"


@FUZZ
@given(aliased_documents())
def test_generated_aliases_anchors_and_nesting_never_crash(tmp_path: Path, text: str) -> None:
    _check(tmp_path, text)


@FUZZ_FEWER
@given(st.integers(1, 9), st.integers(2, 12), st.booleans())
def test_generated_alias_bombs_are_refused_while_composing(
    tmp_path: Path, levels: int, width: int, merge: bool
) -> None:
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels + 1):
        refs = ", ".join([f"*l{i - 1}"] * width)
        lines.append(f"l{i}: &l{i} {{<<: [{refs}]}}" if merge and i > 1 else f"l{i}: &l{i} [{refs}]")
    text = "\n".join(lines) + "\n"
    _check(tmp_path, text)
    expanded = sum(width**i for i in range(1, levels + 2))
    if expanded > 10 * MAX_NODES:
        doc = load_located(text, "bomb.yaml")
        assert any("expands to more than" in d.message for d in doc.diagnostics), [d.render() for d in doc.diagnostics]


@FUZZ
@given(
    st.text(max_size=200)
    | st.sampled_from(
        [
            "seed=" + "[" * 500,
            "seed={a: &a [1], b: [*a, *a]}",
            "seed=.nan",
            "seed=1e400",
            "seed=" + "9" * 5000,
            "x.y[3]=&a [*a]",
        ]
    )
)
def test_any_set_value_gives_a_located_problem_or_a_value(tmp_path: Path, text: str) -> None:
    """``--set`` goes through the same bounded reader: a located diagnostic on ``<--set>``, never a crash."""
    path = tmp_path / "drill.yaml"
    path.write_text(VALID)
    try:
        load_drill(path, overrides=[text])
    except SpecError as exc:
        for d in exc.diagnostics:
            if d.position.source == "<--set>":
                assert d.position.line == 1 and 1 <= d.position.col <= len(text) + 1, d.render()
            else:
                assert_inside(d, path, VALID.encode())
