"""drill.rundir.files: the one way to open an input file and to write into a run directory."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from drill.errors import InputError
from drill.rundir.files import (
    MAX_JSON_DEPTH,
    JsonTooDeep,
    UnsafeFileError,
    check_run_dir,
    inside,
    loads_json,
    open_input,
    read_bytes,
    read_json,
    read_lines,
    write_in_run_dir,
)


def test_a_link_anywhere_below_the_run_directory_is_refused(tmp_path: Path) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / "ledger").mkdir(parents=True)
    outside.mkdir()
    (outside / "replica-0.jsonl").write_text("{}\n")
    (run / "inner.jsonl").write_text("{}\n")
    (run / "link.jsonl").symlink_to(run / "inner.jsonl")  # even a link that stays inside
    (run / "ledger2").symlink_to(outside)
    assert open_input(run / "inner.jsonl", root=run).read() == b"{}\n"
    for path in (run / "link.jsonl", run / "ledger2" / "replica-0.jsonl"):
        with pytest.raises(UnsafeFileError, match="symbolic link"):
            open_input(path, root=run)
    assert open_input(run / "link.jsonl").read() == b"{}\n"  # outside a run directory a user's link is followed
    with pytest.raises(UnsafeFileError, match="outside the run directory"):
        open_input(outside / "replica-0.jsonl", root=run)
    with pytest.raises(UnsafeFileError):
        inside(run, "../outside")
    with pytest.raises(UnsafeFileError):
        inside(run, str(outside))
    assert inside(run, "variants/a") == run / "variants" / "a"
    with pytest.raises(UnsafeFileError, match="ledger2"):
        check_run_dir(run)


def test_special_files_are_refused_at_once_and_the_size_before_reading(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path, kind in ((tmp_path / "fifo", "FIFO"), (Path("/dev/zero"), "character device"), (tmp_path, "directory")):
        with pytest.raises(UnsafeFileError, match=kind):
            read_bytes(path)
    big = tmp_path / "big"
    with big.open("wb") as fh:
        fh.truncate(10**9)
    with pytest.raises(UnsafeFileError, match="1000000000 bytes; drill files are limited to 100"):
        read_bytes(big, limit=100, what="drill")
    with pytest.raises(FileNotFoundError):
        read_bytes(tmp_path / "missing")


def test_json_depth_is_bounded_and_located_and_brackets_in_strings_do_not_count() -> None:
    assert loads_json(json.dumps({"text": "[" * 10_000})) == {"text": "[" * 10_000}
    assert loads_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    with pytest.raises(JsonTooDeep) as caught:
        loads_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    assert caught.value.pos == MAX_JSON_DEPTH
    with pytest.raises(JsonTooDeep):
        loads_json('{"a":' * 100_000 + "1" + "}" * 100_000)


def test_read_json_locates_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "resolved.json"
    path.write_text('{\n  "drill": ' + "[" * 100 + "]" * 100 + "\n}")
    with pytest.raises(InputError, match=r"resolved.json:2:\d+: not valid JSON: JSON nested more than 64"):
        read_json(path)
    path.write_text('{"a": 1,\n "b": }')
    with pytest.raises(InputError, match=r"resolved.json:2:7: not valid JSON"):
        read_json(path)


def test_lines_are_capped_and_nul_runs_are_lines_of_their_own() -> None:
    data = b'{"a": 1}\n' + b"x" * 5000 + b"\n" + b"\x00" * 7000 + b'{"b": 2}\n' + b"\x00" * 3000
    lines = list(read_lines(io.BytesIO(data), limit=1000))
    assert [(line.number, line.data, line.size, line.only_nul, line.newline) for line in lines] == [
        (1, b'{"a": 1}\n', 9, False, True),
        (2, None, 5001, False, True),
        (3, None, 7000, True, False),  # a zero-filled tail, then what a later writer appended on the same line
        (3, b'{"b": 2}\n', 9, False, True),
        (4, None, 3000, True, False),
    ]
    assert "5001 bytes skipped" in (lines[1].problem(1000) or "")
    assert "3000 NUL bytes" in (lines[4].problem(1000) or "")


def test_writes_replace_a_planted_link_and_never_write_through_it(tmp_path: Path) -> None:
    run, victim = tmp_path / "run", tmp_path / "victim.txt"
    run.mkdir()
    victim.write_text("keep\n")
    (run / "report.md").symlink_to(victim)
    (run / ".report.md.tmp").symlink_to(victim)
    path = write_in_run_dir(run, "report.md", b"# report\n")
    assert victim.read_text() == "keep\n"
    assert not path.is_symlink() and path.read_text() == "# report\n"
    assert sorted(p.name for p in run.iterdir()) == [".report.md.tmp", "report.md"]  # no temporary file left
    with pytest.raises(ValueError):
        write_in_run_dir(run, "../escape.md", b"x")
    os.chmod(run, 0o500)
    try:
        if os.access(run, os.W_OK):  # root writes anyway
            return
        with pytest.raises(InputError, match="cannot write"):
            write_in_run_dir(run, "report.html", b"x")
    finally:
        os.chmod(run, 0o700)


def test_the_journal_is_never_appended_through_a_link(tmp_path: Path) -> None:
    from drill.rundir.journal import Journal

    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    (tmp_path / "journal.jsonl").symlink_to(victim)
    with pytest.raises(OSError):
        Journal(tmp_path / "journal.jsonl", by="cleanup")
    assert victim.read_text() == "keep\n"
