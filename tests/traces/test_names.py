"""Span names that carry ids are judged as one operation (drill.traces.names), where they are too thin apart."""

from __future__ import annotations

import json

import numpy as np
import pytest

from drill.traces.names import name_template, name_templates
from tests.traces.test_suspects import Fault, analyse, analyze_cli, services, shop


@pytest.mark.parametrize(
    ("name", "template"),
    [
        ("GET /orders/8812", "GET /orders/{id}"),
        ("GET /api/v1/orders/4d2a46c7-71cb-4cf1-b5bb-b68406d9da6f/items", "GET /api/v1/orders/{id}/items"),
        ("GET /blob/deadbeef42", "GET /blob/{id}"),
        ("GET /x?id=77&page=9", "GET /x?id={id}&page={id}"),
        ("SELECT * FROM t WHERE id = 5", "SELECT * FROM t WHERE id = {id}"),
        ("redis GET session:12345", "redis GET session:{id}"),
        # not ids: a token with letters that is not hex with a digit, a version, a word
        ("GET /api/v2/trips", "GET /api/v2/trips"),
        ("GET /blob/deadbeef", "GET /blob/deadbeef"),
        ("sha256", "sha256"),
        ("POST upstream", "POST upstream"),
        ("order42", "order42"),
        ("GET /svc-14/items/123", "GET /svc-14/items/{id}"),  # a number joined to a word by - is not an id
        ("replica-0", "replica-0"),
    ],
)
def test_an_id_is_a_whole_token_that_is_a_number_a_uuid_or_long_hex(name: str, template: str) -> None:
    assert name_template(name) == template


def test_thin_names_with_ids_are_merged_and_names_with_spans_enough_stay_apart() -> None:
    names = ("GET /orders/1", "GET /orders/2", "GET /orders/3", "step 1", "step 2", "GET /orders/{id}", "queue")
    spans = np.array([1, 1, 2, 40, 40, 1, 100])
    found = name_templates(names, spans, thin_below=3)
    assert found.names == ("GET /orders/{id}", "step 1", "step 2", "queue")
    assert found.code.tolist() == [0, 0, 0, 1, 2, 0, 3]  # a name already a template joins its names
    assert found.merged == (("GET /orders/{id}", 4),)
    calm = name_templates(names[3:5], spans[3:5], thin_below=3)
    assert calm.merged == () and calm.code.tolist() == [0, 1] and calm.names == names[3:5]


def _with_ids(spans: list[dict]) -> list[dict]:
    """The cart's operations named by their request's cart (a raw URL path and a statement with a literal)."""
    out = []
    for s in spans:
        cart = int(s["trace_id"], 16)
        if s["name"] == "GET /cart":
            s = {**s, "name": f"GET /cart/{cart}"}
        elif s["name"] == "SELECT cart":
            s = {**s, "name": f"SELECT cart WHERE cart_id = {cart}"}
        out.append(s)
    return out


def test_a_slow_service_whose_span_names_carry_ids_is_judged_over_its_operations() -> None:
    spans = _with_ids(shop(Fault(cpu={"cart": 2.0})))
    report = analyse(spans)
    assert services(report)[0] == "cart", [(s.service, s.why) for s in report.suspects]
    assert dict(report.merged_names) == {"GET /cart/{id}": 1200, "SELECT cart WHERE cart_id = {id}": 1200}
    assert {e.name for e in report.suspects[0].evidence} <= {"GET /cart/{id}", "SELECT cart WHERE cart_id = {id}"}
    as_json = json.loads(json.dumps(report.to_json()))
    assert as_json["merged_names"] == [["GET /cart/{id}", 1200], ["SELECT cart WHERE cart_id = {id}", 1200]]
    # by exact names every cart operation is its own pair of one span: never judged, and said so
    exact = analyse(spans, name_templates=False)
    assert "cart" not in services(exact)[:1] and exact.merged_names == ()
    assert any(n.pair.startswith("cart/GET /cart/") for n in exact.ranking.not_judged)


def test_the_cli_says_which_names_it_merged_and_exact_names_judges_each_apart(tmp_path) -> None:
    from tests.traces.spankit import write_spans

    path = write_spans(tmp_path / "spans.jsonl", _with_ids(shop(Fault(cpu={"cart": 2.0}))))

    def analyze(*flags: str):
        return analyze_cli(path, *flags)

    text = analyze().output
    assert "judged as one operation: GET /cart/{id} (1200 names)" in text, text
    merged = json.loads(analyze("--json").output)
    merged = merged["analysis"]
    assert merged["merged_names"][0] == ["GET /cart/{id}", 1200]
    assert merged["ranking"]["suspects"][0]["service"] == "cart"
    exact = json.loads(analyze("--exact-names", "--json").output)["analysis"]
    assert exact["merged_names"] == [] and exact["ranking"]["suspects"][:1] != merged["ranking"]["suspects"][:1]
    assert "one operation" not in analyze("--exact-names").output
