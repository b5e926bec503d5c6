"""The load generator is spawned beside the target's start (its import of Locust off the run's critical path),
and a run that ends before its load starts leaves no generator behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drill.load.driver import SpawnedGenerator, spawn_generator
from drill.runner import run
from drill.spec.loader import load_drill

pytestmark = pytest.mark.integration


def _unreachable_target_drill(tmp_path: Path) -> Path:
    drill = {
        "name": "no-target",
        # nothing listens on port 9: the target is not healthy after 1 s, and the run ends before its load starts
        "target": {"kind": "openai", "config": {"url": "http://127.0.0.1:9", "startup_timeout": "1s"}},
        "scenario": {
            "model": "m",
            "arrival": {"process": "poisson", "rate": 1},
            "pools": [
                {
                    "name": "chat",
                    "input_tokens": {"dist": "fixed", "value": 20},
                    "output_tokens": {"dist": "fixed", "value": 8},
                }
            ],
        },
        "phases": {"cold_start": {"timeout": "1s"}, "warmup": "0s", "baseline": "1s", "fault": "1s", "recovery": "1s"},
        "otlp": {"enabled": False},
    }
    path = tmp_path / "no-target.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    return path


def test_a_run_whose_target_never_answers_closes_the_generator_it_spawned_ahead(tmp_path: Path, monkeypatch) -> None:
    spawned: list[SpawnedGenerator] = []

    def spawn(run_dir: Path) -> SpawnedGenerator:
        spawned.append(spawn_generator(run_dir))
        return spawned[-1]

    monkeypatch.setattr(run, "spawn_generator", spawn)
    runner = run.Runner(load_drill(_unreachable_target_drill(tmp_path)), run.RunOptions(out_dir=tmp_path / "reports"))
    result = runner.run()
    assert result.status.value == "error" and result.exit_code != 0
    # it was spawned before the target's start, and the run closed and reaped it: it exited, finding no plan
    (generator,) = spawned
    assert generator.run_dir == runner.rundir.path and runner.generator is None
    assert generator.proc.returncode == 2
    assert not (runner.rundir.path / "requests.jsonl").exists()
