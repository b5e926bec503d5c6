"""A run directory or input file made by someone else (issue 21): refused or read within bounds, never followed out.

Each test runs ``drill`` as a child process, as a reviewer would on a received run directory, and checks the
exit code, the time, the child's own peak memory, and that nothing outside the directory was read or written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.rundir.received import received_run, run_drill, span_line

SECRET = "secret-line-from-outside-the-run-directory"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the run directory that no command may read or change."""
    path = tmp_path / "outside.txt"
    path.write_text(SECRET + "\n")
    return path


def _run(tmp_path: Path) -> Path:
    return received_run(tmp_path / "reports" / "received" / "20261201T000000Z-abcdef", requests=60)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_a_symlinked_runbook_is_refused_and_its_target_never_reaches_the_report(tmp_path: Path, outside: Path) -> None:
    run = _run(tmp_path)
    (run / "runbook.md").unlink()
    (run / "runbook.md").symlink_to(outside)
    ran = run_drill("report", str(run))
    assert ran.code == 2, ran.text
    assert "runbook.md" in ran.err and "symbolic link" in ran.err
    assert SECRET not in ran.text
    assert not (run / "report.md").exists() and not (run / "report.html").exists()


def test_a_link_planted_at_the_reports_temporary_name_is_not_written_through(tmp_path: Path, outside: Path) -> None:
    run = _run(tmp_path)
    (run / ".report.md.tmp").symlink_to(outside)
    ran = run_drill("report", str(run))
    assert ran.code == 2, ran.text
    assert outside.read_text() == SECRET + "\n"


