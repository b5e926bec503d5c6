"""``junit.xml``: one test case per check, well-formed whatever the messages hold, and agreeing with the exit code."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from drill.api import EvidenceKind, EvidenceRef, Status, Verdict
from drill.report.junit import junit_xml, observed_vs_expected, write_junit

NASTY = 'p95 <2 s> & "quoted" \x01\x08 control, ]]> cdata end, ünïcode ✓'


def _verdicts() -> list[Verdict]:
    return [
        Verdict("fault_landed", "fault_landed", Status.PASS, "every fault landed"),
        Verdict(
            "slo",
            "baseline-slo",
            Status.FAIL,
            NASTY,
            observed={"ttft_p95.baseline.chat": 2.4213, "requests": 180},
            expected={"ttft_p95.baseline.chat": "<= 2"},
            units={"ttft_p95.baseline.chat": "s"},
            evidence=(EvidenceRef(EvidenceKind.TRACE, "ab" * 16, "slowest request"),),
            notes=("a torn last line in spans.jsonl",),
        ),
        Verdict("recovery_replay", "recovery_replay", Status.INCONCLUSIVE, "only 2 controls replayed"),
        Verdict("first_abnormal_span", "first_abnormal_span", Status.ERROR, "check raised KeyError: 'x'"),
    ]


def _parse(text: str) -> ET.Element:
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    return ET.fromstring(text.encode("utf-8"))


def test_one_testcase_per_check_named_after_drill_and_check():
    root = _parse(junit_xml("20261201T000000Z-abc123", "unbounded-queue", _verdicts()))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "unbounded-queue" and suite.get("id") == "20261201T000000Z-abc123"
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("unbounded-queue", "fault_landed"),
        ("unbounded-queue", "baseline-slo"),
        ("unbounded-queue", "recovery_replay"),
        ("unbounded-queue", "first_abnormal_span"),
    ]
    for element in (root, suite):
        assert (element.get("tests"), element.get("failures"), element.get("errors"), element.get("skipped")) == (
            "4",
            "1",
            "2",
            "0",
        )


def test_status_becomes_failure_error_or_nothing():
    cases = {c.get("name"): c for c in _parse(junit_xml("r", "d", _verdicts())).iter("testcase")}
    assert list(cases["fault_landed"]) == []
    failure = cases["baseline-slo"].find("failure")
    assert failure is not None and failure.get("type") == "FAIL"
    assert (
        failure.get("message")
        == "observed ttft_p95.baseline.chat=2.4213 s, requests=180 vs expected ttft_p95.baseline.chat <= 2 s"
    )
    assert "trace_id=" + "ab" * 16 + " (slowest request)" in failure.text
    assert "note: a torn last line in spans.jsonl" in failure.text
    # INCONCLUSIVE is an error, not skipped: the drill exits 1 on it, so CI must not show it green.
    inconclusive = cases["recovery_replay"].find("error")
    assert inconclusive is not None and inconclusive.get("type") == "INCONCLUSIVE"
    assert inconclusive.get("message").startswith("INCONCLUSIVE: only 2 controls replayed; observed nothing")
    assert cases["first_abnormal_span"].find("error").get("type") == "ERROR"
    assert not list(_parse(junit_xml("r", "d", _verdicts())).iter("skipped"))


def test_markup_and_control_characters_survive_as_text():
    failure = _parse(junit_xml("r", 'd<&>"', _verdicts())).find(".//failure")
    assert failure is not None
    assert 'p95 <2 s> & "quoted" \ufffd\ufffd control, ]]> cdata end, ünïcode ✓' in failure.text


def test_secrets_in_messages_are_scrubbed():
    verdict = Verdict("slo", "s", Status.FAIL, "upstream said 401 for Authorization: Bearer abcdefghijkl")
    text = junit_xml("r", "d", [verdict])
    assert "abcdefghijkl" not in text and "[redacted]" in text


def test_deterministic_and_never_overwrites(tmp_path):
    assert junit_xml("r", "d", _verdicts()) == junit_xml("r", "d", _verdicts())
    path = write_junit(tmp_path / "junit.xml", "r", "d", _verdicts())
    assert path.read_text(encoding="utf-8") == junit_xml("r", "d", _verdicts())
    with pytest.raises(FileExistsError):
        write_junit(path, "r", "d", [])


def test_no_checks_is_an_empty_suite():
    suite = _parse(junit_xml("r", "d", [])).find("testsuite")
    assert suite is not None and suite.get("tests") == "0" and suite.findall("testcase") == []


def test_observed_vs_expected_names_each_figure():
    v = Verdict("error_rate", "e", Status.FAIL, "m", observed={"error_rate": 0.2}, expected={"error_rate": "<= 0.01"})
    assert observed_vs_expected(v) == "observed error_rate=0.2 vs expected error_rate <= 0.01"
