"""The metric map's vLLM names are vLLM's, with vLLM's labels, and the reference stack exports every one of them.

The names and labels are tests/vllm_metric_labels.py's ``VLLM_EXPORTS``, which tests/vllm/test_vllm_queue.py checks
against a real vLLM's ``/metrics``; here the stack's ``/metrics`` is scraped from a running replica. The KV-transfer
quantities are vLLM ``NixlConnector``'s names (``NixlPromMetrics``), exported by P/D workers only
(``tests/stack/pd/test_kv_metrics.py``); vLLM has no gauge of transfers under way, so the stack's own
``drill:kv_transfers_in_flight`` stands in its column.
"""

from __future__ import annotations

import httpx
import pytest

from drill.serving_metrics import _QUANTITY_TABLE as TABLE
from drill.serving_metrics import QUANTITIES, resolve
from tests.vllm_metric_labels import PD_ONLY, VLLM_EXPORTS, sample_labels

pytestmark = pytest.mark.anyio

#: vLLM NixlConnector's samples (``NixlPromMetrics``) the map reads: a P/D decode worker's, not an aggregated replica's.
NIXL_EXPORTS = {
    "vllm:nixl_xfer_time_seconds_sum": {"model_name", "engine"},
    "vllm:nixl_xfer_time_seconds_count": {"model_name", "engine"},
    "vllm:nixl_bytes_transferred_sum": {"model_name", "engine"},
    "vllm:nixl_num_failed_transfers_total": {"model_name", "engine"},
}
#: Quantities whose vLLM column holds the stack's own name.
STACK_OWN = {"kv_transfers_pending": "drill:kv_transfers_in_flight"}


def test_every_vllm_name_in_the_map_is_one_vllm_exports() -> None:
    for quantity in QUANTITIES:
        names = TABLE[quantity].names.get("vllm")
        assert names, f"{quantity} has no vLLM name"
        if quantity in STACK_OWN:
            assert names == (STACK_OWN[quantity],)
            continue
        found = resolve(VLLM_EXPORTS | NIXL_EXPORTS, quantity)
        assert found is not None and found.samples[0].startswith("vllm:"), quantity


async def test_the_stack_exports_each_with_vllms_labels(start_replica) -> None:
    async with (
        start_replica(engine={"enable_prefix_caching": True, "max_num_queued_reqs": 4}) as replica,
        httpx.AsyncClient(base_url=replica.server.url) as client,
    ):
        await client.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 3})
        text = (await client.get("/metrics")).text
    labels = sample_labels(text)
    for name, expected in VLLM_EXPORTS.items():
        assert labels.get(name) == expected, (name, labels.get(name))
    assert all(resolve(labels, quantity) is not None for quantity in QUANTITIES if quantity not in PD_ONLY)
    assert all(resolve(labels, quantity) is None for quantity in PD_ONLY)  # an aggregated replica: not available
