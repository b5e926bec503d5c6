"""Span kinds inferred from the traces' shape for services that record none (drill.traces.kinds)."""

from __future__ import annotations

import json

import numpy as np

from drill.traces.kinds import infer_kinds, with_inferred_kinds
from drill.traces.table import KIND_NAMES, SpanTable
from tests.traces.spankit import span, write_spans
from tests.traces.test_suspects import Fault, analyse, analyze_cli, services, shop


def _kindless(spans: list[dict], keep: frozenset[str] = frozenset()) -> list[dict]:
    """``spans`` with no kind, but those of the services in ``keep``."""
    return [s if s["service"] in keep else {**s, "kind": "UNSPECIFIED"} for s in spans]


def _kinds(table: SpanTable, kind: np.ndarray) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for row in range(len(table)):
        key = (table.services[table.service[row]], table.names[table.name[row]])
        out.setdefault(key, set()).add(KIND_NAMES[int(kind[row])])
    return out


def _checkout(trace: int, *, answered: bool = True) -> list[dict]:
    """gateway (entry) → its CLIENT span → auth's SERVER span → auth's own work; auth → a database without spans."""
    entry = span(trace, "GET /checkout", service="gateway", kind="SERVER", end_ms=10)
    call = span(trace, "POST /verify", service="gateway", kind="CLIENT", parent=entry, start_ms=1, end_ms=9)
    serve = span(trace, "POST /verify", service="auth", kind="SERVER", parent=call, start_ms=2, end_ms=8)
    work = span(trace, "check token", service="auth", kind="INTERNAL", parent=serve, start_ms=2, end_ms=4)
    query = span(
        trace, "SELECT users", service="auth", kind="CLIENT", parent=serve, start_ms=4, end_ms=7,
        attributes={"db.system": "postgresql"},
    )  # fmt: skip
    return [entry, call, *([serve, work, query] if answered else [])]


def test_servers_and_clients_are_told_by_where_their_spans_sit() -> None:
    table = SpanTable.from_spans(_kindless([s for t in range(1, 6) for s in _checkout(t)]))
    inferred = infer_kinds(table)
    assert inferred.services == ("gateway", "auth")
    assert _kinds(table, inferred.kind) == {
        ("gateway", "GET /checkout"): {"SERVER"},  # starts the trace
        ("gateway", "POST /verify"): {"CLIENT"},  # its only child is another service's
        ("auth", "POST /verify"): {"SERVER"},  # called from another service
        ("auth", "check token"): {"UNSPECIFIED"},  # own work: no child, no peer
        ("auth", "SELECT users"): {"CLIENT"},  # no child, but it names its peer (db.system)
    }
    assert inferred.text() == (
        "span kinds inferred from the traces' shape for 2 service(s) that record none (gateway, auth): "
        "2 operation(s) SERVER, 2 CLIENT"
    )


def test_the_operation_decides_so_a_call_whose_answer_was_lost_stays_a_client_span() -> None:
    spans = [s for t in range(1, 5) for s in _checkout(t)] + _checkout(9, answered=False)
    table = SpanTable.from_spans(_kindless(spans))
    kinds = _kinds(table, infer_kinds(table).kind)
    assert kinds[("gateway", "POST /verify")] == {"CLIENT"}  # 4 of 5 answered by auth; the fifth is one of them


def test_a_service_that_records_any_kind_keeps_every_kind_as_recorded() -> None:
    spans = [s for t in range(1, 4) for s in _checkout(t)]
    table = SpanTable.from_spans(_kindless(spans, keep=frozenset({"auth"})))
    inferred = infer_kinds(table)
    assert inferred.services == ("gateway",)
    assert _kinds(table, inferred.kind)[("auth", "check token")] == {"INTERNAL"}
    recorded = SpanTable.from_spans(spans)
    same, none = with_inferred_kinds(recorded)
    assert same is recorded and none.services == () and none.text() is None
    parents = recorded.parent_row
    assert with_inferred_kinds(table)[0].parent_row is table.parent_row  # derived columns carried over
    assert parents.tolist() == table.parent_row.tolist()


def test_without_kinds_a_slow_link_and_a_database_without_spans_are_still_found() -> None:
    delay = _kindless(shop(Fault(ingress_ms={"auth": 40.0})))
    report = analyse(delay)
    assert services(report)[0] == "auth", [(s.service, s.why) for s in report.suspects]
    assert "links into it are slow" in report.suspects[0].why
    assert "span kinds inferred" in (report.inferred_kinds or "")
    assert services(analyse(delay, infer_kinds=False))[:1] != ["auth"]  # the kinds as recorded: blamed on the caller
    database = _kindless(shop(Fault(pg_factor=5.0)))
    assert services(analyse(database))[0] == "pg"
    assert "pg" not in services(analyse(database, infer_kinds=False))  # nothing names it without a CLIENT span


def test_the_cli_says_whose_kinds_it_inferred_and_recorded_kinds_turns_it_off(tmp_path) -> None:
    path = write_spans(tmp_path / "spans.jsonl", _kindless(shop(Fault(ingress_ms={"auth": 40.0}))))

    def analyze(*flags: str):
        return analyze_cli(path, *flags)

    text = analyze().output
    assert "span kinds inferred from the traces' shape for 4 service(s)" in text, text
    inferred = json.loads(analyze("--json").output)["analysis"]
    assert inferred["ranking"]["suspects"][0]["service"] == "auth"
    assert inferred["inferred_kinds"].startswith("span kinds inferred")
    recorded = json.loads(analyze("--recorded-kinds", "--json").output)["analysis"]
    assert recorded["inferred_kinds"] is None and recorded["ranking"]["suspects"][0]["service"] != "auth"