def test_report_and_judge_of_a_received_run_create_only_the_report_files(tmp_path: Path, outside: Path) -> None:
    """Nothing is created outside the run directory either: not even matplotlib's font cache in a fresh home."""
    run = _run(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CACHE_HOME": "", "XDG_CONFIG_HOME": "", "MPLCONFIGDIR": ""}
    before = _files(tmp_path)
    reports = {str((run / n).relative_to(tmp_path)) for n in ("report.md", "report.html")}
    chart = str((run / "latency-over-time.svg").relative_to(tmp_path))  # report.md's chart, when the run has one
    ran = run_drill("report", str(run), env=env)
    assert ran.code == 0, ran.text
    created = _files(tmp_path) - before
    assert reports <= created <= reports | {chart}
    ran = run_drill("judge", str(run), env=env)
    assert ran.code in (0, 1), ran.text
    assert _files(tmp_path) - before == created


def test_the_runbook_is_read_from_the_run_directory_only(tmp_path: Path, outside: Path) -> None:
    """``resolved.json`` names the drill file of another machine; its folder is not read for a runbook."""
    run = _run(tmp_path)
    (run / "runbook.md").unlink()
    resolved = json.loads((run / "resolved.json").read_text())
    resolved["drill_file"] = str(outside.parent / "drill.yaml")
    resolved["drill"]["runbook"] = outside.name
    (run / "resolved.json").write_text(json.dumps(resolved))
    ran = run_drill("report", str(run))
    assert ran.code == 0, ran.text
    assert SECRET not in (run / "report.md").read_text() + (run / "report.html").read_text()


@pytest.mark.parametrize("name", ["resolved.json", "journal.jsonl", "requests.jsonl", "spans.jsonl"])
@pytest.mark.parametrize("command", ["judge", "report"])
def test_a_fifo_in_a_run_directory_is_refused_without_blocking(tmp_path: Path, name: str, command: str) -> None:
    run = _run(tmp_path)
    (run / name).unlink()
    os.mkfifo(run / name)
    ran = run_drill(command, str(run))
    assert not ran.timed_out, "blocked on the FIFO"
    assert ran.code == 2, ran.text
    assert "FIFO" in ran.err and name in ran.err


@pytest.mark.parametrize("command", [["validate"], ["plan"], ["traces", "analyze"]])
def test_a_fifo_or_device_given_as_an_input_file_is_refused_without_blocking(tmp_path: Path, command: list) -> None:
    fifo = tmp_path / "x.yaml"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        ran = run_drill(*command, path)
        assert not ran.timed_out, f"{command} blocked on {path}"
        assert ran.code == 2, ran.text
        assert "Traceback" not in ran.text


def test_the_size_of_a_drill_file_is_checked_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "x.yaml"
    with big.open("wb") as fh:
        fh.truncate(1024**3)  # sparse: 1 GiB of NUL bytes
    ran = run_drill("validate", str(big))
    assert ran.code == 2, ran.text
    assert "limited to" in ran.err
    assert ran.max_rss_mb < 250, f"validate of a 1 GiB file peaked at {ran.max_rss_mb:.0f} MB"


def test_cleanup_dry_run_on_a_journal_with_a_long_nul_tail_is_bounded_and_says_what_it_skipped(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    with (run / "journal.jsonl").open("ab") as fh:
        fh.truncate(fh.tell() + 600 * 1024**2)  # what a crash can leave: a zero-filled tail
    ran = run_drill("cleanup", "--dry-run", "--run-dir", str(run), "--reports", str(tmp_path / "none"))
    assert ran.code == 0, ran.text
    assert "NUL bytes skipped" in ran.out
    assert ran.max_rss_mb < 250, f"cleanup --dry-run peaked at {ran.max_rss_mb:.0f} MB"


def test_a_span_time_past_int64_is_bad_evidence_located_not_an_overflow(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with (run / "spans.jsonl").open("a") as fh:
        fh.write(span_line(999, start_ns=2**63) + "\n")
    ran = run_drill("judge", str(run), "--json")
    assert ran.code == 1, ran.text
    doc = json.loads(ran.out)
    spans = next(c for c in doc["checks"] if c["name"] == "spans")
    assert spans["status"] == "INCONCLUSIVE", spans
    assert "spans.jsonl:61" in spans["message"] + " ".join(spans["notes"]), spans
    ran = run_drill("traces", "analyze", str(run / "spans.jsonl"), "--json")
    assert ran.code in (0, 1) and "Traceback" not in ran.text, ran.text
    assert json.loads(ran.out)["files"][0]["unreadable"] == 1


@pytest.mark.parametrize("name", ["requests.jsonl", "spans.jsonl"])
def test_json_nested_100000_deep_is_a_located_bad_line(tmp_path: Path, name: str) -> None:
    run = _run(tmp_path)
    deep = "[" * 100_000 + "]" * 100_000
    line = json.dumps({"x": 1})[:-1] + f', "deep": {deep}}}'
    if name == "spans.jsonl":
        line = span_line(999)[:-1] + f', "resource": {{"d": {deep}}}}}'
    with (run / name).open("a") as fh:
        fh.write(line + "\n")
    ran = run_drill("judge", str(run), "--json")
    assert ran.code == 1, ran.text
    doc = json.loads(ran.out)
    assert doc["reads"][name]["bad_count"] == 1, doc["reads"][name]
    assert doc["reads"][name]["bad_lines"][0]["line"] == 61


def test_json_nested_100000_deep_in_resolved_json_is_a_located_error(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run / "resolved.json").write_text('{"drill": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for command in ("judge", "report"):
        ran = run_drill(command, str(run))
        assert ran.code == 2, ran.text
        assert "resolved.json:1:" in ran.err and "nested more than" in ran.err


def test_a_line_over_the_cap_is_skipped_in_bounded_memory_and_counted(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with (run / "requests.jsonl").open("ab") as fh:
        fh.write(b'{"pad": "')
        for _ in range(400):
            fh.write(b"x" * 1024**2)
        fh.write(b'"}\n')
    ran = run_drill("judge", str(run), "--json")
    assert ran.code == 1, ran.text
    doc = json.loads(ran.out)
    errors = next(c for c in doc["checks"] if c["name"] == "errors")
    assert errors["status"] == "INCONCLUSIVE" and "requests.jsonl:61" in errors["message"]
    assert ran.max_rss_mb < 250, f"judge peaked at {ran.max_rss_mb:.0f} MB"


def test_cleanup_skips_a_journal_that_is_a_fifo_and_goes_on(tmp_path: Path) -> None:
    """One damaged run directory under reports/ neither blocks nor stops the search for the others."""
    run = _run(tmp_path)
    (run / "journal.jsonl").unlink()
    os.mkfifo(run / "journal.jsonl")
    ran = run_drill("cleanup", "--dry-run", "--reports", str(tmp_path / "reports"))
    assert not ran.timed_out, "blocked on the FIFO"
    assert ran.code == 0, ran.text
    assert "nothing to clean up" in ran.out


def test_what_was_appended_after_a_zero_filled_tail_is_still_read(tmp_path: Path) -> None:
    """A crash leaves zeros at the journal's end; the next writer (drill cleanup) appends right after them."""
    run = _run(tmp_path)
    lines = (run / "journal.jsonl").read_text().splitlines(keepends=True)
    finished = lines.pop()
    with (run / "journal.jsonl").open("wb") as fh:
        fh.write("".join(lines).encode())
        fh.truncate(fh.tell() + 12 * 1024**2)  # longer than the cap on one line
        fh.seek(0, os.SEEK_END)
        fh.write(finished.encode())
    ran = run_drill("judge", str(run), "--json")
    doc = json.loads(ran.out)
    assert doc["status"] == "completed", doc["status"]
    assert doc["reads"]["journal.jsonl"]["nul_bytes"] == 12 * 1024**2
    assert doc["reads"]["journal.jsonl"]["bad_count"] == 0
