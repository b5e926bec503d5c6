"""Hostile YAML gets a located error with bounded work, for every file the harness reads.

An alias-expansion ("billion laughs") file and a few thousand nested ``[`` must give
``file:line:col: error: ...``, exit 2 and nothing created, in well under a second and a few
tens of MB, whether they are a drill, the scenario it names, a stack config or a ``--set`` value.
Each command runs in a fresh interpreter that reports its own wall time and peak memory.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from drill.errors import SpecError
from drill.spec.loader import load_drill
from drill.spec.yamlio import MAX_DEPTH, load_located

REPO = Path(__file__).resolve().parents[2]

#: Ten lines, 10**9 strings once expanded (the classic billion laughs, nine levels of ten).
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)
DEEP = "[" * 5000 + "]" * 5000 + "\n"
FLOW_BOMB = (
    "{a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol], "
    + ", ".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]" for p, c in zip("abcdefgh", "bcdefghi"))
    + "}"
)
DEEP_BLOCK = "".join("  " * i + "-\n" for i in range(1000))  # 1 MB of indentation, 1000 levels

VALID_DRILL = """\
name: ok
target: {kind: openai, config: {url: "http://127.0.0.1:8000"}}
scenario: load.yaml
phases: {baseline: 10s, fault: 20s}
"""
VALID_SCENARIO = """\
arrival: {process: poisson, rate: 5}
pools:
  - name: chat
    input_tokens: {dist: fixed, value: 100}
    output_tokens: {dist: fixed, value: 50}
"""

#: Runs one drill command in this interpreter and prints its exit code, CPU time and peak memory. CPU time, not wall
#: time: the work a hostile input costs, which is what is bounded, whatever else shares the machine (``./dev test``
#: runs this part at nice 19 beside the serial part's drills, which can starve it for seconds).
MEASURE = """
import json, sys, time
from click.testing import CliRunner
from drill.cli.main import cli
from tests.spec.test_hostile_yaml import peak_mb
args = json.loads(sys.argv[1])
start = time.process_time()
result = CliRunner().invoke(cli, args)
elapsed = time.process_time() - start
crashed = repr(result.exception) if result.exit_code not in (0, 2) else None
print(json.dumps({"rc": result.exit_code, "s": elapsed, "maxrss_mb": peak_mb(), "output": result.output,
                  "exception": crashed}))
