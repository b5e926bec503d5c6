"""Run a game day: its drills in order, each a ``drill run`` child process, with a cooldown and the abort rule.

Why a child process per drill rather than :class:`~drill.runner.run.Runner` in this process: a drill run owns
process-wide state for its whole life — SIGINT/SIGTERM handlers that defer signals while a fault is injected, the
watchdog that reverts after a SIGKILL, the active-run registry keyed by its pid, threads and child processes (the
embedded stack, Locust, the OTLP receiver) that a crash can leave behind. In a child each drill gets all of that
fresh, exactly as ``drill run`` gives it (same code, same exit codes, same run directory), and a drill that
crashes or leaks cannot change the next one's results or take the game day down with it. The cost, a Python
start-up per drill (about a second), is nothing beside a drill's minutes.

Each drill runs with ``--out <game day>/<NN>-<label>`` so its run directory is found without parsing output,
and its output (stdout and stderr) is kept in ``drill-run.log`` beside it and echoed. After each drill the
record (``gameday.json``) is rewritten. A drill that exits 4 stops the game day at once (its revert failed:
the target may still be faulted; ``drill cleanup`` retries the reverts); with ``abort.on_first_fail`` any drill
that does not pass stops it too. SIGINT and SIGTERM go to the running drill, which reverts and exits 130;
the game day then stops, and writes its pages either way.

Exit code of the game day: 4 if a revert failed, else 130 if interrupted, else 3 if a drill could not run
(exit 2 or 3) or the pages could not be written (``pages-error.log``), else 1 if a drill did not pass (FAIL or
INCONCLUSIVE verdicts), else 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from drill.gameday import pages
from drill.gameday.definition import LoadedGameDay, PlannedDrill
from drill.gameday.record import (
    CheckLine,
    DrillOutcome,
    DrillResult,
    GameDayRecord,
    GameDayStatus,
    read_verdict_lines,
    write_record,
)
from drill.rundir.directory import latest_run_dir

__all__ = ["GameDayOptions", "GameDayRunner", "gameday_exit_code", "drill_result"]

LOG_FILE = "drill-run.log"


@dataclass(frozen=True)
class GameDayOptions:
    out_dir: Path = Path("reports")  # game days go to <out_dir>/gamedays/<name>/<timestamp>/
    allow_hosts: tuple[str, ...] = ()
    python: str = sys.executable


def _utc(ts: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts if ts is not None else time.time()))


def drill_result(exit_code: int, checks: tuple[CheckLine, ...]) -> DrillResult:
    """One word for how a drill ended, from its exit code and verdicts."""
    if exit_code == 4:
        return DrillResult.REVERT_FAILED
    if exit_code == 130:
        return DrillResult.INTERRUPTED
    if exit_code == 0 and checks:
        return DrillResult.PASS
    if exit_code == 1 and checks:
        return DrillResult.FAIL if any(c.status == "FAIL" for c in checks) else DrillResult.INCONCLUSIVE
    return DrillResult.ERROR


def gameday_exit_code(results: Sequence[DrillResult], interrupted: bool) -> int:
    if DrillResult.REVERT_FAILED in results:
        return 4
    if interrupted or DrillResult.INTERRUPTED in results:
        return 130
    if DrillResult.ERROR in results:
        return 3
    if DrillResult.FAIL in results or DrillResult.INCONCLUSIVE in results:
        return 1
    return 0


def create_gameday_dir(out_dir: Path, name: str) -> Path:
    """A fresh ``<out>/gamedays/<name>/<UTC timestamp>/`` (``-2``, ``-3``... when one started the same second)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    parent = out_dir / "gamedays" / name
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 100):
        path = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise RuntimeError(f"could not create a new game-day directory under {parent}")


