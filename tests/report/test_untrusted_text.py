"""Text from a drill, a runbook or the evidence is shown as text, scrubbed, in every output (issue 21): credentials
in any free-text field of a drill and in URLs are redacted in the report and on the terminal, a Markdown image in
a runbook is a link (report.html loads nothing from outside itself), and names drawn in a chart are literal
(``$...$`` is not mathtext)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from drill.cli.main import cli
from drill.report import charts
from drill.report.render import write_reports
from drill.traces.run_traces import run_traces
from tests.checks.rundir_kit import RunKit
from tests.report.report_kit import ReportKit

PASSWORD = "PW-e21-7c4d1"
TOKEN = "tok-e21-93ab5f"
KEY = "sk-e21abcdefgh123456"
SECRET_TEXTS = {
    "title": f"check https://{TOKEN}@git.example/repo",
    "description": f"log in at http://admin:{PASSWORD}@db.example:5432/ with api_key={KEY}",
    "hypothesis": f"the proxy at https://ops:{PASSWORD}@proxy.example/ holds",
    "owner": f"team-a (password: {PASSWORD}x)",
}


def _run(tmp_path: Path) -> Path:
    kit = ReportKit(tmp_path / "run")
    kit.run_bounds(0, 30)
    kit.phases(baseline=(0, 10), fault=(10, 20), recovery=(20, 30))
    kit.pool("chat", slo={"ttft_p95": 1.0})
    for i in range(10):
        kit.request(1 + i, ttft_ms=100)
    kit.drill.update({k: v for k, v in SECRET_TEXTS.items() if k != "owner"})
    kit.drill["report"] = {"owner": SECRET_TEXTS["owner"]}
    kit.drill["runbook"] = "runbooks/r.md"
    kit.runbook_text = (
        "# Runbook\n\n## Triage\n\n![the dashboard](https://evil.example/track.png?run=1) and ![ref][logo]\n\n"
        "[logo]: http://evil.example/logo.gif\n\n<img src='https://evil.example/raw.png'>\n"
    )
    return kit.write()


def test_credentials_in_every_free_text_field_of_the_drill_are_redacted_in_the_report(tmp_path: Path) -> None:
    run = _run(tmp_path)
    for path in write_reports(run):
        text = path.read_text()
        for secret in (PASSWORD, TOKEN, KEY):
            assert secret not in text, (path.name, secret)
        assert "db.example:5432" in text and "[redacted]" in text


def test_a_markdown_image_in_the_runbook_is_a_link_never_a_resource(tmp_path: Path) -> None:
    run = _run(tmp_path)
    html = next(p for p in write_reports(run) if p.suffix == ".html").read_text()
    assert "<img" not in html
    assert not re.search(r"""<[a-z][^>]*\s(?:src|srcset|poster|background)\s*=\s*["']?(?:https?:)?//""", html)
    assert '<a href="https://evil.example/track.png?run=1" rel="noreferrer">image: the dashboard</a>' in html
    assert "image: ref</a>" in html


def test_drill_plan_prints_no_url_userinfo(tmp_path: Path) -> None:
    drill = tmp_path / "d.yaml"
    drill.write_text(
        f"""\
name: plan-secrets
title: "mirror at https://{TOKEN}@git.example/"
target: {{kind: openai, config: {{url: "http://admin:{PASSWORD}@127.0.0.1:8000"}}}}
scenario:
  arrival: {{process: poisson, rate: 5}}
  pools:
    - {{name: chat, input_tokens: {{dist: fixed, value: 10}}, output_tokens: {{dist: fixed, value: 5}}}}
phases: {{baseline: 1s, fault: 1s, recovery: 1s, replay: false}}
"""
    )
    result = CliRunner().invoke(cli, ["plan", str(drill)])
    assert result.exit_code == 0, result.output
    assert PASSWORD not in result.output and TOKEN not in result.output
    assert "http://[redacted]@127.0.0.1:8000" in result.output


def test_an_error_that_quotes_a_url_prints_no_userinfo(tmp_path: Path) -> None:
    drill = tmp_path / "d.yaml"
    drill.write_text(f'name: x\ntarget: {{kind: openai, config: {{url: "ftp://admin:{PASSWORD}@host.example/"}}}}\n')
    result = CliRunner().invoke(cli, ["validate", str(drill)])
    assert result.exit_code == 2, result.output
    assert PASSWORD not in result.output and "ftp://[redacted]@host.example/" in result.output


def test_dollar_signs_in_span_and_service_names_are_drawn_literally(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    names = ["$x^{$", r"$\alpha$", "$$", "a $ b $ c"]
    trace = "a" * 32
    kit.span(trace_id=trace, span_id="0" * 15 + "1", name=names[0], service="$svc$", kind="SERVER", start=1, end=2)
    for i, name in enumerate(names[1:], 2):
        kit.span(
            trace_id=trace,
            span_id=f"{i:016x}",
            parent_id="0" * 15 + "1",
            name=name,
            service=r"$\frac{1}{$",
            start=1 + i * 0.1,
            end=1.5 + i * 0.1,
        )
    svg = charts.trace_waterfall(run_traces(kit.evidence()).table, trace, None)
    assert svg is not None
    for name in names:
        assert name in svg
    assert r"$\alpha$" in svg and "$svc$" in svg


def test_the_report_files_hold_no_raw_control_character(tmp_path: Path) -> None:
    """A `cat report.md` must not run a drill title's or a runbook's escape sequences on the reader's terminal."""
    run = _run(tmp_path)
    resolved = json.loads((run / "resolved.json").read_text())
    resolved["drill"]["title"] = "\x1b]0;owned\x07\x1b[2J title \u202eevil"
    (run / "resolved.json").write_text(json.dumps(resolved))
    (run / "runbook.md").write_text("# Runbook\n\n## Triage\n\nrun \x1b[31mthis\x9b\n")
    for path in write_reports(run):
        text = path.read_text()
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text), path.name
        assert "\\x1b]0;owned\\x07\\x1b[2J title \\u202eevil" in text
