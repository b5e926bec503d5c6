"""``drill judge``: a past run re-judged from its directory alone, and read problems named in the verdicts."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from drill.cli.main import cli
from tests.runner.judged_run import record_line, write_run_dir


def _judge(run: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["judge", str(run), "--json"])
    return result.exit_code, json.loads(result.output)


def test_judge_re_evaluates_the_runs_checks_from_its_directory(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(9)] + [record_line(9, "refused")])
    code, doc = _judge(run)
    assert code == 0
    assert doc["schema"] == "llm-drill/verdicts/v1" and doc["status"] == "completed"
    (check,) = doc["checks"]
    assert (check["name"], check["kind"], check["status"]) == ("errors", "error_rate", "PASS")
    assert check["observed"]["error_rate"] == 0.1 and check["observed"]["requests"] == 10


def test_a_corrupted_record_line_is_named_and_the_check_does_not_pass(tmp_path: Path) -> None:
    """An error class the reader does not know must not vanish and make the error rate look better."""
    records = [record_line(i) for i in range(9)] + [record_line(9, "a-class-from-the-future"), record_line(10)]
    run = write_run_dir(tmp_path, records)
    code, doc = _judge(run)
    (check,) = doc["checks"]
    assert code == 1 and check["status"] == "INCONCLUSIVE"
    assert "requests.jsonl:10" in check["message"]
    assert doc["reads"]["requests.jsonl"]["bad_count"] == 1


def test_a_torn_last_line_is_noted_but_does_not_change_the_verdict(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, [record_line(i) for i in range(10)])
    with (run / "requests.jsonl").open("a") as fh:
        fh.write(record_line(10)[:40])  # a crash mid-write
    code, doc = _judge(run)
    (check,) = doc["checks"]
    assert code == 0 and check["status"] == "PASS"
    assert any("torn last line" in note for note in check["notes"])


def test_judge_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["judge", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a run directory" in result.output
