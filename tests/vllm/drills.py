"""Running a drill (``drill run``, ``drill compare``) from the CLI, as a user would, and reading what it left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DrillRun:
    """One finished run: its directory, the CLI's exit code and output, and its verdicts by check name."""

    run_dir: Path
    returncode: int
    output: str
    wall_s: float

    @property
    def verdicts(self) -> dict[str, dict]:
        return {v["name"]: v for v in json.loads((self.run_dir / "verdicts.json").read_text())["checks"]}

    def status(self, name: str) -> str:
        return self.verdicts[name]["status"]

    def statuses(self) -> dict[str, str]:
        return {name: v["status"] for name, v in self.verdicts.items()}

    def requests(self) -> list[dict]:
        lines = (self.run_dir / "requests.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]


def _cli(args: list[str], folder: Path, timeout_s: float) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "DRILL_STATE_DIR": str(folder / "state")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "drill", *args, "--out", str(folder / "out"), "--no-progress"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return done, time.monotonic() - started


def write_drill(drill: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{drill['name']}.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False), encoding="utf-8")
    return path


def run_drill(drill: dict, folder: Path, timeout_s: float = 300) -> DrillRun:
    """``drill run`` of ``drill`` in ``folder``; AssertionError with the output when it left no run directory."""
    done, took = _cli(["run", str(write_drill(drill, folder))], folder, timeout_s)
    runs = sorted((folder / "out" / drill["name"]).glob("*/verdicts.json"))
    assert len(runs) == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return DrillRun(runs[0].parent, done.returncode, done.stdout + done.stderr, took)


def compare_drill(drill: dict, change: str, folder: Path, timeout_s: float = 600) -> tuple[DrillRun, DrillRun, Path]:
    """``drill compare DRILL --set CHANGE``: the baseline's and the candidate's runs, and the comparison folder."""
    done, took = _cli(["compare", str(write_drill(drill, folder)), "--set", change], folder, timeout_s)
    found = sorted((folder / "out" / "comparisons" / drill["name"]).glob("*"))
    assert len(found) == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    output = done.stdout + done.stderr
    sides = []
    for side in ("baseline", "candidate"):
        verdicts = sorted((found[0] / side).glob("*/*/verdicts.json"))  # <side>/<drill>/<run id>/
        assert len(verdicts) == 1, f"no {side} verdicts: exit {done.returncode}\n{output}"
        sides.append(DrillRun(verdicts[0].parent, done.returncode, output, took))
    return sides[0], sides[1], found[0]
