"""The reference stack refuses a flood as vLLM does, and the load client reads every refusal as one.

Real processes: the stack (router + one replica with ``max_num_queued_reqs``) and the load generator's child process
(Locust). vLLM checks admission before the response starts (HTTP 503) and again when the engine takes the request
(200, then an error event with code 503); neither form carries ``Retry-After``. Whichever form each refusal took, the
client records it as ``refused`` — the in-stream ones with ``stream_error_code`` 503 — and the client's refusals are
exactly the replica's ``vllm:admission_rejections_total``. How many take the in-stream form depends on how requests
race for a freed slot (a few percent here); ``tests/stack/replica/test_api_format.py`` makes a burst that shows both.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from drill.load.driver import LoadDriver, LoadPlan
from drill.rundir.records import ErrorClass, read_records
from drill.spec.scenario import Scenario

pytestmark = [pytest.mark.integration]


def _flood(url: str, run_dir: Path) -> list:
    scenario = Scenario.model_validate(
        {
            "seed": 7,
            "arrival": {"process": "poisson", "rate": 200},
            "pools": [
                {
                    "name": "chat",
                    "input_tokens": {"dist": "fixed", "value": 40},
                    "output_tokens": {"dist": "fixed", "value": 20},
                    "timeout": "30s",
                }
            ],
        }
    )
    driver = LoadDriver(
        LoadPlan(scenario=scenario, target_url=url, model=None, duration_s=3.0, run_dir=run_dir, seed=7)
    )
    driver.start()
    try:
        while time.time() < driver.t0 + 3.0:
            time.sleep(0.1)
        driver.stop(drain_s=30)
    except BaseException:
        driver.stop(drain_s=0)
        raise
    return list(read_records(run_dir / "requests.jsonl"))


def _rejections(replica_url: str) -> float:
    text = httpx.get(f"{replica_url}/metrics", trust_env=False, timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:admission_rejections_total{")
    )


def test_a_flood_is_refused_in_vllms_forms_and_every_refusal_is_counted(stack_factory, tmp_path: Path) -> None:
    config = {
        "replicas": 1,
        "engine": {"weight_load_time": "200ms", "max_num_queued_reqs": 8, "max_num_seqs": 8},
        "links": {"replica_proxies": False},
    }
    state = stack_factory(config)
    records = _flood(state.router, tmp_path / "run")
    refused = [r for r in records if r.error is ErrorClass.REFUSED]
    in_stream = [r for r in refused if r.stream_error_code is not None]
    assert len(records) > 200 and len(refused) > 100, len(refused)
    assert {r.error for r in records if not r.ok} == {ErrorClass.REFUSED}  # no refusal misread as another error
    assert all(r.status == 200 and r.stream_error_code == 503 and r.ttft_ms is None for r in in_stream)
    assert all(r.status == 503 for r in refused if r.stream_error_code is None)
    assert all(r.retry_after_s is None for r in refused)
    assert len(refused) == _rejections(state.replicas[0].direct_url)  # measured: ~200 refused, 3% in the stream