"""


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM starts afresh at exec, unlike getrusage's ru_maxrss)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _python(script: str, arg: object, cwd: Path, timeout: float) -> dict:
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(arg)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def measure(args: list[str], cwd: Path) -> dict:
    return _python(MEASURE, args, cwd, 60)


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def _where(kind: str, hostile: str, tmp_path: Path) -> tuple[list[str], str]:
    """The command that reads ``hostile`` as a ``kind``, and the file its error must name."""
    (tmp_path / "load.yaml").write_text(VALID_SCENARIO)
    (tmp_path / "ok.yaml").write_text(VALID_DRILL)
    if kind == "drill":
        (tmp_path / "bad.yaml").write_text(hostile)
        return ["validate", "bad.yaml"], "bad.yaml"
    if kind == "scenario":
        (tmp_path / "load.yaml").write_text(hostile)
        return ["validate", "ok.yaml"], "load.yaml"
    if kind == "load":  # `drill load SCENARIO` reads the scenario file on its own
        (tmp_path / "load.yaml").write_text(hostile)
        return ["load", "load.yaml", "--target", "http://127.0.0.1:9"], "load.yaml"
    if kind == "stack":
        (tmp_path / "stack.yaml").write_text(hostile)
        return ["stack", "up", "--config", "stack.yaml", "--state-dir", str(tmp_path / "state")], "stack.yaml"
    assert kind == "set"
    return ["validate", "ok.yaml", "--set", f"seed={hostile.strip()}"], "<--set>"


@pytest.mark.parametrize("kind", ["drill", "scenario", "load", "stack", "set"])
@pytest.mark.parametrize("name", ["bomb", "deep_flow", "deep_block"])
def test_hostile_yaml_is_refused_fast_with_a_located_error(kind: str, name: str, tmp_path: Path) -> None:
    hostile = {"bomb": BOMB, "deep_flow": DEEP, "deep_block": DEEP_BLOCK}[name]
    if kind == "set":  # a value on the command line is one line: flow style
        hostile = {"bomb": FLOW_BOMB, "deep_flow": DEEP, "deep_block": "{a: " * 3000 + "}" * 3000}[name]
    args, source = _where(kind, hostile, tmp_path)
    before = _files(tmp_path)
    got = measure(args, tmp_path)
    assert got["rc"] == 2, got
    assert got["exception"] is None and "Traceback" not in got["output"], got
    assert re.search(rf"^{re.escape(source)}:\d+:\d+: error: ", got["output"], re.M), got["output"]
    assert _files(tmp_path) == before, "nothing may be created"
    assert got["s"] < 2.0, f"took {got['s']:.2f} CPU-s"  # typically 0.1-0.3 s; 2 s on a slow CI box
    assert got["maxrss_mb"] < 120, f"peak memory {got['maxrss_mb']:.0f} MB"


def test_the_bomb_is_stopped_while_composing_at_the_alias_that_crosses_the_limit() -> None:
    doc = load_located(BOMB, "bomb.yaml")
    assert doc.data is None and len(doc.diagnostics) == 1
    d = doc.diagnostics[0]
    assert d.position.line == 5 and d.position.col > 1, d.render()  # 10**5 values > the limit at the 5th line
    assert "expands to more than" in d.message


def test_nesting_limit_points_at_the_first_bracket_beyond_it() -> None:
    doc = load_located("x: " + "[" * 100 + "]" * 100, "deep.yaml")
    (d,) = doc.diagnostics
    assert (d.position.line, d.position.col) == (1, 3 + MAX_DEPTH), d.render()  # '[' number 64 is one level too deep


def test_an_alias_deep_structure_counts_toward_depth() -> None:
    text = "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n"
    (d,) = load_located(text, "x.yaml").diagnostics
    assert d.position.line == 2 and "nest deeper" in d.message


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: &a [*a]\n", "used inside the value it names"),
        ("a: *nowhere\n", "names no anchor"),
        ("a: &x 1\nb: &x 2\n", "defined twice"),
        ("a: 1\n---\nb: 2\n", "second YAML document"),
        ("a: " + ", ".join(["*x"] * 1001) + "\n", "names no anchor"),
        ("x: &x 1\na: [" + ", ".join(["*x"] * 1001) + "]\n", "more than 1000 aliases"),
    ],
)
def test_alias_and_document_problems_are_located(text: str, message: str) -> None:
    doc = load_located(text, "x.yaml")
    assert doc.data is None and doc.diagnostics, text
    assert message in doc.diagnostics[0].message, doc.diagnostics[0].render()


def test_merge_keys_and_ordinary_anchors_still_work() -> None:
    doc = load_located("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  z: 3\nlist: &l [1, 2]\nagain: *l\n", "x.yaml")
    assert not doc.diagnostics
    assert doc.data == {"base": {"x": 1, "y": 2}, "use": {"x": 1, "y": 2, "z": 3}, "list": [1, 2], "again": [1, 2]}
    assert doc.locations.position_of(("use", "z")).line == 4


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", ".NaN", "1.0e+999", "-1.5e+400"])
def test_non_finite_numbers_are_refused_where_written(value: str, tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(
        f"name: x\nseed: 1\ntarget: {{kind: openai, config: {{url: 'http://127.0.0.1:1'}}}}\n"
        f"scenario:\n  arrival: {{process: poisson, rate: {value}}}\n"
        "  pools: [{name: a, input_tokens: {dist: fixed, value: 1},\n"
        "           output_tokens: {dist: fixed, value: 1}}]\n"
    )
    with pytest.raises(SpecError) as info:
        load_drill(path)
    (only,) = info.value.diagnostics
    assert (only.position.line, only.position.col) == (5, 37), info.value.render()
    assert "is not a finite number" in only.message


# --- any generated input up to the 4 MiB size limit: within 2 s and 200 MB, exit 0 or 2 -------------

FOUR_MIB = 4 * 1024 * 1024

#: Validates each file in this interpreter; prints per file: exit code, CPU seconds (see MEASURE), whether it crashed.
MEASURE_MANY = """
import json, sys, time
from click.testing import CliRunner
from drill.cli.main import cli
from tests.spec.test_hostile_yaml import peak_mb
out = []
for path in json.loads(sys.argv[1]):
    start = time.process_time()
    result = CliRunner().invoke(cli, ["validate", path])
    out.append({"path": path, "rc": result.exit_code, "s": time.process_time() - start,
                "crash": repr(result.exception) if result.exit_code not in (0, 2) else None,
                "head": result.output[:300]})
