"""Acceptance (issue 11): a run directory with a corrupted record line — the run's checks report the line and
do not PASS a check that depended on it. Evaluated the way the runner does it (``evaluate_checks`` over the
run's ``RunEvidence``); ``tests/runner/test_judge.py`` covers the same through ``drill judge``."""

from __future__ import annotations

from pathlib import Path

from drill.api import Status
from drill.rundir.evidence import RunEvidence
from drill.runner.verdicts import evaluate_checks, verdicts_document
from drill.spec.loader import load_drill
from tests.runner.judged_run import record_line, write_journal

DRILL = """\
name: corrupted
target: {kind: openai, config: {url: "http://127.0.0.1:8000"}}
scenario:
  arrival: {process: poisson, rate: 5}
  pools:
    - name: chat
      input_tokens: {dist: fixed, value: 10}
      output_tokens: {dist: fixed, value: 5}
phases: {baseline: 1s, fault: 10s, recovery: 1s, replay: false}
checks:
  - {kind: error_rate, name: errors, params: {phase: fault, max: 0.2, min_requests: 5}}
"""


def _judge(tmp_path: Path, records: list[str]):
    drill = tmp_path / "d.yaml"
    drill.write_text(DRILL)
    loaded = load_drill(drill)
    run = tmp_path / "run"
    run.mkdir()
    write_journal(run / "journal.jsonl")
    (run / "requests.jsonl").write_text("".join(r + "\n" for r in records))
    evidence = RunEvidence(run, {"chat": {}})
    return evaluate_checks(loaded, evidence), evidence


def test_a_record_with_an_unknown_error_class_makes_the_error_rate_check_inconclusive_naming_the_line(
    tmp_path: Path,
) -> None:
    # 7 good records, then 3 failures of which one has a class the reader does not know (line 9): read without
    # it, the error rate is 2/9 = 22% (FAIL); had it vanished with a refused one, 1/9 would PASS. Neither counts.
    records = [record_line(i) for i in range(7)] + [
        record_line(7, "refused"),
        record_line(8, "a-class-from-the-future"),
        record_line(9, "timeout"),
    ]
    verdicts, evidence = _judge(tmp_path, records)
    (errors,) = verdicts
    assert errors.status is Status.INCONCLUSIVE, errors
    assert "requests.jsonl:9" in errors.message and "1 unreadable line(s) in requests.jsonl" in errors.message
    report = evidence.reports["requests.jsonl"]
    assert report.bad_count == 1 and report.bad_lines[0].line == 9 and report.lines_read == 9
    doc = verdicts_document("run", "corrupted", "completed", None, verdicts, evidence)
    assert doc["reads"]["requests.jsonl"]["bad_lines"][0]["line"] == 9


def test_a_check_that_would_pass_on_what_could_be_read_does_not_pass(tmp_path: Path) -> None:
    records = [record_line(i) for i in range(9)] + [record_line(9, "a-class-from-the-future"), record_line(10)]
    (errors,), _ = _judge(tmp_path, records)
    assert errors.status is not Status.PASS
    assert errors.status is Status.INCONCLUSIVE and "on what could be read: PASS" in errors.message


def test_the_same_run_without_the_corrupted_line_passes(tmp_path: Path) -> None:
    """The control: the check itself passes on these records, so the INCONCLUSIVE above is the bad line's doing."""
    records = [record_line(i) for i in range(9)] + [record_line(10)]
    (errors,), evidence = _judge(tmp_path, records)
    assert errors.status is Status.PASS and evidence.reports["requests.jsonl"].clean
