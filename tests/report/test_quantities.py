"""The metric mapping: vLLM, SGLang, TGI and llama.cpp names to quantities; what is not exported is None, never 0.

The scrapes are real Prometheus exposition text parsed by the scraper's own parser (``parse_samples``), so the
sample names (``_total`` on counters, ``_sum``/``_count`` on histograms) are the ones a real run records.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drill.report.quantities import metric_used, phase_quantities, quantity_series
from drill.rundir.evidence import RunEvidence
from drill.runner.scraper import parse_samples
from drill.serving_metrics import METRIC_NAMES, QUANTITIES, SERVERS

T0 = 1_764_000_000.0


def _run_dir(tmp_path: Path, lines: list[dict], phases: dict[str, tuple[float, float]]) -> RunEvidence:
    journal = []
    seq = 0
    for phase, (start, end) in phases.items():
        seq += 1
        journal.append(
            {"seq": seq, "event": "phase_started", "ts": T0 + start, "phase": phase, "planned_s": end - start}
        )
        seq += 1
        journal.append({"seq": seq, "event": "phase_ended", "ts": T0 + end, "phase": phase, "elapsed_s": end - start})
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in journal))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return RunEvidence(tmp_path)


def _scrape(t: float, source: str, text: str) -> dict:
    return {
        "ts": T0 + t,
        "source": source,
        "url": f"http://{source}/metrics",
        "ok": True,
        "samples": parse_samples(text),
    }


def _vllm(
    waiting: int,
    running: int,
    kv: float,
    hits: int,
    queries: int,
    preempt: int,
    ttft_sum: float,
    ttft_count: int,
    engine: str = "0",
) -> str:
    labels = f'engine="{engine}",model_name="m"'
    return f"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{labels}}} {waiting}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{labels}}} {running}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{{labels}}} {kv}
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{{{labels}}} {hits}
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{{{labels}}} {queries}
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{{{labels}}} {preempt}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{labels},le="1.0"}} {ttft_count}
vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {ttft_count}
vllm:time_to_first_token_seconds_count{{{labels}}} {ttft_count}
vllm:time_to_first_token_seconds_sum{{{labels}}} {ttft_sum}
"""


def test_every_quantity_maps_each_server_or_says_it_has_none():
    assert set(METRIC_NAMES) == set(QUANTITIES)
    for names in METRIC_NAMES.values():
        assert set(names) == set(SERVERS)
    assert METRIC_NAMES["queue_depth"] == {
        "vllm": "vllm:num_requests_waiting",
        "sglang": "sglang:num_queue_reqs",
        "tgi": "tgi_queue_size",
        "llamacpp": "llamacpp:requests_deferred",
    }
    assert METRIC_NAMES["kv_cache_usage"]["tgi"] == ""  # TGI exports no KV-cache share


def test_vllm_two_replicas_gauges_counters_ratio_and_histogram(tmp_path):
    lines = []
    # baseline 0..10 s: hits 50 of 100 queries; fault 10..20 s: hits 10 of 100, queue grows on replica-0.
    for t in range(0, 21, 2):
        fault = t > 10
        q0 = 8 * (t - 10) if fault else 0
        hits = 5 * min(t, 10) + (t - 10 if fault else 0)
        queries = 10 * t
        preempt = 3 if t >= 14 else 0
        lines.append(
            _scrape(
                t,
                "replica-0",
                _vllm(
                    q0,
                    4,
                    0.9 if fault else 0.3,
                    hits,
                    queries,
                    preempt,
                    ttft_sum=0.1 * t + (0.9 * (t - 10) if fault else 0),
                    ttft_count=t,
                ),
            )
        )
        lines.append(_scrape(t + 0.01, "replica-1", _vllm(1, 2, 0.2, 0, 0, 0, 0.0, 0)))
    evidence = _run_dir(tmp_path, lines, {"baseline": (0, 10), "fault": (10, 20)})
    q = phase_quantities(evidence)

    assert q["baseline"]["queue_depth"] == 1  # replica-1's 1 + replica-0's 0, summed
    assert q["fault"]["queue_depth"] == 8 * 8 + 1  # the largest sum in [10 s, 20 s)
    assert q["baseline"]["running"] == pytest.approx(6)  # 4 + 2, mean
    assert q["fault"]["kv_cache_usage"] == pytest.approx(0.9)  # the fullest replica
    assert q["baseline"]["kv_cache_usage"] == pytest.approx(0.3)
    # Δhits/Δqueries over the increments stamped in the phase (the t=10 scrape closes the baseline)
    assert q["baseline"]["prefix_cache_hit_rate"] == pytest.approx(50 / 100)
    assert q["fault"]["prefix_cache_hit_rate"] == pytest.approx(10 / 100)
    assert q["baseline"]["preemptions"] == 0  # exported and zero: a measured 0
    assert q["fault"]["preemptions"] == 3
    assert q["baseline"]["ttft_seconds"] == pytest.approx(0.1)
    assert q["fault"]["ttft_seconds"] == pytest.approx(1.0)
    assert metric_used(evidence, "ttft_seconds") == "vllm:time_to_first_token_seconds"

    series = quantity_series(evidence, "queue_depth")
    assert series is not None and len(series) == 11
    assert series[-1] == (pytest.approx(T0 + 20), 81.0)  # a round is stamped with its first scrape
    rates = quantity_series(evidence, "prefix_cache_hit_rate")
    assert rates is not None and rates[0][1] == pytest.approx(0.5) and rates[-1][1] == pytest.approx(0.1)


