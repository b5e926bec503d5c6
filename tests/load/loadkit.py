"""Helpers of the load tests: run the real driver (Locust child process) for a short scenario."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from drill.load.driver import LoadDriver, LoadPlan, LoadSummary, SpawnedGenerator
from drill.rundir.records import RequestRecord, read_records
from drill.rundir.samples import FailingSample, read_samples
from drill.spec.scenario import Scenario


def scenario(rate: float = 20.0, *, inp: int = 50, out: int = 10, seed: int = 1, **pool: object) -> Scenario:
    """One chat pool with Poisson arrivals and fixed lengths; ``pool`` overrides pool keys."""
    data = {
        "name": "chat",
        "input_tokens": {"dist": "fixed", "value": inp},
        "output_tokens": {"dist": "fixed", "value": out},
    }
    data.update(pool)
    return Scenario.model_validate({"seed": seed, "arrival": {"process": "poisson", "rate": rate}, "pools": [data]})


@dataclass
class LoadRun:
    summary: LoadSummary
    records: list[RequestRecord]
    samples: list[FailingSample]
    run_dir: Path
    t0: float


def run_load(
    target: str,
    sc: Scenario,
    duration_s: float,
    run_dir: Path,
    *,
    drain_s: float = 10.0,
    workers: int = 0,
    during=None,
    generator: SpawnedGenerator | None = None,
    **plan: object,
) -> LoadRun:
    """Start the driver (on ``generator`` when given), wait ``duration_s`` (calling ``during(driver)`` once if
    given), stop, read files."""
    driver = LoadDriver(
        LoadPlan(
            scenario=sc,
            target_url=target,
            model=None,
            duration_s=duration_s,
            run_dir=run_dir,
            seed=sc.seed,
            workers=workers,
            **plan,
        ),
        generator,
    )
    driver.start()
    try:
        if during is not None:
            during(driver)
        end = driver.t0 + duration_s
        while time.time() < end:
            time.sleep(min(0.1, max(0.0, end - time.time())))
        summary = driver.stop(drain_s=drain_s)
    except BaseException:
        driver.stop(drain_s=0)
        raise
    return LoadRun(
        summary,
        list(read_records(run_dir / "requests.jsonl")),
        list(read_samples(run_dir / "failing_samples.jsonl")),
        run_dir,
        driver.t0,
    )


def wall_chunks(record: RequestRecord) -> list[float]:
    """The record's chunk arrival times as UNIX seconds."""
    return [record.intended_ts + off / 1000.0 for off in record.chunk_offsets_ms]


def dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=1, default=str))
