"""The game-day record (``gameday.json``): what ran, how each drill ended, its verdicts and headline figures.

One record per game day, in ``<reports>/gamedays/<name>/<UTC timestamp>/gameday.json``, rewritten (atomically)
after every drill, so a game day that was killed still shows the drills it finished. The trend view reads the
records of earlier game days of the same name in the same reports folder (:func:`read_history`); a record it
cannot read is counted and named on the page, never skipped silently.

``gameday.json``::

    {"schema": "llm-drill/gameday/v1", "name", "title", "owner", "stamp", "started_at", "finished_at",
     "gameday_file", "overrides", "time_scale", "cooldown_s", "abort": {"on_revert_failure", "on_first_fail"},
     "status": "running" | "completed" | "aborted" | "interrupted", "exit_code", "stopped_by",
     "drills": [{"number", "label", "drill", "drill_file", "overrides", "time_scale", "result", "exit_code",
                 "started_at", "wall_s", "run_dir", "log", "problem",
                 "checks": [{"name", "kind", "status", "message", "figures": [{"name", "value", "unit"}]}]}]}

Paths (``run_dir``, ``log``) are relative to the game day's folder, so the folder can be moved or archived whole.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from drill.gameday.headline import HeadlineFigure, headline_figures
from drill.rundir.files import read_json

__all__ = [
    "GAMEDAY_SCHEMA",
    "CheckLine",
    "DrillOutcome",
    "DrillResult",
    "GameDayRecord",
    "GameDayStatus",
    "History",
    "read_history",
    "read_verdict_lines",
    "write_record",
]

GAMEDAY_SCHEMA = "llm-drill/gameday/v1"
RECORD_FILE = "gameday.json"


class DrillResult(str, enum.Enum):
    """How one drill of a game day ended, in one word."""

    PASS = "PASS"  # exit 0: every verdict PASS
    FAIL = "FAIL"  # exit 1 with at least one FAIL verdict
    INCONCLUSIVE = "INCONCLUSIVE"  # exit 1, no FAIL: INCONCLUSIVE or ERROR verdicts
    REVERT_FAILED = "REVERT FAILED"  # exit 4: the target may still be faulted
    ERROR = "ERROR"  # the drill could not run (exit 2 or 3, or no verdicts)
    INTERRUPTED = "INTERRUPTED"  # exit 130
    NOT_RUN = "NOT RUN"  # the game day stopped before it


class GameDayStatus(str, enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    ABORTED = "aborted"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class CheckLine:
    """One verdict, as the index and the trend view show it."""

    name: str
    kind: str
    status: str
    message: str
    figures: tuple[HeadlineFigure, ...] = ()

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "message": self.message,
            "figures": [f.to_json() for f in self.figures],
        }

    @classmethod
    def from_json(cls, data: dict) -> CheckLine:
        return cls(
            str(data["name"]),
            str(data.get("kind") or ""),
            str(data["status"]),
            str(data.get("message") or ""),
            tuple(HeadlineFigure.from_json(f) for f in data.get("figures") or ()),
        )


@dataclass(frozen=True)
class DrillOutcome:
    number: int
    label: str
    drill: str
    drill_file: str
    overrides: tuple[str, ...] = ()
    time_scale: float = 1.0
    result: DrillResult = DrillResult.NOT_RUN
    exit_code: int | None = None
    started_at: str | None = None
    wall_s: float | None = None
    run_dir: str | None = None
    log: str | None = None
    problem: str | None = None  # why there are no verdicts, or what could not be read
    checks: tuple[CheckLine, ...] = ()

    def to_json(self) -> dict:
        return {
            "number": self.number,
            "label": self.label,
            "drill": self.drill,
            "drill_file": self.drill_file,
            "overrides": list(self.overrides),
            "time_scale": self.time_scale,
            "result": self.result.value,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "wall_s": self.wall_s,
            "run_dir": self.run_dir,
            "log": self.log,
            "problem": self.problem,
            "checks": [c.to_json() for c in self.checks],
        }

    @classmethod
    def from_json(cls, data: dict) -> DrillOutcome:
        return cls(
            int(data["number"]),
            str(data["label"]),
            str(data["drill"]),
            str(data.get("drill_file") or ""),
            tuple(data.get("overrides") or ()),
            float(data.get("time_scale", 1.0)),
            DrillResult(data["result"]),
            data.get("exit_code"),
            data.get("started_at"),
            data.get("wall_s"),
            data.get("run_dir"),
            data.get("log"),
            data.get("problem"),
            tuple(CheckLine.from_json(c) for c in data.get("checks") or ()),
        )


@dataclass(frozen=True)
class GameDayRecord:
    name: str
    stamp: str  # the folder name: UTC timestamp, sortable
    started_at: str
    gameday_file: str
    title: str | None = None
    owner: str | None = None
    finished_at: str | None = None
    overrides: tuple[str, ...] = ()
    time_scale: float = 1.0
    cooldown_s: float = 0.0
    on_first_fail: bool = False
    status: GameDayStatus = GameDayStatus.RUNNING
    exit_code: int | None = None
    stopped_by: str | None = None
    drills: tuple[DrillOutcome, ...] = ()

    def with_drill(self, outcome: DrillOutcome) -> GameDayRecord:
        """The record with ``outcome`` in place of the drill of the same number."""
        drills = tuple(outcome if d.number == outcome.number else d for d in self.drills)
        return replace(self, drills=drills)

    def to_json(self) -> dict:
        return {
            "schema": GAMEDAY_SCHEMA,
            "name": self.name,
            "title": self.title,
            "owner": self.owner,
            "stamp": self.stamp,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "gameday_file": self.gameday_file,
            "overrides": list(self.overrides),
            "time_scale": self.time_scale,
            "cooldown_s": self.cooldown_s,
            "abort": {"on_revert_failure": True, "on_first_fail": self.on_first_fail},
            "status": self.status.value,
            "exit_code": self.exit_code,
            "stopped_by": self.stopped_by,
            "drills": [d.to_json() for d in self.drills],
        }

    @classmethod
    def from_json(cls, data: dict) -> GameDayRecord:
        if data.get("schema") != GAMEDAY_SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, not {GAMEDAY_SCHEMA!r}")
        abort = data.get("abort") or {}
        return cls(
            str(data["name"]),
            str(data["stamp"]),
            str(data["started_at"]),
            str(data.get("gameday_file") or ""),
            data.get("title"),
            data.get("owner"),
            data.get("finished_at"),
            tuple(data.get("overrides") or ()),
            float(data.get("time_scale", 1.0)),
            float(data.get("cooldown_s", 0.0)),
            bool(abort.get("on_first_fail", False)),
            GameDayStatus(data["status"]),
            data.get("exit_code"),
            data.get("stopped_by"),
            tuple(DrillOutcome.from_json(d) for d in data.get("drills") or ()),
        )


def write_record(folder: Path, record: GameDayRecord) -> Path:
    """Write ``gameday.json`` atomically (a reader never sees half a record)."""
    target = folder / RECORD_FILE
    partial = folder / f".{RECORD_FILE}.partial"
    with open(partial, "w", encoding="utf-8") as fh:
        json.dump(record.to_json(), fh, indent=2)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(partial, target)
    return target


def read_verdict_lines(run_dir: Path) -> tuple[tuple[CheckLine, ...], str | None]:
    """The verdicts of a finished run as check lines, and what went wrong reading them (None when nothing did)."""
    path = run_dir / "verdicts.json"
    try:
        document = read_json(path, root=run_dir)
        checks = document["checks"]
        lines = tuple(
            CheckLine(
                str(c["name"]),
                str(c.get("kind") or ""),
                str(c["status"]),
                str(c.get("message") or ""),
                headline_figures(str(c.get("kind") or ""), c.get("observed") or {}, c.get("units") or {}),
            )
            for c in checks
        )
    except FileNotFoundError:
        return (), "the run wrote no verdicts.json"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return (), f"verdicts.json could not be read: {type(exc).__name__}: {exc}"
    return lines, None


@dataclass(frozen=True)
class History:
    """The game days of one name in one reports folder, oldest first, and the records that could not be read."""

    records: tuple[GameDayRecord, ...]
    unreadable: tuple[str, ...] = field(default=())  # "path: why"


def read_history(gamedays_dir: Path, name: str) -> History:
    """Every ``<gamedays_dir>/<name>/*/gameday.json``, sorted by timestamp."""
    records: list[GameDayRecord] = []
    unreadable: list[str] = []
    for path in sorted((gamedays_dir / name).glob(f"*/{RECORD_FILE}")):
        try:
            record = GameDayRecord.from_json(read_json(path, root=gamedays_dir / name))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:  # UnsafeFileError is a ValueError
            unreadable.append(f"{path}: {type(exc).__name__}: {exc}")
            continue
        if record.name != name:
            unreadable.append(f"{path}: a record of game day {record.name!r}, not {name!r}")
            continue
        records.append(record)
    records.sort(key=lambda r: r.stamp)
    return History(tuple(records), tuple(unreadable))
