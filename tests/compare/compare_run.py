"""Running ``drill compare`` the way a user does (a subprocess), then reading its comparison folder.

Each side's run directory is read into the e2e tests' :class:`~tests.e2e.conftest.DrillRun`, so the verdict
assertions a ``drill run`` test makes are made the same way on a comparison's baseline and candidate.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import DRILL, REPO, DrillRun

__all__ = ["ComparedPair", "compare_drill", "unbounded_queue_pair"]

#: Two runs of a CI-scale drill and the judging; bounds a hung comparison.
COMPARE_TIMEOUT_S = 840
UNBOUNDED = "drills/unbounded-queue.yaml"
#: The candidate of the flagship's comparison: admission control on, the drill file's header's second line.
ADMISSION = "target.config.engine.max_num_queued_reqs=128"
#: The unbounded-queue drill in CI: shorter warm-up, baseline and recovery (the flood is the drill's own), fewer
#: replayed samples — the replay is not what its tests prove — and the weights loaded in 200 ms instead of
#: llama-3-8b's modelled 4.2 s (a sleep in each replica's cold start, which no time scale shortens and nothing here
#: asserts: the flood, not the start, is under test), on both sides alike.
QUEUE_CI = (
    # the fault phase the tests ran before the drill's grew to 257 s for its streamed retries' echo at the default
    # scale (tests/spec/test_recovery_after_flood.py): at 0.3 a 51 s phase, the flood's 18 s and 28 s after it
    "phases.fault=170s",
    "phases.warmup=10s",
    "phases.baseline=40s",
    "phases.recovery=40s",
    "phases.replay.max_samples=20",
    "phases.replay.controls=4",
    "target.config.engine.weight_load_time=200ms",
)
#: Its flood must last long enough (18 s) for the queue to outgrow what admission control admits.
QUEUE_TIME_SCALE = 0.3


@dataclass(frozen=True)
class ComparedPair:
    exit_code: int
    folder: Path
    document: dict  # comparison.json
    baseline: DrillRun
    candidate: DrillRun
    wall_s: float
    output: str

    def verdict_change(self, name: str) -> tuple[str, str]:
        found = [(v["baseline"], v["candidate"]) for v in self.document["verdicts"] if v["name"] == name]
        assert found, f"no verdict {name!r} in {self.folder}/comparison.json\n{self.output[-3000:]}"
        return found[0]


def _side(document: dict, side: str, output: str, wall_s: float) -> DrillRun:
    run = next(r for r in document["runs"] if r["side"] == side)
    run_dir = Path(run["run_dir"])
    verdicts = {v["name"]: v for v in json.loads((run_dir / "verdicts.json").read_text())["checks"]}
    return DrillRun(run["exit_code"], run_dir, verdicts, wall_s, output)


def compare_drill(out: Path, drill: str, change: str, *both: str, time_scale: float) -> ComparedPair:
    """``drill compare DRILL --set CHANGE --set-both ... --time-scale F --out OUT``, finished and read back."""
    argv = [str(DRILL), "compare", str(REPO / drill), "--set", change, "--time-scale", str(time_scale)]
    argv += ["--out", str(out), "--no-progress", "--set-both", "otlp.port=0"]
    for assignment in both:
        argv += ["--set-both", assignment]
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=COMPARE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.terminate()  # the runner reverts its faults and stops its stack on SIGTERM
        output, _ = process.communicate(timeout=60)
        pytest.fail(f"drill compare did not finish within {COMPARE_TIMEOUT_S}s:\n{output[-4000:]}")
    wall = time.monotonic() - started
    print(output)  # the printed comparison, kept in the test log (pytest -s / -rA)
    if process.returncode not in (0, 1):
        pytest.fail(f"drill compare exited {process.returncode} (not a comparison):\n{output[-4000:]}")
    found = list(out.glob("comparisons/*/*/comparison.json"))
    assert len(found) == 1, f"expected one comparison under {out}, found {found}"
    document = json.loads(found[0].read_text())
    baseline, candidate = (_side(document, side, output, wall) for side in ("baseline", "candidate"))
    return ComparedPair(process.returncode, found[0].parent, document, baseline, candidate, wall, output)


def unbounded_queue_pair(out: Path) -> ComparedPair:
    """The flagship drill (the baseline) against admission control (the candidate): one ``drill compare`` at the
    CI scale. tests/conftest.py runs it once a session for every test that reads it."""
    return compare_drill(out, UNBOUNDED, ADMISSION, *QUEUE_CI, time_scale=QUEUE_TIME_SCALE)
