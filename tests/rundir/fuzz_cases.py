"""The cases of the run-directory fuzz test, run in ONE child process: ``python -m tests.rundir.fuzz_cases SEED N DIR``.

Each case copies a received run directory (:func:`tests.rundir.received.received_run`), damages it with one to
three mutations drawn from a seeded ``random.Random`` — bytes flipped, deleted or inserted; a file replaced by a
link (out of the directory, inside it, dangling, to a folder), a FIFO, a folder, a huge line, JSON nested 100,000
deep, a value of the wrong type, a zero-filled tail; links planted at the report's names — then runs ``drill judge
--json``, ``drill report`` and ``drill traces analyze`` on it in this process (click's runner), each under a
20 s alarm. One JSON line per command says what happened; the test (``test_fuzz_run_dirs.py``) judges them and
this process's peak memory. Running in-process keeps a case under a second; a FIFO that blocked would be
interrupted by the alarm and reported as a hang.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from drill.cli.main import cli
from tests.rundir.received import received_run, span_line

FILES = ("resolved.json", "journal.jsonl", "requests.jsonl", "spans.jsonl", "verdicts.json", "env.json", "runbook.md")
JSON_LINES = ("journal.jsonl", "requests.jsonl", "spans.jsonl")
#: Report files a command may create in the run directory; nothing else may appear anywhere.
REPORT_FILES = {"report.md", "report.html", "latency-over-time.svg"}  # the report files, and report.md's chart
ALARM_S = 20
WRONG = [None, True, -1, 2**63, 2**64 + 1, 1e308, "fast", "", [], [1, [2]], {}, {"a": {"b": None}}, "[/x]", "9" * 5000]


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` in drill swallows it."""


def _on_alarm(signum, frame):  # noqa: ANN001 - a signal handler's signature
    raise Hang(f"still running after {ALARM_S} s")


# --- mutations ---------------------------------------------------------------------------------------