def test_a_quantity_the_target_does_not_export_is_none_not_zero(tmp_path):
    text = (
        "# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 5\n"
    )
    lines = [_scrape(t, "tgi", text) for t in range(0, 6)]
    evidence = _run_dir(tmp_path, lines, {"baseline": (0, 5)})
    q = phase_quantities(evidence)["baseline"]
    assert q["queue_depth"] == 3 and q["running"] == 5
    for missing in ("kv_cache_usage", "prefix_cache_hit_rate", "preemptions", "ttft_seconds"):
        assert q[missing] is None, missing
        assert quantity_series(evidence, missing) is None


def test_sglang_hit_rate_is_its_gauge_and_llamacpp_its_own_names(tmp_path):
    sglang = (
        '# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="m"} 7\n'
        '# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name="m"} 0.5\n'
        '# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{model_name="m"} 0.25\n'
    )
    llama = (
        "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n"
        "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 4\n"
    )
    evidence = _run_dir(tmp_path, [_scrape(t, "s", sglang) for t in range(4)], {"baseline": (0, 3)})
    q = phase_quantities(evidence)["baseline"]
    assert (q["queue_depth"], q["kv_cache_usage"], q["prefix_cache_hit_rate"]) == (7, 0.5, 0.25)
    assert metric_used(evidence, "prefix_cache_hit_rate") == "sglang:cache_hit_rate"

    other = tmp_path / "llama"
    other.mkdir()
    evidence = _run_dir(other, [_scrape(t, "l", llama) for t in range(4)], {"baseline": (0, 3)})
    q = phase_quantities(evidence)["baseline"]
    assert (q["queue_depth"], q["running"], q["prefix_cache_hit_rate"]) == (2, 4, None)


def test_a_counter_reset_counts_the_new_value_and_failed_scrapes_count_for_nothing(tmp_path):
    def preempt(n):
        return f"# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total {n}\n"

    lines = [
        _scrape(0, "r", preempt(10)),
        _scrape(1, "r", preempt(12)),
        {"ts": T0 + 2, "source": "r", "url": "u", "ok": False, "error": "ConnectError: refused"},
        _scrape(3, "r", preempt(1)),  # the replica restarted: 1 new preemption, not -11
        _scrape(4, "r", preempt(4)),
    ]
    evidence = _run_dir(tmp_path, lines, {"fault": (0, 4)})
    assert phase_quantities(evidence)["fault"]["preemptions"] == 2 + 1 + 3


def test_unreadable_scrape_lines_are_counted(tmp_path):
    good = _scrape(0, "r", "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n")
    evidence = _run_dir(tmp_path, [good, good | {"ts": T0 + 1}], {"baseline": (0, 1)})
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write("{not json\n")
        fh.write(json.dumps(good | {"ts": T0 + 1.5}) + "\n")
    assert phase_quantities(evidence)["baseline"]["queue_depth"] == 2
    report = evidence.reports["metrics.jsonl"]
    assert report.bad_count == 1 and report.lines_read == 3


def test_no_metrics_file_means_every_quantity_is_not_available(tmp_path):
    evidence = _run_dir(tmp_path, [], {"baseline": (0, 1)})
    (tmp_path / "metrics.jsonl").unlink()
    assert phase_quantities(evidence) == {"baseline": dict.fromkeys(QUANTITIES)}
    with pytest.raises(KeyError, match="unknown quantity"):
        quantity_series(evidence, "queue_lenght")


def test_kv_transfer_quantities_read_sglang_names_and_are_not_available_on_an_aggregated_target(tmp_path):
    sglang = """# TYPE sglang:num_transfer_failed_reqs_total counter
sglang:num_transfer_failed_reqs_total{{model_name="m"}} {failed}
# TYPE sglang:num_decode_transfer_queue_reqs gauge
sglang:num_decode_transfer_queue_reqs{{model_name="m"}} {queued}
"""
    lines = [_scrape(t, "decode", sglang.format(failed=2 * t, queued=t)) for t in range(0, 11, 2)]
    lines += [_scrape(t + 0.01, "agg", _vllm(0, 1, 0.1, 0, 0, 0, 0.0, 0)) for t in range(0, 11, 2)]
    evidence = _run_dir(tmp_path, lines, {"fault": (0, 10)})
    q = phase_quantities(evidence)["fault"]
    assert q["kv_transfer_failures"] == 20  # 0 -> 20 over the phase
    assert q["kv_transfers_pending"] == 8  # the largest read in [0 s, 10 s)
    assert q["kv_transfer_seconds"] is None and q["kv_transfer_bytes"] is None  # SGLang's are in ms and MB
    assert metric_used(evidence, "kv_transfer_failures") == "sglang:num_transfer_failed_reqs_total"
    (tmp_path / "agg").mkdir()
    aggregated = _run_dir(tmp_path / "agg", [line for line in lines if line["source"] == "agg"], {"fault": (0, 10)})
    assert {k: v for k, v in phase_quantities(aggregated)["fault"].items() if k.startswith("kv_transfer")} == {
        "kv_transfer_seconds": None,
        "kv_transfer_bytes": None,
        "kv_transfer_failures": None,
        "kv_transfers_pending": None,
    }
