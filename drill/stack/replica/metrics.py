"""``GET /metrics`` of a replica: vLLM V1's Prometheus metrics (≥ 0.11 profile, docs/serving-facts.md §2).

Names, types, help texts, labels (``model_name``, ``engine``; ``finished_reason`` on
``vllm:request_success``) and bucket lists follow §2.2. Admission control's refusals are counted as
``vllm:admission_rejections_total{model_name, reason}`` (vLLM PR #55812: counted in the API server, so no
``engine`` label; ``reason`` is the flag that refused: ``max_num_queued_reqs`` or ``max_num_queued_tokens``), and
the waiting queue is split as vLLM's ``vllm:num_requests_waiting_by_reason{reason="capacity"|"deferred"}``
(the stack's waiting requests all wait for capacity: it has no grammar or remote-KV waits). Counters are
declared without ``_total`` and exposed with it, as prometheus_client does for vLLM. :class:`EngineMetrics` is an
:class:`~drill.stack.inference.core.EngineListener`: the engine calls it synchronously after each step and
for each finished request; it accumulates into plain integers and :class:`FastHistogram` (a bisect
into the bucket list, 1 µs) instead of ``prometheus_client.Histogram.observe`` (a locked loop per
sample), and a :class:`prometheus_client` collector turns the totals into metric families at scrape
time. Gauges (running, waiting, KV usage) are read from the scheduler at scrape time.

A P/D worker adds its KV connector's metrics under the names vLLM's ``NixlConnector`` exports
(``NixlPromMetrics``, ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py``; docs/disaggregated.md,
"Metrics"): the decode worker, which reads the blocks, observes ``vllm:nixl_xfer_time_seconds`` and
``vllm:nixl_bytes_transferred`` per transfer and counts ``vllm:nixl_num_failed_transfers``; the prefill worker
counts ``vllm:nixl_num_kv_expired_reqs`` (held blocks never read within ``free_after``). The stack's own:
``drill:kv_transfer_failures{point}`` (the failed transfers by where they broke), ``drill:kv_transfers_in_flight``
(decode: reads under way) and ``drill:kv_transfers_held`` (prefill: transfers held, not yet consumed).

Beyond vLLM: ``drill:step_lateness_seconds`` (actual minus scheduled end of each engine step),
``drill:gpu_memory_hog_bytes`` and ``drill:gpu_clock_fraction`` (the simulated GPU conditions).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from drill.stack.inference.core import StepRecord
from drill.stack.inference.gpu import GpuState
from drill.stack.inference.request import FinishReason, Request
from drill.stack.inference.scheduler import Scheduler

__all__ = [
    "ADMISSION_REASONS",
    "CONTENT_TYPE",
    "NIXL_BYTES_BUCKETS",
    "NIXL_XFER_TIME_BUCKETS",
    "EngineMetrics",
    "FastHistogram",
    "KvMetricsSource",
    "build_1_2_5_buckets",
]

#: The ``reason`` label values of ``vllm:admission_rejections_total``: the admission flags.
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")

#: The exposition format prometheus_client writes (and vLLM serves).
CONTENT_TYPE = CONTENT_TYPE_LATEST

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
#: ``NixlPromMetrics``' buckets: transfer time from 5 ms to 5 s, bytes from 2 KiB to 8 GiB by factors of 4.
NIXL_XFER_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_BYTES_BUCKETS = tuple(2 ** (10 + i) for i in range(1, 25, 2))
LATENESS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, … up to ``max_value``."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


class FastHistogram:
    """Cumulative-bucket histogram with ``observe(value, count)``; exported by :class:`EngineMetrics`."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        """Add ``count`` samples of ``value``."""
        self.counts[bisect_left(self.bounds, value)] += count
        self.sum += value * count

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs ending with ``+Inf``."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            running += count
            out.append(("+Inf" if bound == float("inf") else _le(bound), running))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))


_HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT_BUCKETS),
    "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    "vllm:request_time_per_output_token_seconds": (
        "Histogram of time_per_output_token_seconds per request.",
        ITL_BUCKETS,
    ),
    "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS),
    "vllm:request_queue_time_seconds": (
        "Histogram of time spent in WAITING phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:request_inference_time_seconds": (
        "Histogram of time spent in RUNNING phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:request_prefill_time_seconds": (
        "Histogram of time spent in PREFILL phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:request_decode_time_seconds": (
        "Histogram of time spent in DECODE phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:iteration_tokens_total": ("Histogram of number of tokens per engine_step.", ITERATION_TOKEN_BUCKETS),
    "vllm:request_params_n": ("Histogram of the n request parameter.", N_BUCKETS),
    "drill:step_lateness_seconds": (
        "Actual minus scheduled end of each engine step (simulated GPU timing error).",
        LATENESS_BUCKETS,
    ),
}
_TOKEN_HISTOGRAMS = {
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested generation tokens.",
}


class KvMetricsSource(Protocol):
    """A P/D worker's KV side, which adds its connector metrics to the replica's ``/metrics``."""

    def metric_families(self, labels: list[str], values: list[str]) -> Iterator[Metric]:
        """The KV-transfer metric families, labelled ``labels`` = ``values``."""
        ...


class EngineMetrics:
    """vLLM's metrics for one engine; an engine listener and a prometheus_client collector."""

    kv: KvMetricsSource | None = None  # a P/D worker's KV side (set by the API server)

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        model_name: str,
        max_model_len: int,
        cache_info: dict[str, str],
        gpu: GpuState | None = None,
        engine_index: int = 0,
    ) -> None:
        self.scheduler = scheduler
        self.gpu = gpu
        self.labels = [model_name, str(engine_index)]
        self.cache_info = cache_info
        self.created = time.time()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = {reason: 0 for reason in FinishReason}
        self.admission_rejections = dict.fromkeys(ADMISSION_REASONS, 0)
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.histograms = {name: FastHistogram(buckets) for name, (_, buckets) in _HISTOGRAMS.items()}
        self.histograms.update({name: FastHistogram(token_buckets) for name in _TOKEN_HISTOGRAMS})
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def admission_rejected(self, reason: str) -> None:
        """One request refused by admission control (the API layer calls it at either of its checks)."""
        self.admission_rejections[reason] = self.admission_rejections.get(reason, 0) + 1

    # engine listener -----------------------------------------------------------------------------
    def step_finished(self, record: StepRecord) -> None:
        """Per step: tokens per step, TTFT at first tokens, one ITL sample per request (§2.2)."""
        hist = self.histograms
        hist["vllm:iteration_tokens_total"].observe(record.out.total_num_scheduled_tokens)
        hist["drill:step_lateness_seconds"].observe(max(record.lateness_s, 0.0))
        itl = hist["vllm:inter_token_latency_seconds"]
        ttft = hist["vllm:time_to_first_token_seconds"]
        last_itl, same = -1.0, 0  # -1: no latency yet (latencies are >= 0)
        for output in record.outputs:
            self.generation_tokens += 1
            if output.inter_token_latency is None:
                request = output.request
                self.prompt_tokens += request.num_prompt_tokens
                ttft.observe(record.end_time - request.arrival_time)
            elif output.inter_token_latency == last_itl:
                same += 1
            else:
                if same:
                    itl.observe(last_itl, same)
                last_itl, same = output.inter_token_latency, 1
        if same:
            itl.observe(last_itl, same)

    def request_finished(self, request: Request) -> None:
        """Per finished request: success counter and the request-level histograms (§2.2)."""
        reason = request.finish_reason or FinishReason.ABORT
        self.success[reason] += 1
        hist = self.histograms
        finished = request.finished_ts if request.finished_ts is not None else request.arrival_time
        hist["vllm:e2e_request_latency_seconds"].observe(finished - request.arrival_time)
        hist["vllm:request_prompt_tokens"].observe(request.num_prompt_tokens)
        hist["vllm:request_generation_tokens"].observe(request.num_output_tokens)
        hist["vllm:request_params_max_tokens"].observe(request.max_tokens)
        hist["vllm:request_max_num_generation_tokens"].observe(request.max_tokens)
        hist["vllm:request_params_n"].observe(1)
        if request.first_scheduled_ts is None:
            return
        hist["vllm:request_queue_time_seconds"].observe(request.first_scheduled_ts - request.queued_ts)
        if request.first_token_ts is None or request.last_token_ts is None:
            return
        decode = request.last_token_ts - request.first_token_ts
        hist["vllm:request_prefill_time_seconds"].observe(request.first_token_ts - request.first_scheduled_ts)
        hist["vllm:request_decode_time_seconds"].observe(decode)
        hist["vllm:request_inference_time_seconds"].observe(request.last_token_ts - request.first_scheduled_ts)
        tokens = request.num_output_tokens
        hist["vllm:request_time_per_output_token_seconds"].observe(decode / (tokens - 1) if tokens > 1 else 0.0)

    # exposition ----------------------------------------------------------------------------------
    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """prometheus_client collector hook: build the metric families from the running totals."""
        labels = ["model_name", "engine"]
        yield from self._gauges(labels)
        yield from self._counters(labels)
        for name, hist in self.histograms.items():
            family = HistogramMetricFamily(
                name, _HISTOGRAMS.get(name, (_TOKEN_HISTOGRAMS.get(name, ""),))[0], labels=labels
            )
            family.add_metric(self.labels, hist.buckets(), hist.sum)
            yield family
        if self.kv is not None:
            yield from self.kv.metric_families(labels, self.labels)

    def _gauges(self, labels: list[str]) -> Iterator[Metric]:
        kv = self.scheduler.kv_cache
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", self.scheduler.num_running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", self.scheduler.num_waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv.usage),
        ):
            family = GaugeMetricFamily(name, doc, labels=labels)
            family.add_metric(self.labels, value)
            yield family
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting to be processed, by the reason they wait.",
            labels=[*labels, "reason"],
        )
        by_reason.add_metric([*self.labels, "capacity"], self.scheduler.num_waiting)
        by_reason.add_metric([*self.labels, "deferred"], 0)
        yield by_reason
        info = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=[*self.cache_info, "engine"]
        )
        info.add_metric([*self.cache_info.values(), self.labels[1]], 1.0)
        yield info
        if self.gpu is not None:
            for name, doc, value in (
                (
                    "drill:gpu_memory_hog_bytes",
                    "GPU memory taken by another process (simulated).",
                    self.gpu.memory_hog_bytes,
                ),
                (
                    "drill:gpu_clock_fraction",
                    "SM clock cap as a fraction of nominal (simulated).",
                    self.gpu.clock_fraction,
                ),
            ):
                family = GaugeMetricFamily(name, doc, labels=labels)
                family.add_metric(self.labels, value)
                yield family

    def _counters(self, labels: list[str]) -> Iterator[Metric]:
        kv = self.scheduler.kv_cache
        for name, doc, value in (
            (
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                self.scheduler.num_preemptions,
            ),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
            ("vllm:generation_tokens", "Number of generation tokens processed.", self.generation_tokens),
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                kv.prefix_queries,
            ),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", kv.prefix_hits),
        ):
            family = CounterMetricFamily(name, doc, labels=labels)
            family.add_metric(self.labels, value, created=self.created)
            yield family
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.", labels=[*labels, "finished_reason"]
        )
        for reason, count in self.success.items():
            success.add_metric([*self.labels, reason.value], count, created=self.created)
        yield success
        rejections = CounterMetricFamily(
            "vllm:admission_rejections",
            "Requests rejected by admission control, by the limit that rejected them.",
            labels=["model_name", "reason"],
        )
        for limit, count in self.admission_rejections.items():
            rejections.add_metric([self.labels[0], limit], count, created=self.created)
        yield rejections
