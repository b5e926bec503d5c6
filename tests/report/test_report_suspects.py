"""The report's detection section shows the first_abnormal_span verdict's top five ranked suspects."""

from __future__ import annotations

from drill.api import Status
from drill.report.render import render_html, render_markdown, report_for
from tests.report.test_report import _flood_run


def _suspect(rank: int) -> dict:
    return {
        "rank": rank,
        "service": f"svc-{rank}",
        "score": 2.5 / rank,
        "why": "the links into it are slow",
        "evidence": [f"gw/GET /svc-{rank} [callee of a slow link]: self time 40x", "second", "third"],
    }


def test_the_top_five_suspects_are_shown_with_why_and_the_strongest_evidence(tmp_path):
    kit = _flood_run(tmp_path)
    kit.verdict(
        "first_abnormal_span",
        Status.PASS,
        "suspects: svc-1, svc-2",
        observed={"suspects": [_suspect(r) for r in range(1, 8)]},  # no first span: suspects only
    )
    report = report_for(kit.write())
    suspects = report.detection.suspects
    assert [s[1] for s in suspects] == ["svc-1", "svc-2", "svc-3", "svc-4", "svc-5"]
    assert suspects[0][2] == "2.50" and "self time 40x" in suspects[0][3] and "third" not in suspects[0][3]
    md = render_markdown(report)
    assert "| suspect | service | score | why (strongest evidence) |" in md and "| 1 | `svc-1` | 2.50 |" in md
    assert "| 6 | `svc-6`" not in md  # the verdict table still lists every observed suspect
    assert '<table id="suspects">' in render_html(report)


def test_no_suspects_no_table(tmp_path):
    kit = _flood_run(tmp_path)
    kit.verdict("first_abnormal_span", Status.INCONCLUSIVE, "the target exported no spans", window="fault")
    report = report_for(kit.write())
    assert report.detection.suspects == () and "| suspect |" not in render_markdown(report)