def _regular(run: Path, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` that are still regular files (an earlier mutation may have replaced one)."""
    return [n for n in names if (run / n).is_file() and not (run / n).is_symlink()]


def _replace(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def flip_bytes(rng: random.Random, run: Path, outside: Path) -> str:
    names = _regular(run, FILES)
    if not names:
        return "nothing left to flip"
    name = rng.choice(names)
    data = bytearray((run / name).read_bytes())
    for _ in range(rng.randint(1, 8)):
        op, pos = rng.choice(("flip", "delete", "insert")), rng.randrange(max(1, len(data)))
        if op == "flip" and data:
            data[pos] = rng.randrange(256)
        elif op == "delete" and data:
            del data[pos]
        else:
            data[pos:pos] = rng.choice([b"\x00", b"\xff", b"{", b"]", b'"', b"\n", b"\\u0000", b"1e999", b"-"])
    (run / name).write_bytes(bytes(data))
    return f"bytes of {name}"


def link_out(rng: random.Random, run: Path, outside: Path) -> str:
    name = rng.choice((*FILES, ".report.md.tmp", "report.md", "report.html", ".report.html.tmp"))
    _replace(run / name)
    target = rng.choice(
        [outside / "secret.txt", outside, outside / "missing", run / "journal.jsonl", Path("/dev/zero")]
    )
    (run / name).symlink_to(target)
    return f"{name} -> {target}"


def fifo(rng: random.Random, run: Path, outside: Path) -> str:
    name = rng.choice((*FILES, "ledger/replica-0.jsonl", "metrics.jsonl", "replay.jsonl", "fitted-prompts.json"))
    (run / name).parent.mkdir(exist_ok=True)
    _replace(run / name)
    os.mkfifo(run / name)
    return f"FIFO at {name}"


def folder(rng: random.Random, run: Path, outside: Path) -> str:
    name = rng.choice(FILES)
    _replace(run / name)
    (run / name).mkdir()
    return f"folder at {name}"


def linked_folder(rng: random.Random, run: Path, outside: Path) -> str:
    name = rng.choice(("ledger", "variants"))
    _replace(run / name)
    (run / name).symlink_to(outside)
    return f"{name}/ -> {outside}"


def huge_line(rng: random.Random, run: Path, outside: Path) -> str:
    names = _regular(run, JSON_LINES)
    if not names:
        return "no JSON-lines file left"
    name = rng.choice(names)
    size = rng.choice((9, 20)) * 1024**2
    with (run / name).open("ab") as fh:
        fh.write(b'{"x": "' + b"a" * size + b'"}' + (b"\n" if rng.random() < 0.5 else b""))
    return f"a {size} byte line in {name}"


def deep_line(rng: random.Random, run: Path, outside: Path) -> str:
    names = _regular(run, (*JSON_LINES, "resolved.json", "verdicts.json", "env.json"))
    if not names:
        return "no JSON file left"
    name = rng.choice(names)
    depth = rng.choice((100, 1000, 100_000))
    deep = ("[" * depth + "]" * depth) if rng.random() < 0.5 else ('{"a":' * depth + "1" + "}" * depth)
    if name.endswith(".json"):
        (run / name).write_text('{"drill": ' + deep + ', "checks": ' + deep + "}")
    else:
        with (run / name).open("a") as fh:
            fh.write(
                span_line(7)[:-1] + f', "attributes": {{"d": {deep}}}}}\n' if name == "spans.jsonl" else deep + "\n"
            )
    return f"JSON {depth} deep in {name}"


def wrong_type(rng: random.Random, run: Path, outside: Path) -> str:
    names = _regular(run, (*JSON_LINES, "resolved.json", "verdicts.json", "env.json"))
    value = rng.choice(WRONG)
    try:
        name = rng.choice(names)
        text = (run / name).read_text()
        doc = json.loads(text) if name.endswith(".json") else None
        lines = text.splitlines()
        record = json.loads(lines[index := rng.randrange(len(lines))]) if doc is None else None
    except (ValueError, IndexError, RecursionError):
        return "no JSON left to retype"
    if name.endswith(".json"):
        key = rng.choice([*doc, "drill", "checks"]) if isinstance(doc, dict) else None
        doc = value if key is None or rng.random() < 0.3 else {**doc, key: value}
        (run / name).write_text(json.dumps(doc))
        return f"{name}: {key} = {str(value)[:20]}"
    if not isinstance(record, dict) or not record:
        return "no record left to retype"
    key = rng.choice(sorted(record))
    record[key] = value
    lines[index] = json.dumps(record)
    (run / name).write_text("\n".join(lines) + "\n")
    return f"{name}:{index + 1}: {key} = {str(value)[:20]}"


def nul_tail(rng: random.Random, run: Path, outside: Path) -> str:
    names = _regular(run, JSON_LINES)
    if not names:
        return "no JSON-lines file left"
    name = rng.choice(names)
    with (run / name).open("ab") as fh:
        fh.truncate(fh.tell() + rng.choice((1, 4096, 30 * 1024**2)))
    return f"NUL tail on {name}"


def check_kinds(rng: random.Random, run: Path, outside: Path) -> str:
    try:
        resolved = json.loads((run / "resolved.json").read_text()) if _regular(run, ("resolved.json",)) else None
        checks = resolved["drill"]["checks"]  # type: ignore[index]
        checks.append(None)
        checks.pop()
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return "no checks left to change"
    checks.append(rng.choice([{"kind": "fault_landed"}, {"kind": "no_such"}, {"name": "x"}, {"kind": 3}, "slo"]))
    resolved["check_params"] = rng.choice([resolved["check_params"], None, [None], "x", [{"max": "x"}]])
    (run / "resolved.json").write_text(json.dumps(resolved))
    return "checks of resolved.json"


def sweep_escape(rng: random.Random, run: Path, outside: Path) -> str:
    where = rng.choice(["../../..", str(outside), "variants/a", "/"])
    (run / "sweep.json").write_text(json.dumps({"variable": "x", "variants": [{"label": "a", "run_dir": where}]}))
    return f"sweep.json variant at {where}"


MUTATIONS: list[Callable[[random.Random, Path, Path], str]] = [
    flip_bytes,
    flip_bytes,
    link_out,
    fifo,
    folder,
    linked_folder,
    huge_line,
    deep_line,
    wrong_type,
    wrong_type,
    nul_tail,
    check_kinds,
    sweep_escape,
]

# --- running -----------------------------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed) -> a digest of what it is."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "link:" + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[str(path)] = "other"
    return out


def _commands(run: Path) -> list[list[str]]:
    return [["judge", str(run), "--json"], ["report", str(run)], ["traces", "analyze", str(run / "spans.jsonl")]]


def _problems(result, seconds: float) -> list[str]:
    found = []
    if result.exit_code == 3:
        found.append("exit 3")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        found.append(f"uncaught {type(result.exception).__name__}: {result.exception}"[:300])
    if "Traceback (most recent call last)" in result.output:
        found.append("a traceback in the output")
    if seconds > ALARM_S:
        found.append(f"took {seconds:.1f} s")
    return found


def _changes(before: dict[str, str], after: dict[str, str], run: Path) -> list[str]:
    """What a command changed under the case's folder besides the report files (a link at a report file's name
    may be replaced by the file: that is the write not following it)."""
    allowed = {str(run / name) for name in REPORT_FILES}
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    return sorted(f"changed {p}" for p in changed - allowed)


def run_case(rng: random.Random, index: int, base: Path, sandbox: Path) -> list[dict]:
    case = sandbox / f"case-{index}"
    outside, run = case / "outside", case / "reports" / "fuzz" / "20261201T000000Z-abcdef"
    outside.mkdir(parents=True)
    (outside / "secret.txt").write_text("secret outside the run directory\n")
    shutil.copytree(base, run, symlinks=True)
    applied = [rng.choice(MUTATIONS)(rng, run, outside) for _ in range(rng.randint(1, 3))]
    lines = []
    for args in _commands(run):
        before = _snapshot(case)
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, ALARM_S, 1.0)  # then every second, until the command gives up
        try:
            result = CliRunner().invoke(cli, args, catch_exceptions=True)
            problems = _problems(result, time.monotonic() - start)
            code = result.exit_code
        except Hang as exc:
            problems, code = [f"hang: {exc}"], None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        problems += _changes(before, _snapshot(case), run)
        output = result.output if code is not None else ""
        if "secret outside the run directory" in output:
            problems.append("printed the content of a file outside the run directory")
        lines.append(
            {
                "case": index,
                "mutations": applied,
                "command": args[0],
                "exit": code,
                "problems": problems,
                "seconds": round(time.monotonic() - start, 2),
            }
        )
    for name in REPORT_FILES:  # the content of a file outside must never reach a report either
        path = run / name
        if path.is_file() and not path.is_symlink() and "secret outside" in path.read_text(errors="replace"):
            lines[-1]["problems"].append(f"{name} holds the content of a file outside the run directory")
    shutil.rmtree(case)
    return lines


def main(seed: int, count: int, sandbox: Path) -> None:
    signal.signal(signal.SIGALRM, _on_alarm)
    base = received_run(sandbox / "base", requests=60)
    rng = random.Random(seed)
    for index in range(count):
        for line in run_case(rng, index, base, sandbox):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
