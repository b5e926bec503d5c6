"""Running a drill end to end the way a user does: ``drill run`` in a subprocess, then its ``verdicts.json``.

Every run gets its own ``--out`` folder and a free OTLP port (``--set otlp.port=0``), so the runs of this
folder never collide with each other or with a stack someone else started on the machine.

A module's tests that each assert one or two runs of a drill declare them (``PLANNED_RUNS``: test name ->
:class:`PlannedRun`) and take the ``planned`` fixture: the runs of the module's selected tests start in waves of
``SIDE_BY_SIDE`` (a module constant), side by side, so the next tests' runs are under way while a test waits for
its own. A ``drill run`` of the embedded stack uses about a fifth of one core (its phases are wall-clock time:
the engine's latencies are simulated), so two or three side by side do not change what it measures; the runs of
one wave start together, so no run's stack start or report falls inside another's measured phases. A run whose
verdict has a thin latency margin, or compares runs made one after the other, is planned ``alone``: a wave of
its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
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
    """A ``drill run`` in progress, its output going to ``log``; :meth:`finish` waits for it and reads its
    verdicts (a file, not a pipe: a run nobody waits for yet never blocks on a full pipe)."""

    out: Path
    process: subprocess.Popen
    started: float  # time.time()
    log: Path
    timed_out: bool = field(default=False, compare=False)

    def wait(self) -> None:
        """Wait for the process to end, stopping it after ``RUN_TIMEOUT_S``; reads nothing, fails nothing."""
        try:
            self.process.wait(timeout=max(1.0, RUN_TIMEOUT_S - (time.time() - self.started)))
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.process.terminate()  # the runner reverts its faults and stops its stack on SIGTERM
            self.process.wait(timeout=60)

    def finish(self) -> DrillRun:
        self.wait()
        stdout = self.log.read_text(errors="replace")
        if self.timed_out:
            pytest.fail(f"drill run did not finish within {RUN_TIMEOUT_S}s:\n{stdout[-4000:]}")
        wall = self.log.stat().st_mtime - self.started  # its last line: when it ended, if nobody waited then
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
    log = out.with_name(f"{out.name}.log")
    with log.open("w") as output:
        process = subprocess.Popen(_argv(out, drill, sets, time_scale), cwd=REPO, stdout=output, stderr=output)
    return StartedDrill(out, process, time.time(), log)


def _stop(runs: list[StartedDrill]) -> None:
    for run in runs:
        if run.process.poll() is None:
            run.process.terminate()
            run.process.wait(timeout=60)


@dataclass(frozen=True)
class PlannedRun:
    """One ``drill run`` a test asserts: the drill file (relative to the repository), its ``--set`` overrides,
    its time scale, and whether it runs ``alone`` (a wave of its own: a verdict with a thin latency margin)."""

    drill: str
    sets: tuple[str, ...] = ()
    time_scale: float = 0.25
    alone: bool = False


def plan_waves(runs: list[PlannedRun], size: int) -> list[list[int]]:
    """The indexes of ``runs`` in waves: the shared ones in order, up to ``size`` a wave, then each ``alone`` one."""
    shared = [i for i, run in enumerate(runs) if not run.alone]
    return [shared[i : i + size] for i in range(0, len(shared), size)] + [[i] for i, r in enumerate(runs) if r.alone]


class RunWaves:
    """The planned runs of the selected tests, in test order, started a wave at a time (:func:`plan_waves`): the
    next wave starts when a test asks for one of its runs, after every run of the waves before has ended."""

    def __init__(self, folder: Path, queue: list[tuple[str, PlannedRun]], size: int) -> None:
        self.folder, self.queue = folder, queue
        self.waves = plan_waves([run for _, run in queue], size)
        self.started: dict[int, StartedDrill] = {}
        self.finished: dict[int, DrillRun] = {}

    def runs(self, test: str) -> tuple[DrillRun, ...]:
        """The finished runs of ``test``, in its plan's order (starting waves as needed)."""
        indexes = [i for i, (owner, _) in enumerate(self.queue) if owner == test]
        if not indexes:
            pytest.fail(f"{test} takes the planned fixture but has no PLANNED_RUNS entry")
        for index in indexes:
            while index not in self.started:
                self._next_wave()
        for index in indexes:
            if index not in self.finished:
                self.finished[index] = self.started[index].finish()
        return tuple(self.finished[i] for i in indexes)

    def _next_wave(self) -> None:
        for run in self.started.values():
            run.wait()  # the waves before end first: no run's measured phases overlap another wave's stack start
        wave = next(w for w in self.waves if w[0] not in self.started)
        for index in wave:
            planned = self.queue[index][1]
            out = self.folder / f"run-{index}"
            self.started[index] = start_drill(out, planned.drill, *planned.sets, time_scale=planned.time_scale)

    def stop(self) -> None:
        _stop(list(self.started.values()))


@pytest.fixture(scope="module")
def run_waves(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunWaves]:
    """The module's ``PLANNED_RUNS`` of its selected tests, run in waves of its ``SIDE_BY_SIDE``."""
    plan: Mapping[str, tuple[PlannedRun, ...]] = request.module.PLANNED_RUNS
    selected = [item.name for item in request.session.items if item.module is request.module]
    queue = [(name, run) for name in selected for run in plan.get(name, ())]
    waves = RunWaves(tmp_path_factory.mktemp("planned-runs"), queue, request.module.SIDE_BY_SIDE)
    yield waves
    waves.stop()


@pytest.fixture()
def planned(request: pytest.FixtureRequest, run_waves: RunWaves) -> tuple[DrillRun, ...]:
    """The finished runs this test planned in its module's ``PLANNED_RUNS``, in their order."""
    return run_waves.runs(request.node.name)
