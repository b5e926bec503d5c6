"""``drill judge`` and ``drill report`` on run directories someone else made (issue 21): a damaged ``resolved.json``
is exit 2 naming it, a run with no check is an error (not a PASS), evidence of the wrong type or missing evidence
is INCONCLUSIVE with the file (and line), and a run directory that cannot be written is exit 2 with a message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.common import interrupts_kept
from drill.cli.main import cli
from tests.runner.judged_run import record_line, write_run_dir


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def _resolved(run: Path, **changes) -> None:
    doc = json.loads((run / "resolved.json").read_text())
    doc.update(changes)
    (run / "resolved.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[]", "must be a JSON object, not a list"),
        ("null", "must be a JSON object, not null"),
        ('{"drill": {"checks": [{"name": "x"}]}}', "drill.checks[0].kind must be the check's kind"),
        ('{"drill": {"checks": "error_rate"}}', "drill.checks must be a list"),
        ('{"drill": []}', "drill must be an object"),
        ('{"drill": {"checks": [{"kind": "error_rate"}]}, "check_params": [{"max": "x"}]}', "check_params[0]"),
        ('{"drill": {"checks": [{"kind": "error_rate"}], "slo": {"ttft_p95": "fast"}}}', "drill.slo.ttft_p95"),
        ('{"drill": {"checks": [{"kind": "slo"}]}, "scenario": {"pools": [7]}}', "scenario.pools[0]"),
        ('{"drill"', "not valid JSON"),
    ],
)
@pytest.mark.parametrize("command", ["judge", "report"])
def test_a_damaged_resolved_json_is_exit_2_naming_it(tmp_path: Path, text: str, says: str, command: str) -> None:
    if command == "report" and says == "check_params[0]":
        pytest.skip("the report shows the verdicts the run wrote; it does not read the checks' params")
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    (run / "resolved.json").write_text(text)
    result = _invoke(command, str(run), *(["--no-progress"] if command == "report" else []))
    assert result.exit_code == 2, result.output
    assert "resolved.json" in result.output and says in result.output
    assert "internal error" not in result.output and "Traceback" not in result.output


def test_a_run_directory_with_no_check_is_an_error_not_a_pass(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    (run / "resolved.json").write_text("{}")
    result = _invoke("judge", str(run))
    assert result.exit_code == 2, result.output
    assert "nothing to judge" in result.output


def _slo_run(tmp_path: Path, records: list[str]) -> Path:
    run = write_run_dir(tmp_path, records)
    _resolved(
        run,
        drill={"name": "d", "faults": [], "slo": {}, "checks": [{"kind": "slo", "name": "slo"}]},
        check_params=[{"phase": "fault", "min_requests": 5}],
    )
    return run


@pytest.mark.parametrize(
    ("field", "value"),
    [("ttft_ms", "fast"), ("e2e_ms", [1]), ("intended_ts", None), ("status", 2.5), ("chunk_offsets_ms", ["x"])],
)
def test_a_record_of_the_wrong_type_makes_the_check_inconclusive_with_file_and_line(
    tmp_path: Path, field: str, value: object
) -> None:
    records = [record_line(i) for i in range(10)]
    bad = json.loads(records[3])
    bad[field] = value
    records[3] = json.dumps(bad)
    run = _slo_run(tmp_path, records)
    result = _invoke("judge", str(run), "--json")
    assert result.exit_code == 1, result.output
    (check,) = json.loads(result.output)["checks"]
    assert check["status"] == "INCONCLUSIVE", check
    assert "requests.jsonl:4" in check["message"] and field in check["message"]


def test_a_record_with_a_number_too_large_for_a_float_is_counted_not_raised(tmp_path: Path) -> None:
    records = [record_line(i) for i in range(10)]
    records[2] = records[2].replace('"ttft_ms": 50.0', '"ttft_ms": 1' + "0" * 400)
    run = _slo_run(tmp_path, records)
    result = _invoke("judge", str(run), "--json")
    (check,) = json.loads(result.output)["checks"]
    assert check["status"] == "INCONCLUSIVE" and "requests.jsonl:3" in check["message"]


def test_with_the_journal_missing_fault_landed_is_inconclusive_not_fail(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    _resolved(
        run,
        drill={"name": "d", "faults": [{"kind": "queue_flood"}], "slo": {}, "checks": [{"kind": "fault_landed"}]},
        check_params=[{}],
    )
    (run / "journal.jsonl").unlink()
    result = _invoke("judge", str(run), "--json")
    assert result.exit_code == 1, result.output
    (check,) = json.loads(result.output)["checks"]
    assert check["status"] == "INCONCLUSIVE", check
    assert "journal.jsonl is missing" in check["message"]


def test_with_the_records_missing_error_rate_is_inconclusive(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    (run / "requests.jsonl").unlink()
    result = _invoke("judge", str(run), "--json")
    (check,) = json.loads(result.output)["checks"]
    assert check["status"] == "INCONCLUSIVE" and "requests.jsonl is missing" in check["notes"]


def test_a_run_directory_that_cannot_be_written_is_exit_2(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    (run / "report.md").mkdir()  # a directory where the report goes: it cannot be replaced
    result = _invoke("report", str(run), "--no-progress")
    assert result.exit_code == 2, result.output
    assert "cannot write" in result.output and "internal error" not in result.output


def test_a_ctrl_c_that_something_swallowed_still_ends_the_command() -> None:
    """A KeyboardInterrupt caught by code the command calls (a finalizer, a callback) is not lost."""

    def swallowing() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs here, inside the try
        except KeyboardInterrupt:
            pass

    with pytest.raises(KeyboardInterrupt), interrupts_kept():
        swallowing()


def test_a_ctrl_c_in_a_finalizer_is_not_printed_as_an_ignored_exception_and_still_ends_the_command(
    monkeypatch,
) -> None:
    """SIGINT landing in a finalizer (as it can in the import system's module-lock callback while ``drill report``
    imports) is handed to ``sys.unraisablehook``, whose default prints "Exception ignored in" and a traceback."""
    printed: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: printed.append(info.exc_value))

    class Finalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs here, inside the finalizer

    with pytest.raises(KeyboardInterrupt), interrupts_kept():
        Finalized()  # dropped at once: its finalizer runs here
        time.sleep(0.05)
    assert printed == []
    hook = sys.unraisablehook
    with interrupts_kept():  # anything else goes to the hook as before, and the hook is restored after the block
        sys.unraisablehook(type("Args", (), {"exc_value": ValueError("x")})())
    assert [type(e) for e in printed] == [ValueError] and sys.unraisablehook is hook


@pytest.mark.parametrize(
    ("field", "value"), [("ts", "soon"), ("ts", True), ("seq", 1.5), ("phase", ["fault"]), ("planned_s", "long")]
)
def test_a_journal_line_of_the_wrong_type_makes_the_check_inconclusive_with_file_and_line(
    tmp_path: Path, field: str, value: object
) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    lines = (run / "journal.jsonl").read_text().splitlines()
    entry = json.loads(lines[1])  # phase_started fault
    assert entry["event"] == "phase_started"
    entry[field] = value
    lines[1] = json.dumps(entry)
    (run / "journal.jsonl").write_text("\n".join(lines) + "\n")
    result = _invoke("judge", str(run), "--json")
    (check,) = json.loads(result.output)["checks"]
    assert check["status"] == "INCONCLUSIVE", check
    said = " ".join([check["message"], *check["notes"]])
    assert "journal.jsonl:2" in said and field in said, said


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="watches /proc/PID/maps for the report's imports")
@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_during_drill_report_exits_130(tmp_path: Path, inherited: str) -> None:
    """SIGINT while `drill report` imports and renders is exit 130 ("interrupted"), never click's exit 1 or a
    report finished with exit 0 — also when it was started with SIGINT ignored, as a shell starts a background job
    (the runner's signal guard handles SIGINT the same way)."""
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])

    def start() -> None:
        if inherited == "ignored":
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        [sys.executable, "-m", "drill", "report", str(run), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=start,
    )
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and "numpy" not in _read_or_empty(maps):
        time.sleep(0.01)  # until the report's own imports began: the command's handlers are in place by then
    while proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
    stderr = proc.stderr.read().decode()
    # 130; or killed by one of the later SIGINTs while the interpreter shut down (-2, which a shell shows as 130)
    assert proc.returncode in (130, -signal.SIGINT), stderr
    assert "interrupted (^C)" in stderr and "Traceback" not in stderr


