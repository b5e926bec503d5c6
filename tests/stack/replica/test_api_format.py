"""The replica's API holds vLLM's shapes (docs/serving-facts.md §2, §3): SSE framing, the usage chunk,
error bodies and status codes, metric names/types/labels."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from drill.stack.inference.tokenizer import count_chat_tokens, count_tokens, make_prompt
from tests.stack.replica_kit import ADMIN_TOKEN

pytestmark = pytest.mark.anyio


async def _sse_events(client: httpx.AsyncClient, path: str, body: dict) -> tuple[list[str], httpx.Response]:
    async with client.stream("POST", path, json=body) as response:
        raw = (await response.aread()).decode()
    assert raw.endswith("\n\n")
    events = raw.split("\n\n")[:-1]
    assert all(event.startswith("data: ") for event in events), raw
    return [event[len("data: ") :] for event in events], response


async def test_completion_stream_framing_and_usage_chunk(start_replica) -> None:
    async with start_replica() as replica, httpx.AsyncClient(base_url=replica.server.url) as client:
        body = {"prompt": make_prompt(12), "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
        events, response = await _sse_events(client, "/v1/completions", body)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    content, usage_chunk = chunks[:-1], chunks[-1]
    assert len(content) == 5
    for chunk in content:
        assert set(chunk) == {"id", "object", "created", "model", "choices", "usage"}
        assert chunk["object"] == "text_completion" and chunk["usage"] is None
        assert chunk["id"].startswith("cmpl-") and chunk["model"] == "llama-3-8b"
        choice = chunk["choices"][0]
        assert set(choice) == {"index", "text", "logprobs", "finish_reason", "stop_reason"}
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 4 + ["length"]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    text = "".join(c["choices"][0]["text"] for c in content)
    assert count_tokens(text) == 5


async def test_chat_stream_role_chunk_first_and_no_usage_without_stream_options(start_replica) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": make_prompt(7)}]
    async with start_replica() as replica, httpx.AsyncClient(base_url=replica.server.url) as client:
        events, _ = await _sse_events(
            client, "/v1/chat/completions", {"messages": messages, "max_tokens": 3, "stream": True}
        )
        with_usage, _ = await _sse_events(
            client,
            "/v1/chat/completions",
            {"messages": messages, "max_tokens": 3, "stream": True, "stream_options": {}},
        )
    chunks = [json.loads(event) for event in events[:-1]]
    assert events[-1] == "[DONE]" and len(chunks) == 4  # role chunk + 3 tokens, no usage chunk
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert [set(c["choices"][0]["delta"]) for c in chunks[1:]] == [{"content"}] * 3
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    usage_chunk = json.loads(with_usage[-2])
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["prompt_tokens"] == count_chat_tokens(messages)


async def test_continuous_usage_stats_on_every_chunk(start_replica) -> None:
    async with start_replica() as replica, httpx.AsyncClient(base_url=replica.server.url) as client:
        events, _ = await _sse_events(
            client,
            "/v1/completions",
            {
                "prompt": "a b c",
                "max_tokens": 3,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        )
    chunks = [json.loads(event) for event in events[:-1]]
    assert [c["usage"]["completion_tokens"] for c in chunks[:-1]] == [1, 2, 3]


async def test_non_stream_bodies_and_deterministic_greedy_output(start_replica) -> None:
    body = {"prompt": make_prompt(20, seed=3), "max_tokens": 8, "temperature": 0}
    async with start_replica() as replica, httpx.AsyncClient(base_url=replica.server.url) as client:
        first = (await client.post("/v1/completions", json=body)).json()
        second = (await client.post("/v1/completions", json=body)).json()
        seeded = [
            (await client.post("/v1/completions", json={**body, "temperature": 0.8, "seed": 7})).json()
            for _ in range(2)
        ]
        chat = (
            await client.post(
                "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "hello"}], "max_completion_tokens": 4},
            )
        ).json()
    assert first["choices"][0]["text"] == second["choices"][0]["text"]
    assert seeded[0]["choices"][0]["text"] == seeded[1]["choices"][0]["text"] != first["choices"][0]["text"]
    assert first["usage"]["completion_tokens"] == count_tokens(first["choices"][0]["text"]) == 8
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"] == {
        "prompt_tokens": 1 + 4 + 4,
        "completion_tokens": 4,
        "total_tokens": 13,
        "prompt_tokens_details": None,
    }


async def test_natural_stop_unless_ignore_eos(start_replica) -> None:
    async with start_replica() as replica, httpx.AsyncClient(base_url=replica.server.url) as client:
        stopped = (
            await client.post("/v1/completions", json={"prompt": "x y", "temperature": 0, "max_tokens": 2000})
        ).json()
        forced = (
            await client.post(
                "/v1/completions", json={"prompt": "x y", "temperature": 0, "max_tokens": 40, "ignore_eos": True}
            )
        ).json()
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert 1 <= stopped["usage"]["completion_tokens"] <= 1000
    assert forced["choices"][0]["finish_reason"] == "length" and forced["usage"]["completion_tokens"] == 40


async def test_error_bodies_and_status_codes(start_replica) -> None:
    async with (
        start_replica(engine={"max_model_len": 64, "max_num_batched_tokens": 256}) as replica,
        httpx.AsyncClient(base_url=replica.server.url) as client,
    ):
        too_long = await client.post("/v1/completions", json={"prompt": make_prompt(64)})
        too_many = await client.post("/v1/completions", json={"prompt": make_prompt(10), "max_tokens": 60})
        unknown = await client.post("/v1/completions", json={"prompt": "a", "model": "gpt-9"})
        bad = await client.post("/v1/completions", json={"prompt": "a", "n": 2})
        fcfs_priority = await client.post("/v1/completions", json={"prompt": "a", "priority": 3})
    assert too_long.status_code == 400
    assert too_long.json() == {
        "error": {
            "message": "This model's maximum context length is 64 tokens. However, your request has 64 input tokens. "
            "Please reduce the length of the input messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
    assert too_many.status_code == 400 and too_many.json()["error"]["message"] == (
        "'max_tokens' or 'max_completion_tokens' is too large: 60. This model's maximum context length is 64 "
        "tokens and your request has 10 input tokens (60 > 64 - 10)."
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"] == {
        "message": "The model `gpt-9` does not exist.",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    }
    assert bad.status_code == 400 and "n must be 1" in bad.json()["error"]["message"]
    assert fcfs_priority.status_code == 400
    assert "Priority scheduling is not enabled" in fcfs_priority.json()["error"]["message"]


@pytest.mark.parametrize("retry_after,header", [(None, None), ("2s", "2")])
async def test_admission_control_refuses_with_503_and_retry_after_only_when_configured(
    start_replica, retry_after: str | None, header: str | None
) -> None:
    """vLLM's refusals carry no Retry-After (issue 17's measurement); ``refusal_retry_after`` adds one."""
    engine = {"max_num_queued_reqs": 2, "max_num_seqs": 2, "refusal_retry_after": retry_after}
    async with (
        start_replica(engine=engine) as replica,
        httpx.AsyncClient(base_url=replica.server.url, timeout=30) as client,
    ):
        slow = [
            asyncio.create_task(
                client.post("/v1/completions", json={"prompt": "a", "max_tokens": 60, "ignore_eos": True})
            )
            for _ in range(2)
        ]
        while replica.scheduler.num_running + replica.scheduler.num_waiting < 2:
            await asyncio.sleep(0.005)
        refused = await client.post("/v1/completions", json={"prompt": "a", "max_tokens": 1})
        done = await asyncio.gather(*slow)
    assert refused.status_code == 503 and refused.headers.get("retry-after") == header
    assert refused.json() == {
        "error": {
            "message": "The engine is currently busy and cannot accept new requests. Please try again later or on a "
            "different instance.",
            "type": "Service Unavailable",
            "param": None,
            "code": 503,
        }
    }
    assert [r.status_code for r in done] == [200, 200]


async def test_max_queue_wait_gives_503_and_stream_error_event(start_replica) -> None:
    async with (
        start_replica(engine={"max_num_seqs": 1, "max_queue_wait": "150ms"}) as replica,
        httpx.AsyncClient(base_url=replica.server.url, timeout=30) as client,
    ):
        hog = asyncio.create_task(
            client.post("/v1/completions", json={"prompt": "a", "max_tokens": 80, "ignore_eos": True})
        )
        while replica.scheduler.num_running < 1:
            await asyncio.sleep(0.005)
        plain = asyncio.create_task(client.post("/v1/completions", json={"prompt": "b", "max_tokens": 2}))
        events, response = await _sse_events(
            client, "/v1/completions", {"prompt": "c", "max_tokens": 2, "stream": True}
        )
        timed_out = await plain
        await hog
    assert timed_out.status_code == 503 and "retry-after" not in timed_out.headers
    assert "max_queue_wait" in timed_out.json()["error"]["message"]
    assert response.status_code == 200 and events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == 503 and error["type"] == "Service Unavailable"


async def _raw_streams(url: str, count: int) -> list[tuple[int, bytes]]:
    """``count`` streamed completions written at once on their own connections (a burst); (status, body) each."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(count)]
    body = json.dumps({"prompt": "a", "max_tokens": 40, "ignore_eos": True, "stream": True}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
    for _, writer in conns:
        writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    out = []
    for reader, writer in conns:
        raw = await reader.read()
        writer.close()
        out.append((int(raw.split(b" ", 2)[1]), raw))
    return out


async def test_a_burst_is_refused_in_both_of_vllms_forms_and_counted_by_reason(start_replica) -> None:
    """vLLM checks admission before the response starts (HTTP 503) and again when the engine takes the request;
    a burst passes the first check together, so those beyond the limit are refused after the 200, in the stream."""
    from prometheus_client.parser import text_string_to_metric_families

    async with (
        start_replica(engine={"max_num_queued_reqs": 4, "max_num_seqs": 4}) as replica,
        httpx.AsyncClient(base_url=replica.server.url, timeout=30) as client,
    ):
        first = asyncio.create_task(_raw_streams(replica.server.url, 6))  # 6 at once: 4 admitted, 2 refused late
        while replica.scheduler.num_running + replica.scheduler.num_waiting < 4:
            await asyncio.sleep(0.002)
        second = await _raw_streams(replica.server.url, 3)  # the queue is full: refused at the first check
        first_answers = await first
        text = (await client.get("/metrics")).text
    in_stream = [raw for status, raw in first_answers if status == 200 and b'"code":503' in raw]
    assert len(in_stream) == 2
    for raw in in_stream:  # the error event, then [DONE], and no token before them
        assert raw.index(b'data: {"error"') < raw.index(b"data: [DONE]") and b'"choices"' not in raw
    assert all(b"retry-after" not in raw.lower() for _, raw in first_answers + second)
    assert [status for status, _ in second] == [503, 503, 503]
    served = [raw for status, raw in first_answers if status == 200 and b'"code":503' not in raw]
    assert len(served) == 4
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    model = replica.launch.config.model_name
    assert samples[("vllm:admission_rejections_total", (("model_name", model), ("reason", "max_num_queued_reqs")))] == 5
    assert (
        samples[("vllm:admission_rejections_total", (("model_name", model), ("reason", "max_num_queued_tokens")))] == 0
    )
    waiting = ("vllm:num_requests_waiting_by_reason", (("engine", "0"), ("model_name", model), ("reason", "deferred")))
    assert samples[waiting] == 0


async def test_models_health_version(start_replica) -> None:
    async with (
        start_replica(served_model_name="my-llama") as replica,
        httpx.AsyncClient(base_url=replica.server.url) as client,
    ):
        models = (await client.get("/v1/models")).json()
        health = await client.get("/health")
        version = (await client.get("/version")).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "my-llama"
    assert models["data"][0]["max_model_len"] == 8192
    assert health.status_code == 200 and health.content == b""
    assert "version" in version


VLLM_METRICS = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "vllm:admission_rejections": "counter",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
}