print(json.dumps({"files": out, "maxrss_mb": peak_mb()}))
"""


def _big_inputs(rng) -> dict[str, bytes]:
    """Inputs near 4 MiB built from every shape that costs a YAML reader work."""
    fit = lambda text: text[:FOUR_MIB]  # noqa: E731
    valid = (REPO / "drills/unbounded-queue.yaml").read_bytes()
    mutated = bytearray(valid * (FOUR_MIB // len(valid)))
    for _ in range(2000):
        mutated[rng.randrange(len(mutated))] = rng.choice(b":-[]{}&*!|>'\"\n\t #")
    return {
        "flat-list": fit("x: [" + "1," * FOUR_MIB).encode(),
        "many-keys": fit("".join(f"k{i}: {i}\n" for i in range(FOUR_MIB // 8))).encode(),
        "deep-flow": fit("x: " + "[" * FOUR_MIB).encode(),
        "deep-block": fit("".join(" " * i + "- a\n" for i in range(3000)) + "#" * FOUR_MIB).encode(),
        "long-scalar": fit("name: " + "a" * FOUR_MIB).encode(),
        "long-quoted": fit('name: "' + "\\u00e9" * FOUR_MIB).encode(),
        "blank-lines": b"\n" * FOUR_MIB,
        "comment": fit("# " + "x" * FOUR_MIB).encode(),
        "anchors": fit("".join(f"k{i}: &a{i} [1, 2]\n" for i in range(FOUR_MIB // 14))).encode(),
        "aliases": fit("a: &a [1]\nb: [" + "*a, " * FOUR_MIB).encode(),
        "wide-bomb": fit("a: &a [" + "x, " * 5000 + "]\nb: [" + "*a, " * FOUR_MIB).encode(),
        "random-bytes": bytes(rng.randrange(256) for _ in range(FOUR_MIB)),
        "random-yaml-chars": bytes(rng.choice(b"ab1:-[]{}&*, \n") for _ in range(FOUR_MIB)),
        "mutated-drills": bytes(mutated),
        "many-errors": fit(
            "name: x\ntarget: {kind: embedded}\nscenario: s\nfaults: [" + "{kind: nope, start: -1s}, " * FOUR_MIB
        ).encode(),
    }


def test_any_generated_input_up_to_4_mib_validates_within_2_s_and_200_mb(tmp_path: Path) -> None:
    import random

    paths = []
    for name, raw in _big_inputs(random.Random(11)).items():
        assert len(raw) <= FOUR_MIB, name
        path = tmp_path / f"{name}.yaml"
        path.write_bytes(raw)
        paths.append(str(path))
    before = _files(tmp_path)
    report = _python(MEASURE_MANY, paths, tmp_path, 300)
    for got in report["files"]:
        assert got["rc"] in (0, 2) and got["crash"] is None, got
        assert "Traceback" not in got["head"], got
        assert got["s"] < 2.0, f"{got['path']} took {got['s']:.2f} CPU-s"
    assert report["maxrss_mb"] < 200, f"peak memory {report['maxrss_mb']:.0f} MB"
    assert _files(tmp_path) == before


def test_a_path_the_system_cannot_even_look_up_is_a_located_error(tmp_path: Path) -> None:
    got = measure(["validate", "x" * 300], tmp_path)  # ENAMETOOLONG from stat() itself
    assert got["rc"] == 2 and got["exception"] is None, got
    assert got["output"].startswith("x" * 300 + ":1:1: error: cannot read file"), got["output"][:400]
