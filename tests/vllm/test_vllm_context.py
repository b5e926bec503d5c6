"""``boundary-context-length`` on real vLLM: prompts exactly at ``--max-model-len`` are served, a burst 1.5x longer
is refused with vLLM's own 400 at once, and the chat pool beside them keeps its SLO."""

from __future__ import annotations

import pytest

from drill.rundir.evidence import RunEvidence
from tests.vllm import catalogue
from tests.vllm.conftest import ServerPool
from tests.vllm.drills import run_drill
from tests.vllm.servers import DEFAULT, MAX_MODEL_LEN

pytestmark = [pytest.mark.vllm, pytest.mark.integration]


def test_prompts_over_max_model_len_get_clean_400s_and_nothing_else_degrades(
    vllm_servers: ServerPool, vllm_otlp_port: int, tmp_path
) -> None:
    server = vllm_servers.get(DEFAULT)
    run = run_drill(catalogue.boundary_context_length(server.url, vllm_otlp_port, MAX_MODEL_LEN), tmp_path)
    print(f"\nboundary-context-length on vLLM: {run.statuses()} ({run.wall_s:.0f} s)")
    for name in ("fault_landed", "at-limit-served", "clean-400s", "chat-unaffected", "recovered"):
        assert run.status(name) == "PASS", run.verdicts[name]
    long_docs = [r for r in RunEvidence(run.run_dir, {}).requests_in("fault") if r.pool == "long-docs"]
    refused = [r for r in long_docs if r.status == 400]
    assert len(refused) >= 5 and all(r.e2e_ms is not None and r.e2e_ms < 1000 for r in refused)
    served = [r for r in long_docs if r.ok]
    assert served and all(r.prompt_tokens == MAX_MODEL_LEN - 32 for r in served if r.prompt_tokens is not None)
