"""``drill capacity SCENARIO [--target embedded|URL|DRILL] [--rates auto|LIST] [--headroom n-1|P%]``.

Sweeps the scenario's arrival rate open loop against the target and prints the knee: the highest rate at which
every pool's SLO holds, with the binding constraint, the naive single-request estimate and its error, the
headroom and the cost per successful request (``docs/capacity.md``). Every input is checked before anything
starts. Exit codes: 0 the knee was found, 1 the sweep could not bracket it (the report says why), 2 bad input
(nothing started), 3 the target or the load driver failed, 130 interrupted (what was measured is written).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from drill.cli.common import (
    allow_host_option,
    console,
    handle_errors,
    is_file,
    load_scenario_argument,
    parse_duration_option,
)
from drill.errors import InputError

if TYPE_CHECKING:
    from drill.capacity.planner import SearchConfig
    from drill.capacity.point import PointTiming
    from drill.capacity.sweep import TargetChoice
    from drill.spec.scenario import Scenario
    from drill.stack.config import StackConfig

__all__ = ["capacity", "embedded_capacity_stack"]

#: What ``--target embedded`` starts: the reference stack's defaults on A100s, sized so the knee of the bundled
#: chat scenario (about 10 requests/s) stays well inside what the load generator sends on time on a small machine.
EMBEDDED_CAPACITY_STACK = {"model": "llama-3-8b", "gpu": "a100-80g", "replicas": 2}


def embedded_capacity_stack() -> StackConfig:
    from drill.stack.config import parse_stack_config

    return parse_stack_config(EMBEDDED_CAPACITY_STACK, source="--target embedded")


@click.command("capacity")
@click.argument("scenario_file")
@click.option(
    "--target",
    default="embedded",
    show_default=True,
    help="'embedded' (the reference stack: llama-3-8b on 2 × a100-80g), an OpenAI-compatible base URL, or a drill "
    "file whose target block to use.",
)
@click.option("--rates", default="auto", show_default=True, help="'auto' (search), or a list of rates, e.g. 2,4,8.")
@click.option("--start", "start_rate", type=float, help="Where the auto search starts (default: the scenario's rate).")
@click.option(
    "--headroom",
    "headroom",
    multiple=True,
    help="'n-1' (also measure the knee with one replica down; embedded only) and/or a fraction such as 30% "
    "(the safe rate below the knee). Repeatable.",
)
@click.option("--gpu-hour-price", type=float, help="Price of one GPU-hour: prints the cost per successful request.")
@click.option("--gpus", type=int, help="GPUs behind a URL target (the embedded stack counts replicas × TP × PP).")
@click.option(
    "--warmup", callback=parse_duration_option, default="4s", show_default=True, help="Per point, not judged."
)
@click.option("--measure", callback=parse_duration_option, default="14s", show_default=True, help="Judged per point.")
@click.option("--tail", callback=parse_duration_option, default="2s", show_default=True, help="Arrivals after it.")
@click.option("--drain", callback=parse_duration_option, default="5s", show_default=True, help="Then in-flight time.")
@click.option("--repetitions", type=int, default=2, show_default=True, help="Seeds per rate near the knee.")
@click.option("--tolerance", default="10%", show_default=True, help="Bisect until failing/holding rate <= 1 + this.")
@click.option("--max-points", type=int, default=14, show_default=True, help="At most this many points per sweep.")
@click.option(
    "--attainment",
    default="percentile",
    show_default=True,
    help="'percentile' (each SLO's percentile over the point) or 'goodput:S' (a share S of requests within SLO).",
)
@click.option("--seed", type=int, help="Seed of the request set (default: the scenario's; repetition k adds k).")
@click.option("--no-naive", is_flag=True, help="Skip the naive single-request estimate.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"))
@click.option("--json", "as_json", is_flag=True, help="Print capacity.json at the end instead of the summary.")
@allow_host_option()
def capacity(
    scenario_file: str,
    target: str,
    rates: str,
    start_rate: float | None,
    headroom: tuple[str, ...],
    gpu_hour_price: float | None,
    gpus: int | None,
    warmup: float,
    measure: float,
    tail: float,
    drain: float,
    repetitions: int,
    tolerance: str,
    max_points: int,
    attainment: str,
    seed: int | None,
    no_naive: bool,
    out_dir: Path,
    as_json: bool,
    allow_hosts: tuple[str, ...],
) -> None:
    """Find the highest arrival rate at which every pool of SCENARIO meets its SLO against --target."""
    from drill.capacity.attainment import AttainmentRule
    from drill.capacity.point import PointTiming
    from drill.capacity.sweep import CapacityOptions, CapacityRun

    with handle_errors():
        scenario, path = _scenario(scenario_file)
        choice = _target(target, allow_hosts, gpus)
        n_minus_1, fraction = _headroom(headroom, choice)
        timing = PointTiming(warmup_s=warmup, measure_s=measure, tail_s=tail, drain_s=drain)
        _check_numbers(repetitions, max_points, gpu_hour_price, measure)
        search = _search(
            scenario, rates, start_rate, repetitions, _fraction(tolerance, "--tolerance"), max_points, timing
        )
        options = CapacityOptions(
            scenario=scenario,
            scenario_path=str(path),
            target=choice,
            search=search,
            timing=timing,
            rule=AttainmentRule.parse(attainment),
            seed=scenario.seed if seed is None else seed,
            headroom_n_minus_1=n_minus_1,
            headroom_fraction=fraction,
            gpu_hour_price=gpu_hour_price,
            naive=not no_naive,
            out_dir=out_dir,
            argv=tuple(sys.argv),
        )
        result = CapacityRun(
            options, echo=lambda line: None if as_json else console.print(line, highlight=False, markup=False)
        ).run()
    doc = json.loads((result.run_dir / "capacity.json").read_text(encoding="utf-8"))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        _print_summary(doc)
    full = result.sweep("full")
    sys.exit(130 if result.interrupted else (0 if full is not None and full.knee.knee is not None else 1))


# --- inputs ---------------------------------------------------------------------------------------------


def _scenario(name: str) -> tuple[Scenario, Path]:
    scenario, path = load_scenario_argument(name)
    if not any(p.slo for p in scenario.pools):
        raise InputError(
            f"{path}: no pool has an SLO, so no rate can be judged",
            hint="give a pool an 'slo:' (e.g. ttft_p95: 2s, tpot_p95: 100ms)",
        )
    return scenario, path


def _target(text: str, allow_hosts: tuple[str, ...], gpus: int | None) -> TargetChoice:
    from drill.capacity.sweep import TargetChoice

    if text == "embedded":
        stack = embedded_capacity_stack()
        return TargetChoice("embedded", stack, "embedded stack (llama-3-8b, a100-80g)", stack.gpus)
    if text.startswith(("http://", "https://")):
        from drill.cli.load import check_target
        from drill.targets.openai import OpenAITargetParams

        check_target(text, allow_hosts)
        return TargetChoice("openai", OpenAITargetParams(url=text.rstrip("/")), text, gpus)
    if not is_file(Path(text)):
        raise InputError(
            f"--target: {text!r} is not 'embedded', an http(s) URL or a drill file",
            hint="e.g. --target embedded, --target http://127.0.0.1:8000 or --target drills/replica-crash.yaml",
        )
    return _drill_target(Path(text), allow_hosts, gpus)


def _drill_target(path: Path, allow_hosts: tuple[str, ...], gpus: int | None) -> TargetChoice:
    from drill.capacity.sweep import TargetChoice
    from drill.runner.safety import check_hosts
    from drill.spec.loader import load_drill
    from drill.stack.config import StackConfig

    loaded = load_drill(path)
    kind = loaded.drill.target.kind
    check_hosts(loaded, list(allow_hosts))
    params = loaded.target_params
    if params is None:
        raise InputError(f"--target {path}: the drill's target has no params")
    if isinstance(params, StackConfig):
        gpus = params.gpus
    return TargetChoice(kind, params, f"{kind} target of {path}", gpus)


def _headroom(values: tuple[str, ...], choice: TargetChoice) -> tuple[bool, float | None]:
    n_minus_1, fraction = False, None
    for value in values:
        if value.strip().lower() == "n-1":
            if choice.kind != "embedded":
                raise InputError(
                    "--headroom n-1 starts the stack with one replica fewer: it needs the embedded target",
                    hint=f"the target is {choice.kind!r}; give --headroom a fraction such as 30% instead",
                )
            if choice.replicas < 2:
                raise InputError(f"--headroom n-1 needs at least 2 replicas; the target has {choice.replicas}")
            n_minus_1 = True
        else:
            fraction = _fraction(value, "--headroom")
    return n_minus_1, fraction


def _fraction(text: str, option: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise InputError(
            f"{option}: expected 'n-1' or a share between 0 and 1 such as 30% or 0.3, got {text!r}"
            if option == "--headroom"
            else f"{option}: expected a share such as 10% or 0.1, got {text!r}"
        )
    return value


def _check_numbers(repetitions: int, max_points: int, price: float | None, measure: float) -> None:
    if repetitions < 1:
        raise InputError(f"--repetitions must be at least 1, got {repetitions}")
    if max_points < 2:
        raise InputError(f"--max-points must be at least 2, got {max_points}")
    if price is not None and price <= 0:
        raise InputError(f"--gpu-hour-price must be positive, got {price:g}")
    if measure <= 0:
        raise InputError("--measure must be positive")


def parse_rates(text: str) -> tuple[float, ...]:
    """``auto`` -> (); ``2,4,8`` -> (2.0, 4.0, 8.0); raises InputError naming the bad item."""
    if text.strip().lower() == "auto":
        return ()
    items = [item.strip() for item in text.split(",")]
    out = []
    for i, item in enumerate(items, 1):
        try:
            value = float(item)
        except ValueError:
            value = -1.0
        if not value > 0 or value != value or value == float("inf"):
            raise InputError(
                f"--rates: item {i} of {text!r} ({item!r}) is not a positive number",
                hint="give 'auto' or requests/s separated by commas, e.g. --rates 2,4,8",
            )
        out.append(value)
    return tuple(sorted(set(out)))


def _search(
    scenario: Scenario,
    rates: str,
    start: float | None,
    repetitions: int,
    tolerance: float,
    max_points: int,
    timing: PointTiming,
) -> SearchConfig:
    from drill.capacity.planner import SearchConfig
    from drill.load.schedule import nominal_rate, with_total_rate
    from drill.spec.scenario import MAX_PLANNED_ARRIVALS, planned_load_problem

    listed = parse_rates(rates)
    base = start if start is not None else nominal_rate(scenario, timing.arrivals_s)
    if not base > 0:
        raise InputError(f"--start must be positive, got {base:g}")
    ceiling = min(base * 64, 0.5 * MAX_PLANNED_ARRIVALS / timing.arrivals_s)
    for rate in listed or (base,):
        problem = planned_load_problem(with_total_rate(scenario, rate, timing.arrivals_s), timing.arrivals_s)
        if problem:
            raise InputError(f"--rates: {rate:g}/s: {problem}")
    return SearchConfig(
        start=base,
        rates=listed,
        repetitions=repetitions,
        tolerance=tolerance,
        max_points=max_points,
        min_rate=base / 64,
        max_rate=ceiling,
    )


# --- output ---------------------------------------------------------------------------------------------


def _print_summary(doc: dict) -> None:
    from drill.capacity.reporting import capacity_view

    view = capacity_view(doc)
    console.print("")
    console.print(view["title"], highlight=False, markup=False)
    for label, text in view["headline"]:
        console.print(f"  {label}: {text}", highlight=False, markup=False, soft_wrap=True)
