"""The llama.cpp fixtures themselves: the generated model loads, its two tokenizers agree with the server's, the
server exports the ``llamacpp:*`` metrics the quantity map names, and ``drill supervise`` brings it back."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from tokenizers import Tokenizer

from drill.load.payload import PromptText
from drill.serving_metrics import QUANTITIES, resolve
from tests.llamacpp.conftest import LlamaServer, start_server
from tests.llamacpp.model import TOKENIZERS, ModelFiles, make_model

pytestmark = [pytest.mark.llamacpp, pytest.mark.integration]

TEXTS = [
    "The replica answered the first request in 12 ms, then crashed; nothing restarted it?",
    "garden window market letter course order field open early system report power money",
    "Strange words: zyxwvut quokka pneumonoultramicroscopic, naïve café — 3.14159 and 2048!",
    "  leading spaces,\ttabs\nand new lines\n\n",
]


def _server_tokens(server: LlamaServer, text: str) -> list[int]:
    answer = httpx.post(f"{server.url}/tokenize", json={"content": text, "add_special": True}, trust_env=False)
    answer.raise_for_status()
    return answer.json()["tokens"]


def test_the_same_tokenizer_name_gives_the_same_files(tmp_path: Path, llama_model: ModelFiles) -> None:
    again = make_model(tmp_path, llama_model.tokenizer.name)
    assert again.digest == llama_model.digest
    assert again.tokenizer_json.read_bytes() == llama_model.tokenizer_json.read_bytes()
    other = make_model(tmp_path, "llama3-1280")
    assert other.vocab_size != llama_model.vocab_size and other.digest != llama_model.digest


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
def test_the_server_and_the_local_tokenizer_json_give_the_same_tokens(
    tokenizer: str, llama_server_factory: Callable[..., LlamaServer]
) -> None:
    server = llama_server_factory(tokenizer=tokenizer, parallel=2, ctx=4096)
    local = Tokenizer.from_file(str(server.tokenizer_json))
    prompts = PromptText(seed=7)
    texts = TEXTS + [prompts.words(n, f"r{n}") for n in (1, 17, 300)]
    for text in texts:
        assert _server_tokens(server, text) == local.encode(text).ids, text
    words = prompts.words(2000, "ratio")
    ratio = len(local.encode(words, add_special_tokens=False).ids) / 2000
    assert ratio > 1.03, f"{tokenizer}: {ratio:.3f} tokens per word; a test tokenizer must not be one per word"


def test_the_server_exports_the_llamacpp_metrics_the_quantity_map_reads(llama_server: LlamaServer) -> None:
    body = {"model": llama_server.alias, "prompt": "the first word", "max_tokens": 5}
    done = httpx.post(f"{llama_server.url}/v1/completions", json=body, timeout=30, trust_env=False)
    assert done.status_code == 200, done.text
    assert done.json()["usage"]["completion_tokens"] == 5
    text = httpx.get(f"{llama_server.url}/metrics", trust_env=False).text
    exported = {line.split()[0] for line in text.splitlines() if line and not line.startswith("#")}
    found = {q: resolve(exported, q) for q in QUANTITIES}
    assert {q: r.metric for q, r in found.items() if r is not None} == {
        "queue_depth": "llamacpp:requests_deferred",
        "running": "llamacpp:requests_processing",
        "generation_tokens_per_s": "llamacpp:tokens_predicted_total",
    }
    assert found["kv_cache_usage"] is None  # this build exports no KV-cache share: not available, never 0


def test_a_fresh_server_is_healthy_within_seconds(
    llama_server_bin: Path, llama_model: ModelFiles, tmp_path: Path
) -> None:
    start = time.monotonic()
    server = start_server(llama_server_bin, llama_model, tmp_path, parallel=1, ctx=1024)
    try:
        took = time.monotonic() - start
        assert took < 15, f"supervisor + llama-server took {took:.1f} s to answer /health"
        print(f"llama-server healthy {took:.2f} s after start (drill supervise included)")
    finally:
        server.stop()
    assert not server.pid_file.exists()


def test_drill_supervise_restarts_a_killed_server_with_a_new_pid(llama_server: LlamaServer) -> None:
    old = llama_server.pid
    killed = time.monotonic()
    signal_sent = signal.SIGKILL
    import os

    os.kill(old, signal_sent)
    while True:
        try:
            if llama_server.pid != old:
                break
        except (OSError, ValueError):
            pass
        assert time.monotonic() - killed < 10, "no new pid within 10 s"
        time.sleep(0.02)
    back = llama_server.wait_healthy()
    print(f"killed -> healthy again in {time.monotonic() - killed:.2f} s (health wait {back:.2f} s)")
    assert llama_server.healthy()
