"""Traces across the stack (stack-contracts.md §7): the router's SERVER span, a CLIENT child per
upstream attempt (``drill.attempt``, ``drill.upstream``), and the replica's spans beneath it, all
in the caller's trace, received by the harness's own OTLP receiver."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from drill.traces.receiver import OtlpReceiver
from tests.stack.stack_probes import wait_until

pytestmark = [pytest.mark.integration]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_router_and_replica_spans_share_the_callers_trace(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # inherited by the stack: export within 0.2 s
    spans_path = tmp_path / "spans.jsonl"
    receiver = OtlpReceiver(spans_path, port=0).start()
    try:
        from drill.stack.config import parse_stack_config
        from drill.stack.supervision.launcher import start_stack, stop_stack

        config = parse_stack_config({"replicas": 1, "engine": {"weight_load_time": "200ms"}})
        state = start_stack(config, name="traced", state_dir=tmp_path, otlp_endpoint=receiver.endpoint)
        try:
            response = httpx.post(
                f"{state.router}/v1/completions",
                trust_env=False,
                timeout=30,
                headers={"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"},
                json={"model": "llama-3-8b", "prompt": "hi", "max_tokens": 3},
            )
            assert response.status_code == 200

            def ours() -> list[dict]:
                if not spans_path.exists():
                    return []
                spans = [json.loads(line) for line in spans_path.read_text().splitlines()]
                mine = [s for s in spans if s["trace_id"] == TRACE_ID]
                return mine if {"drill-router", "drill-replica-0"} <= {s["service"] for s in mine} else []

            spans = wait_until(ours, 20, "router and replica spans", poll_s=0.2)
        finally:
            stop_stack("traced", state_dir=tmp_path)
    finally:
        receiver.stop()
    by_id = {s["span_id"]: s for s in spans}
    server = [s for s in spans if s["service"] == "drill-router" and s["kind"] == "SERVER"]
    client = [s for s in spans if s["service"] == "drill-router" and s["kind"] == "CLIENT"]
    assert len(server) == 1 and server[0]["parent_span_id"] == "00f067aa0ba902b7"
    assert len(client) == 1 and client[0]["parent_span_id"] == server[0]["span_id"]
    assert client[0]["attributes"]["drill.attempt"] == 1
    assert client[0]["attributes"]["drill.upstream"] == "replica-0"
    replica = [s for s in spans if s["service"] == "drill-replica-0"]
    entry = [s for s in replica if by_id.get(s["parent_span_id"], {}).get("service") != "drill-replica-0"]
    assert entry and all(s["parent_span_id"] == client[0]["span_id"] for s in entry)  # hangs under the attempt