def test_with_an_empty_journal_fault_landed_is_inconclusive_not_fail(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    _resolved(
        run,
        drill={"name": "d", "faults": [{"kind": "queue_flood"}], "slo": {}, "checks": [{"kind": "fault_landed"}]},
        check_params=[{}],
    )
    (run / "journal.jsonl").write_bytes(b"\x00" * 4096)  # what a crash can leave: a NUL tail, no event
    result = _invoke("judge", str(run), "--json")
    (check,) = json.loads(result.output)["checks"]
    assert check["status"] == "INCONCLUSIVE", check


@pytest.mark.parametrize(
    "text", ["[]", "null", "7", '{"checks": 5}', '{"checks": [5]}', '{"checks": [{"kind": 5}]}', '{"checks": [{']
)
def test_report_of_a_damaged_verdicts_json_is_exit_2_naming_it(tmp_path: Path, text: str) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    (run / "verdicts.json").write_text(text)
    result = _invoke("report", str(run), "--no-progress")
    assert result.exit_code == 2, result.output
    said = "not valid JSON" if text.endswith("{") else "not a verdicts document"  # unparsable, or the wrong shape
    assert "verdicts.json" in result.output and said in result.output and "internal error" not in result.output


@pytest.mark.parametrize("command", ["judge", "report"])
def test_a_journal_time_no_clock_can_read_is_an_unreadable_line_not_an_overflow(tmp_path: Path, command: str) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    lines = (run / "journal.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    last["ts"] = 1e308
    lines[-1] = json.dumps(last)
    (run / "journal.jsonl").write_text("\n".join(lines) + "\n")
    result = _invoke(command, str(run), *(["--no-progress"] if command == "report" else ["--json"]))
    assert result.exit_code in (0, 1), result.output
    assert "internal error" not in result.output and "Overflow" not in result.output
    if command == "judge":
        assert json.loads(result.output)["reads"]["journal.jsonl"]["bad_count"] == 1
