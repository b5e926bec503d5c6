"""How stable is the knee ``drill capacity`` finds? Run it N times against the embedded stack and compare.

    .venv/bin/python bench/capacity_knee.py [--runs 3] [--scenario scenarios/chat-azure-conv.yaml] [-- EXTRA ARGS]
    .venv/bin/python bench/capacity_knee.py --analyze reports/capacity/RUN_A reports/capacity/RUN_B ...

Each run is a plain ``drill capacity SCENARIO`` (default options: auto rates, the embedded target) in its own
run directory under ``reports/capacity/``. Prints each run's knee (the estimate the report leads with), its measured
bracket and the naive estimate, then the knees' spread (highest ÷ lowest; also of the bracket's low ends), the
median knee and the naive estimate's error against it, and exits 1 when the spread is over ``--max-spread`` (1.2:
every knee within ±10 % of their middle) or a run found no knee.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run_once(scenario: str, extra: list[str], index: int) -> dict:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "drill", "capacity", scenario, "--json", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"run {index}: drill capacity exited {done.returncode}")
    return _summary(json.loads(done.stdout), index, round(wall, 1))


def _summary(doc: dict, index: int, wall_s: float | None) -> dict:
    """One run's figures, the knee recomputed from its points with the planner (``drill.capacity.planner``)."""
    from drill.capacity.planner import Observation, knee_of

    full = doc["sweeps"][0]
    inf = float("inf")
    points = [
        Observation(p["rate"], p["repetition"], p["holds"], inf if p["ratio"] is None else p["ratio"])
        for p in full["points"]
    ]
    knee = knee_of(points, bracketed=full["knee"]["bracketed"], repetitions=doc["inputs"]["search"]["repetitions"])
    return {
        "run": index,
        "run_id": doc["run_id"],
        "estimate": knee.estimate,
        "knee": knee.knee,
        "upper": knee.upper,
        "points": len(points),
        "naive": (doc.get("naive") or {}).get("rate"),
        "wall_s": wall_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scenario", default="scenarios/chat-azure-conv.yaml")
    parser.add_argument("--max-spread", type=float, default=1.2)
    parser.add_argument("extra", nargs="*", help="more drill capacity options (after --)")
    parser.add_argument("--analyze", nargs="+", type=Path, help="only analyze these capacity run directories")
    args = parser.parse_args(argv)
    results = []
    runs = args.analyze or range(1, args.runs + 1)
    for i, run in enumerate(runs, 1):
        if isinstance(run, Path):
            result = _summary(json.loads((run / "capacity.json").read_text()), i, None)
        else:
            result = _run_once(args.scenario, args.extra, i)
        results.append(result)
        print(
            f"run {i}: knee {_fmt(result['estimate'])}/s (measured: {_fmt(result['knee'])}/s held, "
            f"{_fmt(result['upper'])}/s failed), naive {_fmt(result['naive'])}/s, {result['points']} points, "
            f"{_fmt(result['wall_s'])}s  [{result['run_id']}]",
            flush=True,
        )
    knees = [r["estimate"] for r in results if r["estimate"] is not None]
    if len(knees) < len(results):
        print("a run found no knee: no spread")
        return 1
    spread = max(knees) / min(knees)
    measured = [r["knee"] for r in results]
    median = statistics.median(knees)
    naive = statistics.median(r["naive"] for r in results if r["naive"] is not None)
    print(f"knees: {', '.join(_fmt(k) for k in knees)} requests/s")
    print(f"spread (highest / lowest): {spread:.3f} (±{(spread - 1) / (spread + 1):.1%} around the middle)")
    print(f"measured bracket lows: {', '.join(_fmt(k) for k in measured)} (spread {max(measured) / min(measured):.3f})")
    print(f"median knee: {_fmt(median)}/s")
    print(f"naive estimate: {_fmt(naive)}/s, error {naive / median - 1:+.0%} (naive ÷ knee = {naive / median:.3f})")
    return 0 if spread <= args.max_spread else 1


def _estimate(knee: dict) -> float | None:
    """The knee estimate of a capacity.json written before it carried one: the mean crossing inside the bracket."""
    if knee["knee"] is None or knee["upper"] is None or knee["mean"] is None:
        return knee["knee"]
    return min(max(knee["mean"], knee["knee"]), knee["upper"])


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


if __name__ == "__main__":
    raise SystemExit(main())
