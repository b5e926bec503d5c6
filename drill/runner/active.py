"""The registry of runs in progress, so ``drill cleanup`` can find runs that died.

Each run (and each manual ``drill fault inject``) writes
``<state dir>/runs/<run id>.json`` with its run directory and the runner's PID
and process start time, and removes it when it ends cleanly. The state
directory is ``$DRILL_STATE_DIR``, or ``~/.local/state/llm-drill``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from drill.rundir.journal import process_start_time

__all__ = ["ActiveRun", "list_active", "process_alive", "register", "state_dir", "unregister"]


def state_dir() -> Path:
    env = os.environ.get("DRILL_STATE_DIR")
    base = Path(env) if env else Path.home() / ".local" / "state" / "llm-drill"
    return base


@dataclass(frozen=True)
class ActiveRun:
    run_id: str
    run_dir: Path
    pid: int
    pid_start: int | None

    @property
    def alive(self) -> bool:
        return process_alive(self.pid, self.pid_start)


def process_alive(pid: int, start: int | None = None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if _is_zombie(pid):
        return False
    return start is None or process_start_time(pid) in (None, start)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def register(run_id: str, run_dir: Path, pid: int | None = None) -> Path:
    pid = pid or os.getpid()
    runs = state_dir() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"{run_id}.json"
    path.write_text(
        json.dumps(
            {"run_id": run_id, "run_dir": str(run_dir.resolve()), "pid": pid, "pid_start": process_start_time(pid)}
        )
    )
    return path


def unregister(run_id: str) -> None:
    (state_dir() / "runs" / f"{run_id}.json").unlink(missing_ok=True)


def list_active() -> list[ActiveRun]:
    runs = state_dir() / "runs"
    found = []
    for path in sorted(runs.glob("*.json")) if runs.is_dir() else []:
        try:
            raw = json.loads(path.read_text())
            found.append(ActiveRun(raw["run_id"], Path(raw["run_dir"]), int(raw["pid"]), raw.get("pid_start")))
        except (OSError, ValueError, KeyError):
            continue
    return found
