"""Running a drill end to end the way a user does: ``drill run`` in a subprocess, then its ``verdicts.json``.

Every run gets its own ``--out`` folder and a free OTLP port (``--set otlp.port=0``), so the runs of this
folder never collide with each other or with a stack someone else started on the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DRILL = Path(sys.executable).with_name("drill")
#: A drill of this folder takes about a minute at its time scale; this bounds a hung one.
RUN_TIMEOUT_S = 420


@dataclass(frozen=True)
class DrillRun:
    """One finished ``drill run``: its exit code, run directory, verdicts by check name, and wall time."""

    exit_code: int
    run_dir: Path
    verdicts: dict[str, dict]
    wall_s: float
    output: str

    def verdict(self, name: str) -> dict:
        """The verdict of check ``name``; a missing one fails the test with what the run did say."""
        if name not in self.verdicts:
            pytest.fail(
                f"no verdict named {name!r} in {self.run_dir}/verdicts.json; have {sorted(self.verdicts)}\n"
                f"{self.output[-3000:]}"
            )
        return self.verdicts[name]

    def status(self, name: str) -> str:
        return self.verdict(name)["status"]

    def summary(self) -> str:
        """One line per check, for assertion messages and the measured figures in the test log."""
        lines = [f"{self.run_dir.name}: exit {self.exit_code}, {self.wall_s:.0f}s"]
        lines += [f"  {v['status']:<12} {name}: {v.get('message', '')[:300]}" for name, v in self.verdicts.items()]
        return "\n".join(lines)


def _run_dir(out: Path) -> Path:
    found = [p for p in out.glob("*/*") if (p / "journal.jsonl").exists()]
    if len(found) != 1:
        pytest.fail(f"expected one run directory under {out}, found {[str(p) for p in found]}")
    return found[0]


def _argv(out: Path, drill: str, sets: tuple[str, ...], time_scale: float) -> list[str]:
    argv = [
        str(DRILL),
        "run",
        str(REPO / drill),
        "--time-scale",
        str(time_scale),
        "--out",
        str(out),
        "--no-progress",
        "--set",
        "otlp.port=0",
    ]
    for assignment in sets:
        argv += ["--set", assignment]
    return argv


@dataclass
class StartedDrill:
    """A ``drill run`` in progress; :meth:`finish` waits for it and reads its verdicts."""

    out: Path
    process: subprocess.Popen
    started: float

    def finish(self) -> DrillRun:
        try:
            stdout, _ = self.process.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.terminate()  # the runner reverts its faults and stops its stack on SIGTERM
            stdout, _ = self.process.communicate(timeout=60)
            pytest.fail(f"drill run did not finish within {RUN_TIMEOUT_S}s:\n{stdout[-4000:]}")
        wall = time.monotonic() - self.started
        if self.process.returncode not in (0, 1):
            pytest.fail(f"drill run exited {self.process.returncode} (not a verdict):\n{stdout[-4000:]}")
        run_dir = _run_dir(self.out)
        document = json.loads((run_dir / "verdicts.json").read_text())
        assert document["schema"].startswith("llm-drill/verdicts/"), document["schema"]
        verdicts = {check["name"]: check for check in document["checks"]}
        run = DrillRun(self.process.returncode, run_dir, verdicts, wall, stdout)
        print(run.summary())  # the measured figures, kept in the test log (pytest -s / -rA)
        return run


def start_drill(out: Path, drill: str, *sets: str, time_scale: float) -> StartedDrill:
    """Start ``drill run DRILL --time-scale F --out OUT --set otlp.port=0 --set ...`` in a subprocess."""
    process = subprocess.Popen(
        _argv(out, drill, sets, time_scale), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return StartedDrill(out, process, time.monotonic())


@pytest.fixture()
def drill_run(tmp_path: Path) -> Iterator[Callable[..., StartedDrill]]:
    """``drill_run(drill, *sets, time_scale=F)`` starts one ``drill run`` in a fresh folder of this test and
    returns it (``.finish()`` waits for its verdicts); runs still going at the end of the test are stopped."""
    counter = iter(range(100))
    started: list[StartedDrill] = []

    def start(drill: str, *sets: str, time_scale: float) -> StartedDrill:
        run = start_drill(tmp_path / f"run-{next(counter)}", drill, *sets, time_scale=time_scale)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.process.poll() is None:
            run.process.terminate()
            run.process.communicate(timeout=60)
