"""Benchmark: do the catalogue drills' predictions hold at their default scale and at the tests' short scale?

For each drill of ``drills/`` (or the ones named) and each scale asked for, it runs ``drill run`` in a
subprocess — ``default``: the drill as written, ``--time-scale 1``; ``short``: the time scale and ``--set``
overrides the end-to-end tests run it with (``tests/e2e``, ``tests/compare``) — reads the run's
``verdicts.json`` and prints, verdict by verdict, the status against the drill's ``predicts:``. A verdict the
drill does not predict, or a predicted one the run did not give, is a disagreement too. Exit 0 when every run
agreed, 1 otherwise.

    .venv/bin/python bench/catalogue_scales.py [DRILL ...] [--scales default,short] [--out DIR] [--json FILE]

Runs one after the other (the flagship's flood fills a core by itself). Run it alone on a shared
machine and note the load average the table was measured at: a loaded machine slows the reference stack's
simulated serving, and a verdict with a thin latency margin can move. The measured table is in
docs/drill-files.md ("Predictions at every scale").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.compare.compare_run import QUEUE_CI, QUEUE_TIME_SCALE  # noqa: E402
from tests.e2e.conftest import PlannedRun  # noqa: E402

#: The tests' short scale: (time scale, --set overrides). The flagship as ``tests/compare`` runs it (its flood
#: must outlast admission control's fill); every other drill as ``tests/e2e``'s planned runs do.
SHORT: dict[str, tuple[float, tuple[str, ...]]] = {"unbounded-queue": (QUEUE_TIME_SCALE, QUEUE_CI)}
SHORT_DEFAULT = (PlannedRun("drills/x.yaml").time_scale, ())
#: Sweep drills are run by their own test (tests/sweeps), not one ``drill run``.
SWEEPS = {"tp-scaling"}


@dataclass
class Outcome:
    drill: str
    scale: str
    time_scale: float
    sets: tuple[str, ...]
    exit_code: int
    wall_s: float
    run_dir: str
    verdicts: dict[str, str] = field(default_factory=dict)
    wrong: dict[str, str] = field(default_factory=dict)  # check -> "GOT (predicted P)"

    @property
    def agrees(self) -> bool:
        return self.exit_code in (0, 1) and not self.wrong


def predicted(drill: str) -> dict[str, str]:
    document = yaml.safe_load((REPO / "drills" / f"{drill}.yaml").read_text())
    return {name: str(status) for name, status in (document.get("predicts") or {}).items()}


def scale_of(drill: str, scale: str) -> tuple[float, tuple[str, ...]]:
    if scale == "default":
        return 1.0, ()
    return SHORT.get(drill, SHORT_DEFAULT)


def run_one(drill: str, scale: str, out: Path) -> Outcome:
    time_scale, sets = scale_of(drill, scale)
    base = out / f"{drill}-{scale}"
    argv = [sys.executable, "-m", "drill", "run", str(REPO / "drills" / f"{drill}.yaml")]
    argv += ["--time-scale", str(time_scale), "--out", str(base), "--no-progress", "--set", "otlp.port=0"]
    for assignment in sets:
        argv += ["--set", assignment]
    started = time.monotonic()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    found = sorted(p.parent for p in base.glob("*/*/verdicts.json"))
    outcome = Outcome(drill, scale, time_scale, sets, result.returncode, wall, str(found[-1]) if found else "")
    if not found:
        outcome.wrong["(run)"] = f"no verdicts (exit {result.returncode}): {result.stderr[-300:]}"
        return outcome
    checks = json.loads((found[-1] / "verdicts.json").read_text())["checks"]
    outcome.verdicts = {check["name"]: check["status"] for check in checks}
    predicts = predicted(drill)
    for name in sorted(set(predicts) | set(outcome.verdicts)):
        got, want = outcome.verdicts.get(name, "missing"), predicts.get(name, "unpredicted")
        if got != want:
            outcome.wrong[name] = f"{got} (predicted {want})"
    return outcome


def _load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drills", nargs="*", help="drill names (default: every catalogue drill but the sweeps)")
    parser.add_argument("--scales", default="default,short", help="comma-separated: default, short")
    parser.add_argument("--out", type=Path, help="base directory for the run directories (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the outcomes as JSON here")
    args = parser.parse_args(argv)
    names = args.drills or sorted(p.stem for p in (REPO / "drills").glob("*.yaml") if p.stem not in SWEEPS)
    scales = [s for s in args.scales.split(",") if s]
    if unknown := set(scales) - {"default", "short"}:
        parser.error(f"unknown scale(s) {sorted(unknown)}: expected default, short")
    out = args.out or Path(tempfile.mkdtemp(prefix="catalogue-scales-"))
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {_load_average()}")
    print("| drill | scale | time scale | verdicts as predicted | disagreements | exit | wall |")
    print("|---|---|---|---|---|---|---|")
    outcomes = []
    for drill in names:
        for scale in scales:
            outcome = run_one(drill, scale, out)
            outcomes.append(outcome)
            agreed = sum(1 for name in outcome.verdicts if name not in outcome.wrong)
            wrong = "; ".join(f"{k}: {v}" for k, v in outcome.wrong.items()) or "none"
            print(
                f"| {drill} | {scale} | {outcome.time_scale:g} | {agreed}/{len(outcome.verdicts)} | {wrong} "
                f"| {outcome.exit_code} | {outcome.wall_s / 60:.1f} min |",
                flush=True,
            )
    print(f"# done, load average {_load_average()}; run directories under {out}")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=2))
    return 0 if all(o.agrees for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
