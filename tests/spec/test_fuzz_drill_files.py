"""No input file, however malformed, produces a Python traceback: only located diagnostics (exit 2)."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from drill.errors import SpecError
from drill.spec.loader import load_drill

KEYS = ["name", "target", "kind", "config", "url", "scenario", "pools", "arrival", "process", "rate", "phases",
        "fault", "baseline", "faults", "params", "start", "duration", "selector", "replicas", "checks",
        "stop_conditions", "above", "for", "slo", "ttft_p95", "input_tokens", "dist", "value", "output_tokens",
        "share", "stages", "trace", "file", "seed", "<<", "on", "yes", "null", "1", "max"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["30s", "-5s", "1e309", "embedded", "openai", "http://127.0.0.1:1", "poisson", "fixed", "&a", "*a",
                     "test_toxic_latency", "", "\x00", "\u2028", "{", "[", "!!python/object:os.system"]),
    st.text(max_size=12),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), children, max_size=6)),
    max_leaves=40,
)

VALID = """
name: ok
target: {kind: openai, config: {url: "http://127.0.0.1:8000"}}
scenario:
  arrival: {process: poisson, rate: 5}
  pools:
    - name: chat
      input_tokens: {dist: fixed, value: 100}
      output_tokens: {dist: fixed, value: 50}
phases: {baseline: 10s, fault: 20s}
faults:
  - kind: test_toxic_latency
    params: {proxy: p, latency_ms: 10}
    start: 1s
"""


def _check(tmp_path: Path, text: str | bytes) -> None:
    path = tmp_path / "drill.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        load_drill(path)
    except SpecError as exc:
        rendered = exc.render()
        assert exc.diagnostics and all(":" in d.render() for d in exc.diagnostics), rendered


@settings(max_examples=int(__import__("os").environ.get("DRILL_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(documents)
def test_generated_structures_never_crash(tmp_path: Path, doc: object) -> None:
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return
    _check(tmp_path, text)


@settings(max_examples=int(__import__("os").environ.get("DRILL_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
