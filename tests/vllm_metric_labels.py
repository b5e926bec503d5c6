"""The ``vllm:`` samples the harness's metric map (drill/serving_metrics.py, docs/metrics-map.md) reads, with the
label names vLLM gives each — checked against a real vLLM's ``/metrics`` (tests/vllm/test_vllm_queue.py) and against
the reference stack's (tests/stack/replica/test_vllm_metric_map.py), both captured from a running server.

vLLM V1 (``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger``; ``prometheus_client`` adds ``_total`` to a counter
and ``_sum``/``_count``/``_bucket`` to a histogram): every family carries ``model_name`` and ``engine``, except
``vllm:admission_rejections_total`` (counted in the API server: ``model_name`` and ``reason``), and
``vllm:num_requests_waiting_by_reason`` adds ``reason``.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

#: Exposed sample name -> the label names vLLM gives it.
VLLM_EXPORTS = {
    "vllm:num_requests_waiting": {"model_name", "engine"},
    "vllm:num_requests_waiting_by_reason": {"model_name", "engine", "reason"},
    "vllm:num_requests_running": {"model_name", "engine"},
    "vllm:kv_cache_usage_perc": {"model_name", "engine"},
    "vllm:prefix_cache_queries_total": {"model_name", "engine"},
    "vllm:prefix_cache_hits_total": {"model_name", "engine"},
    "vllm:num_preemptions_total": {"model_name", "engine"},
    "vllm:generation_tokens_total": {"model_name", "engine"},
    "vllm:time_to_first_token_seconds_sum": {"model_name", "engine"},
    "vllm:time_to_first_token_seconds_count": {"model_name", "engine"},
    "vllm:request_queue_time_seconds_sum": {"model_name", "engine"},
    "vllm:request_queue_time_seconds_count": {"model_name", "engine"},
    "vllm:admission_rejections_total": {"model_name", "reason"},
}

#: The metric map's KV-transfer quantities: only a disaggregated (P/D) worker exports them, so an aggregated vLLM,
#: an aggregated stack replica and llama.cpp have none of them ("not available", never 0).
PD_ONLY = frozenset({"kv_transfer_seconds", "kv_transfer_bytes", "kv_transfer_failures", "kv_transfers_pending"})


def sample_labels(text: str) -> dict[str, set[str]]:
    """Sample name -> the label names its samples carry (bucket and quantile bounds left out)."""
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(k for k in sample.labels if k not in ("le", "quantile"))
    return labels


def label_values(text: str, sample: str, label: str) -> set[str]:
    """The values ``label`` takes on the samples called ``sample``."""
    return {
        s.labels[label]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample and label in s.labels
    }
