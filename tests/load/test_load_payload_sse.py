"""Request bodies, headers and SSE line classification (no servers)."""

from __future__ import annotations

import json
import re

import pytest

from drill.load.control import GeneratorPlan
from drill.load.payload import PromptText, attempt_headers, build_body, new_trace_ids, payload_digest
from drill.load.sse import LineKind, classify_line, is_role_only, parse_error_message, parse_usage
from drill.rundir.records import ErrorClass, RequestRecord
from drill.rundir.samples import FailingSample
from drill.spec.scenario import Pool, Scenario


def _pool(**kw) -> Pool:
    data = {
        "name": "chat",
        "input_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "fixed", "value": 20},
    }
    data.update(kw)
    return Pool.model_validate(data)


def test_chat_body_is_deterministic_ascii_and_fits_the_token_budget() -> None:
    text = PromptText(3)
    body = build_body(_pool(priority=2, sampling={"seed": 9}), "llama", "chat-7", 100, 20, text)
    assert body == build_body(_pool(priority=2, sampling={"seed": 9}), "llama", "chat-7", 100, 20, PromptText(3))
    assert body != build_body(_pool(), "llama", "chat-8", 100, 20, text)
    data = json.loads(body)
    assert body.isascii() and b": " not in body
    words = data["messages"][0]["content"].split()
    assert words[0] == "chat-7" and len(words) == 100 - 8  # 4 per message + 4 per conversation
    assert data["max_tokens"] == 20 and data["stream"] is True
    assert data["stream_options"] == {"include_usage": True}
    assert data["priority"] == 2 and data["seed"] == 9 and data["ignore_eos"] is True


def test_prefix_is_shared_and_completions_have_no_template() -> None:
    text = PromptText(1)
    pool = _pool(prefix_tokens=30)
    one, two = (json.loads(build_body(pool, "m", f"chat-{i}", 100, 5, text)) for i in (1, 2))
    assert one["messages"][0] == two["messages"][0] and one["messages"][0]["role"] == "system"
    assert len(one["messages"][0]["content"].split()) == 30
    assert len(one["messages"][1]["content"].split()) == 100 - 12 - 30
    completion = json.loads(build_body(_pool(endpoint="completions", stream=False), "m", "c-1", 50, 5, text))
    assert len(completion["prompt"].split()) == 50 and "stream_options" not in completion
    assert "priority" not in completion


def test_long_prompts_wrap_the_corpus() -> None:
    words = PromptText(0).words(70000, "k").split()
    assert len(words) == 70000


def test_headers_carry_trace_idempotency_request_id_and_priority() -> None:
    trace_id, span_id = new_trace_ids()
    headers = attempt_headers(
        trace_id=trace_id,
        span_id=span_id,
        idempotency_key="run-chat-1",
        request_id="run-chat-1-2",
        priority=5,
        stream=True,
        extra={"Authorization": "Bearer x"},
    )
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", headers["traceparent"])
    assert headers["traceparent"].split("-")[1] == trace_id
    assert headers["Idempotency-Key"] == "run-chat-1" and headers["X-Request-Id"] == "run-chat-1-2"
    assert headers["X-Drill-Priority"] == "5" and headers["Authorization"] == "Bearer x"
    assert new_trace_ids()[0] != trace_id


VLLM_CHAT = [
    (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n',
        LineKind.CONTENT,
    ),
    (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"content":" hi"},"logprobs":null,"finish_reason":null}]}\n',
        LineKind.CONTENT,
    ),
    (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
        b'"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2}}\n',
        LineKind.USAGE,
    ),
    (
        b'data: {"error":{"message":"EngineCore encountered an issue.","type":"InternalServerError","param":null,'
        b'"code":500}}\n',
        LineKind.ERROR,
    ),
    (b"data: [DONE]\n", LineKind.DONE),
    (b"\n", LineKind.IGNORED),
    (b": keep-alive\n", LineKind.IGNORED),
    (b'data: {"choices": [{"index": 0, "text": " x"}], "id": "cmpl-2"}\n', LineKind.CONTENT),
    (b'data: {"usage": {"prompt_tokens": 3, "completion_tokens": 4}, "choices": []}\n', LineKind.USAGE),
    (b'data: {"object":"error","message":"old style","type":"BadRequestError","code":400}\n', LineKind.ERROR),
]


@pytest.mark.parametrize("line,kind", VLLM_CHAT)
def test_sse_lines_are_classified_like_vllm_bench(line: bytes, kind: LineKind) -> None:
    assert classify_line(line) is kind


def test_usage_role_and_error_parsing() -> None:
    assert parse_usage(VLLM_CHAT[2][0]) == (12, 2)
    assert parse_usage(b'{"usage":{"prompt_tokens":5,"completion_tokens":7}}') == (5, 7)
    assert is_role_only(VLLM_CHAT[0][0]) and not is_role_only(VLLM_CHAT[1][0])
    assert parse_error_message(VLLM_CHAT[3][0]) == "EngineCore encountered an issue."
    assert parse_error_message(b'{"object":"error","message":"too long","code":400}') == "too long"
    assert parse_error_message(b"<html>502</html>") == "<html>502</html>"


def test_records_and_samples_round_trip() -> None:
    record = RequestRecord(
        request_id="r-1",
        logical_id="chat-1",
        pool="chat",
        attempt=1,
        intended_ts=10.0,
        sent_ts=10.001,
        schedule_lag_ms=1.0,
        status=200,
        error=ErrorClass.CANCELLED,
        chunk_offsets_ms=[5.0, 7.0, 12.0],
        ttft_ms=5.0,
        e2e_ms=13.0,
        completion_tokens=3,
    )
    back = RequestRecord.from_dict(json.loads(record.to_json()))
    assert back == record and back.error is ErrorClass.CANCELLED
    sample = FailingSample(
        request_id="r",
        logical_id="l",
        pool="p",
        attempt=2,
        trace_id="t",
        idempotency_key="k",
        payload_digest=payload_digest(b"\x00{}"),
        method="POST",
        endpoint="/v1/completions",
        body_b64=FailingSample.encode_body(b"\x00{}"),
    )
    again = FailingSample.from_dict(json.loads(sample.to_json()))
    assert again == sample and again.body == b"\x00{}"


def test_generator_plan_carries_the_scenario_losslessly() -> None:
    scenario = Scenario.model_validate(
        {
            "seed": 2,
            "arrival": {
                "process": "stages",
                "stages": [{"kind": "ramp", "duration": "1500ms", "from": 1, "to": "120/min"}],
            },
            "pools": [
                {
                    "name": "a",
                    "input_tokens": {"dist": "fixed", "value": 3},
                    "output_tokens": {"dist": "fixed", "value": 2},
                    "timeout": "2.5s",
                    "retry": {"attempts": 2, "backoff": "100ms"},
                    "slo": {"ttft_p99.9": "1s"},
                }
            ],
        }
    )
    plan = GeneratorPlan(
        scenario=scenario.model_dump(mode="json", by_alias=True),
        target_url="http://x",
        model="m",
        duration_s=1,
        seed=1,
        run_nonce="n",
        run_dir="/tmp",
    )
    back = GeneratorPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert back.scenario_model() == scenario