async def test_metrics_names_types_labels_and_buckets(start_replica) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    async with (
        start_replica(engine={"enable_prefix_caching": True}) as replica,
        httpx.AsyncClient(base_url=replica.server.url) as client,
    ):
        prompt = make_prompt(64)
        for _ in range(2):
            await client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 4, "ignore_eos": True})
        text = (await client.get("/metrics")).text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name, kind in VLLM_METRICS.items():
        assert families[name].type == kind, name
    success = {
        s.labels["finished_reason"]: s.value
        for s in families["vllm:request_success"].samples
        if s.name == "vllm:request_success_total"
    }
    assert success == {"stop": 0, "length": 2, "abort": 0, "error": 0, "repetition": 0}
    assert "vllm:num_preemptions_total{" in text and "vllm:generation_tokens_total{" in text
    for sample in families["vllm:time_to_first_token_seconds"].samples:
        assert sample.labels["model_name"] == "llama-3-8b" and sample.labels["engine"] == "0"
    ttft_bounds = [
        s.labels["le"] for s in families["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_bucket")
    ]
    assert len(ttft_bounds) == 23 and ttft_bounds[0] == "0.001" and ttft_bounds[-2] == "2560.0"
    itl_bounds = [
        s.labels["le"] for s in families["vllm:inter_token_latency_seconds"].samples if s.name.endswith("_bucket")
    ]
    assert len(itl_bounds) == 20 and itl_bounds[0] == "0.01"
    e2e_bounds = [
        s.labels["le"] for s in families["vllm:e2e_request_latency_seconds"].samples if s.name.endswith("_bucket")
    ]
    assert len(e2e_bounds) == 22 and e2e_bounds[0] == "0.3"
    generation = [s.value for s in families["vllm:generation_tokens"].samples if s.name.endswith("_total")]
    assert generation == [8]
    hits = [s.value for s in families["vllm:prefix_cache_hits"].samples if s.name.endswith("_total")]
    assert hits == [64 - 16]  # the second request reuses 3 of its 4 full blocks (the last token is recomputed)
    itl_count = [s.value for s in families["vllm:inter_token_latency_seconds"].samples if s.name.endswith("_count")]
    assert itl_count == [6]  # one sample per request per decode step


async def test_admin_requires_loopback_token(start_replica) -> None:
    async with start_replica() as replica, httpx.AsyncClient(base_url=replica.server.url) as client:
        anonymous = await client.get("/admin/state")
        wrong = await client.get("/admin/state", headers={"Authorization": "Bearer nope"})
        state = await client.get("/admin/state", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert anonymous.json()["error"]["code"] == 401
    body = state.json()
    assert {"name", "index", "pid", "started_at", "engine_alive", "gpu", "stall_until"} <= set(body)
    assert {"memory_hog_gib", "clock_fraction", "kv_blocks_total", "kv_blocks_free"} <= set(body["gpu"])
    assert body["engine_alive"] is True and body["gpu"]["kv_blocks_total"] == 457_552 // 16
