"""``drill traces analyze``: the ranked suspects, the knobs and the honest "not judged" in text and JSON."""

from __future__ import annotations

import json

from click.testing import CliRunner

from drill.cli.main import cli
from tests.traces.spankit import T0, write_spans
from tests.traces.test_suspects import FAULT_S, Fault, shop

UNTIL = f"{(T0 + int(FAULT_S * 1e9)) / 1e9:.3f}"


def invoke(*args: str):
    result = CliRunner().invoke(cli, ["traces", "analyze", *args])
    assert result.exit_code == 0, result.output
    return result


def test_text_shows_the_top_five_suspects_with_their_evidence(tmp_path):
    path = write_spans(tmp_path / "spans.jsonl", shop(Fault(ingress_ms={"auth": 40.0})))
    out = invoke(str(path), "--baseline-until", UNTIL).stdout
    assert "suspects (services ranked by pooled evidence, top 5):" in out
    assert "  1. auth score" in out and "links into it are slow" in out
    assert "gateway/POST /verify [callee of a slow link]" in out and "rank-test z" in out
    assert "judged 8 of 8 (service, span name) pairs" in out


def test_knobs_reach_the_analysis_and_the_json(tmp_path):
    path = write_spans(tmp_path / "spans.jsonl", shop(Fault(cpu={"reports": 4.0}), reports_every=150))
    data = json.loads(invoke(str(path), "--baseline-until", UNTIL, "--json").stdout)["analysis"]
    assert data["ranking"]["suspects"][0]["service"] == "reports"
    assert data["options"]["min_judged_spans"] == 3 and data["options"]["min_ratio"] == 1.15
    strict = json.loads(
        invoke(str(path), "--baseline-until", UNTIL, "--json", "--min-judged-spans", "5", "--alpha", "0.001").stdout
    )["analysis"]
    assert strict["options"]["min_judged_spans"] == 5 and strict["options"]["alpha"] == 0.001
    assert "reports" not in [s["service"] for s in strict["ranking"]["suspects"]]
    assert any(x["pair"].startswith("reports/") for x in strict["ranking"]["not_judged"])


def test_a_window_that_could_not_be_judged_is_inconclusive_never_a_match(tmp_path):
    spans = [{**s, "name": s["name"] + " v2"} if s["start_ns"] >= T0 + int(FAULT_S * 1e9) else s for s in shop(Fault())]
    out = invoke(str(write_spans(tmp_path / "spans.jsonl", spans)), "--baseline-until", UNTIL).stdout
    assert "INCONCLUSIVE: most of the fault window could not be judged: 8 of 8 pairs had fewer than 3" in out
    assert "match" not in out and "no deviation" not in out


def test_an_immaterial_first_span_is_not_stated_as_a_finding(tmp_path):
    path = write_spans(tmp_path / "spans.jsonl", shop(Fault(ingress_ms={"auth": 40.0})))
    out = invoke(str(path), "--baseline-until", UNTIL, "--min-impact", "1000").stdout
    assert "nothing material deviated; weakest signals: gateway/POST /verify" in out
    assert "auth (suspect, score" in out
    material = invoke(str(path), "--baseline-until", UNTIL).stdout
    assert "nothing material deviated" not in material
