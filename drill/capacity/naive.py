"""The naive capacity estimate a user makes from one request's peak tokens/s, measured so it can be compared.

The estimate (``docs/capacity.md``): send requests one at a time, take the fastest one's output tokens per
second, and divide by the tokens an average answer has::

    naive rate = replicas × peak single-request output tokens/s ÷ mean planned output tokens per request

It ignores what decides capacity: batching (many requests share one forward pass, so a replica serves far more
tokens/s than one stream sees), queueing, prefill interference with decode, the length distribution's tail and
the SLO. The requests are the scenario's own, sent by the load driver with at most one in flight (arrivals that
come while one is in flight are dropped by the client, never queued), into ``naive/``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from drill.load.driver import LoadDriver, LoadPlan
from drill.load.schedule import build_schedule, with_total_rate
from drill.rundir.records import RequestRecord, read_records
from drill.spec.scenario import Scenario
from drill.stats import percentile

__all__ = ["FORMULA", "NaiveEstimate", "mean_planned_output", "measure_naive", "naive_from_records"]

FORMULA = "replicas × peak single-request output tokens/s ÷ mean planned output tokens per request"
_SAMPLE_S = 12.0
_SAMPLE_RATE = 1.0


@dataclass(frozen=True)
class NaiveEstimate:
    requests: int  # requests measured one at a time
    peak_tokens_per_s: float | None  # the fastest request's decode rate: (output tokens - 1) / (last chunk - TTFT)
    median_tokens_per_s: float | None
    mean_output_tokens: float  # of the scenario's planned lengths
    replicas: int
    rate: float | None  # the naive estimate, requests/s
    directory: str
    formula: str = FORMULA


def mean_planned_output(scenario: Scenario, seed: int, requests: int = 4000) -> float:
    """The mean planned output length of the scenario's request set (its own length distributions)."""
    length = 100.0
    planned = build_schedule(with_total_rate(scenario, requests / length, length), length, seed).requests
    return sum(p.output_tokens for p in planned) / len(planned) if planned else 0.0


def _tokens_per_s(record: RequestRecord) -> float | None:
    tpot = record.tpot_ms
    return 1000.0 / tpot if tpot else None


def naive_from_records(
    records: list[RequestRecord], mean_output: float, replicas: int, directory: str
) -> NaiveEstimate:
    speeds = [s for r in records if r.ok and (s := _tokens_per_s(r)) is not None]
    peak = max(speeds) if speeds else None
    rate = replicas * peak / mean_output if peak is not None and mean_output > 0 else None
    return NaiveEstimate(len(speeds), peak, percentile(speeds, 50), mean_output, replicas, rate, directory)


def measure_naive(
    run_dir: Path,
    scenario: Scenario,
    *,
    target_url: str,
    model: str | None,
    headers: dict[str, str],
    seed: int,
    replicas: int,
) -> NaiveEstimate:
    """Send the scenario's requests one at a time for a few seconds and make the naive estimate from them."""
    directory = run_dir / "naive"
    directory.mkdir(parents=True, exist_ok=False)
    one_at_a_time = with_total_rate(scenario, _SAMPLE_RATE, _SAMPLE_S).model_copy(update={"max_in_flight": 1})
    plan = LoadPlan(one_at_a_time, target_url, model, _SAMPLE_S, directory, seed, headers=dict(headers))
    driver = LoadDriver(plan)
    driver.start()
    time.sleep(max(0.0, (driver.t0 or time.time()) + _SAMPLE_S - time.time()))
    driver.stop(drain_s=30.0)
    records = list(read_records(directory / "requests.jsonl"))
    return naive_from_records(
        records, mean_planned_output(scenario, seed), replicas, str(directory.relative_to(run_dir))
    )