class GameDayRunner:
    def __init__(
        self, loaded: LoadedGameDay, options: GameDayOptions = GameDayOptions(), say: Callable[[str], None] = print
    ) -> None:
        self.loaded = loaded
        self.options = options
        self.say = say
        self.folder: Path | None = None
        self.record: GameDayRecord | None = None
        self._child: subprocess.Popen | None = None
        self._signalled: str | None = None
        self._wake = threading.Event()

    def run(self) -> GameDayRecord:
        self._open()
        with self._forward_signals():
            for planned in self.loaded.drills:
                if planned.number > 1 and not self._cooldown():
                    break
                outcome = self._run_drill(planned)
                self._save(self._record().with_drill(outcome))
                if self._stops_after(outcome):
                    break
        return self._finish()

    # --- the record ------------------------------------------------------------------------------

    def _record(self) -> GameDayRecord:
        assert self.record is not None, "run() opens the record first"
        return self.record

    def _save(self, record: GameDayRecord) -> None:
        assert self.folder is not None
        self.record = record
        write_record(self.folder, record)

    def _open(self) -> None:
        day = self.loaded.gameday
        self.folder = create_gameday_dir(self.options.out_dir, day.name)
        (self.folder / "gameday.yaml").write_text(self.loaded.text, encoding="utf-8")
        drills = tuple(
            DrillOutcome(p.number, p.label, p.loaded.drill.name, str(p.path), p.overrides, p.time_scale)
            for p in self.loaded.drills
        )
        self._save(
            GameDayRecord(
                day.name,
                self.folder.name,
                _utc(),
                str(self.loaded.path),
                day.title,
                day.owner,
                overrides=self.loaded.overrides,
                time_scale=self.loaded.time_scale,
                cooldown_s=self.loaded.cooldown_s,
                on_first_fail=day.abort.on_first_fail,
                drills=drills,
            )
        )
        self.say(f"game day {day.name}: {len(drills)} drill(s), record in {self.folder}")

    def _finish(self) -> GameDayRecord:
        record = self._record()
        results = [d.result for d in record.drills if d.result is not DrillResult.NOT_RUN]
        interrupted = self._signalled is not None
        status = GameDayStatus.COMPLETED
        if record.stopped_by:
            status = GameDayStatus.INTERRUPTED if interrupted else GameDayStatus.ABORTED
        code = gameday_exit_code(results, interrupted)
        self._save(replace(record, status=status, exit_code=code, finished_at=_utc()))
        assert self.folder is not None
        try:
            pages.write_pages(self.folder, self._record())
        except Exception as exc:  # noqa: BLE001 - a page bug must not hide a failed revert's exit 4
            log = self.folder / "pages-error.log"
            log.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
            self.say(
                f"internal error writing the pages: {type(exc).__name__}: {exc} (traceback in {log}); "
                f"the record is {self.folder / 'gameday.json'}"
            )
            if code in (0, 1):
                self._save(replace(self._record(), exit_code=3))
        return self._record()

    # --- one drill -------------------------------------------------------------------------------

    def _argv(self, planned: PlannedDrill, out: Path) -> list[str]:
        argv = [
            self.options.python,
            "-m",
            "drill",
            "run",
            str(planned.path),
            "--out",
            str(out),
            "--time-scale",
            repr(planned.time_scale),
            "--no-progress",
        ]
        for item in planned.overrides:
            argv += ["--set", item]
        for host in self.options.allow_hosts:
            argv += ["--allow-host", host]
        return argv

    def _run_drill(self, planned: PlannedDrill) -> DrillOutcome:
        assert self.folder is not None
        out = self.folder / f"{planned.number:02d}-{planned.label}"
        out.mkdir()
        total = len(self.loaded.drills)
        self.say(
            f"[{planned.number}/{total}] {planned.label}: drill run {planned.path.name} "
            f"(time scale {planned.time_scale:g})"
        )
        started, began = _utc(), time.monotonic()
        code = self._spawn(self._argv(planned, out), out / LOG_FILE)
        wall = round(time.monotonic() - began, 1)
        run_dir = latest_run_dir(out)
        checks, problem = read_verdict_lines(run_dir) if run_dir else ((), "the drill made no run directory")
        result = drill_result(code, checks)
        if code not in (0, 1) and not problem:
            problem = f"drill run exited {code}"
        outcome = DrillOutcome(
            planned.number,
            planned.label,
            planned.loaded.drill.name,
            str(planned.path),
            planned.overrides,
            planned.time_scale,
            result,
            code,
            started,
            wall,
            str(run_dir.relative_to(self.folder)) if run_dir else None,
            str((out / LOG_FILE).relative_to(self.folder)),
            problem,
            checks,
        )
        self.say(f"[{planned.number}/{total}] {planned.label}: {result.value} (exit {code}, {wall:.0f}s)")
        return outcome

    def _spawn(self, argv: list[str], log: Path) -> int:
        """Run one ``drill run``; its output goes to ``log`` and is echoed, line by line."""
        with open(log, "w", encoding="utf-8") as sink:
            # its own session: a ^C on the terminal reaches the game day, which forwards exactly one signal
            child = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
            )
            self._child = child
            if self._signalled:  # a signal that came while it was starting
                self._forward(self._signalled)
            try:
                assert child.stdout is not None
                for line in child.stdout:
                    sink.write(line)
                    sink.flush()
                    self.say("    " + line.rstrip("\n"))
                return child.wait()
            finally:
                self._child = None

    # --- stopping --------------------------------------------------------------------------------

    def _stops_after(self, outcome: DrillOutcome) -> bool:
        why = None
        if outcome.result is DrillResult.REVERT_FAILED:
            run_dir = self.folder / outcome.run_dir if self.folder and outcome.run_dir else None
            command = f"drill cleanup --run-dir {run_dir}" if run_dir else "drill cleanup"
            why = (
                f"drill {outcome.number} ({outcome.label}) failed to revert a fault: the target may still be "
                f"faulted; run `{command}` to retry the reverts from the journal"
            )
        elif outcome.result is DrillResult.INTERRUPTED or self._signalled:
            why = f"interrupted ({self._signalled or 'the drill exited 130'}) during drill {outcome.number}"
        elif self.loaded.gameday.abort.on_first_fail and outcome.result is not DrillResult.PASS:
            why = f"abort.on_first_fail: drill {outcome.number} ({outcome.label}) ended {outcome.result.value}"
        if why is None:
            return False
        self._save(replace(self._record(), stopped_by=why))
        self.say(f"game day stopped: {why}")
        return True

    def _cooldown(self) -> bool:
        """Wait the cooldown between two drills; False when a signal came (the game day stops)."""
        seconds = self.loaded.cooldown_s
        if seconds > 0 and not self._signalled:
            self.say(f"cooldown {seconds:g}s")
            self._wake.wait(seconds)
        if self._signalled:
            self._save(replace(self._record(), stopped_by=f"interrupted ({self._signalled}) between drills"))
            return False
        return True

    @contextmanager
    def _forward_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        first = self._signalled is None
        self._signalled = self._signalled or name
        self._wake.set()
        if first:
            self.say(f"{name}: stopping the running drill (it reverts its faults), then the game day")
            self._forward(name)

    def _forward(self, name: str) -> None:
        child = self._child
        if child is not None and child.poll() is None:
            try:
                os.kill(child.pid, signal.Signals[name])
            except ProcessLookupError:
                pass
