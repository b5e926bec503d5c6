"""``drill judge``: a past run re-judged from its directory alone, and read problems named in the verdicts."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from drill.cli.main import cli
from drill.rundir.records import RequestRecord

T0 = 1_700_000_000.0


def _journal(path: Path) -> None:
    events = [
        ("run_started", {}),
        ("phase_started", {"phase": "fault", "planned_s": 10}),
        ("phase_ended", {"phase": "fault"}),
        ("run_finished", {"status": "completed", "stopped_by": None}),
    ]
    lines = [
        json.dumps(
            {"seq": i, "event": e, "ts": T0 + (0 if i <= 2 else 10) + i * 0.001, "mono": i, "by": "runner", **data}
        )
        for i, (e, data) in enumerate(events, 1)
    ]
    path.write_text("\n".join(lines) + "\n")


def _record(i: int, error: str | None = None) -> str:
    record = RequestRecord(
        request_id=f"r{i}",
        logical_id=f"l{i}",
        pool="chat",
        attempt=1,
        intended_ts=T0 + 1 + i * 0.1,
        sent_ts=T0 + 1 + i * 0.1,
        schedule_lag_ms=0.1,
        status=200 if error is None else 503,
        ttft_ms=50.0,
        e2e_ms=100.0,
    )
    data = json.loads(record.to_json())
    data["error"] = error
    return json.dumps(data)


def _run_dir(tmp_path: Path, records: list[str]) -> Path:
    run = tmp_path / "reports" / "d" / "20261201T000000Z-abcdef"
    run.mkdir(parents=True)
    (run / "resolved.json").write_text(
        json.dumps(
            {
                "drill": {
                    "name": "d",
                    "faults": [],
                    "slo": {},
                    "checks": [{"kind": "error_rate", "name": "errors", "params": {"max": 0.2, "min_requests": 5}}],
                },
                "scenario": {"pools": [{"name": "chat", "slo": {"ttft_p95": "1s"}}]},
                "check_params": [{"phase": "fault", "max": 0.2, "min_requests": 5}],
            }
        )
    )
    _journal(run / "journal.jsonl")
    (run / "requests.jsonl").write_text("\n".join(records) + "\n")
    return run


def _judge(run: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["judge", str(run), "--json"])
    return result.exit_code, json.loads(result.output)


def test_judge_re_evaluates_the_runs_checks_from_its_directory(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, [_record(i) for i in range(9)] + [_record(9, "refused")])
    code, doc = _judge(run)
    assert code == 0
    assert doc["schema"] == "llm-drill/verdicts/v1" and doc["status"] == "completed"
    (check,) = doc["checks"]
    assert (check["name"], check["kind"], check["status"]) == ("errors", "error_rate", "PASS")
    assert check["observed"]["error_rate"] == 0.1 and check["observed"]["requests"] == 10


def test_a_corrupted_record_line_is_named_and_the_check_does_not_pass(tmp_path: Path) -> None:
    """An error class the reader does not know must not vanish and make the error rate look better."""
    records = [_record(i) for i in range(9)] + [_record(9, "a-class-from-the-future"), _record(10)]
    run = _run_dir(tmp_path, records)
    code, doc = _judge(run)
    (check,) = doc["checks"]
    assert code == 1 and check["status"] == "INCONCLUSIVE"
    assert "requests.jsonl:10" in check["message"]
    assert doc["reads"]["requests.jsonl"]["bad_count"] == 1


def test_a_torn_last_line_is_noted_but_does_not_change_the_verdict(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, [_record(i) for i in range(10)])
    with (run / "requests.jsonl").open("a") as fh:
        fh.write(_record(10)[:40])  # a crash mid-write
    code, doc = _judge(run)
    (check,) = doc["checks"]
    assert code == 0 and check["status"] == "PASS"
    assert any("torn last line" in note for note in check["notes"])


def test_judge_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["judge", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a run directory" in result.output
