"""``drill plan DRILL``: the resolved timeline and everything the drill would touch. Starts nothing."""

from __future__ import annotations

import click

from drill import registry
from drill.api import Fault, FaultContext, TargetContext, TargetInfo
from drill.cli.common import echo, handle_errors
from drill.rundir.redact import Redactor, secret_values
from drill.runner.fault_schedule import resolve_targets
from drill.runner.safety import check_hosts
from drill.runner.timeline import Timeline, plan_timeline
from drill.spec.loader import LoadedDrill, load_drill
from drill.spec.models import FaultSpec
from drill.units import format_duration as fmt


@click.command("plan")
@click.argument("drill_file")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a field by its key path.")
@click.option("--time-scale", type=float, default=1.0, show_default=True, help="Multiply every timeline duration.")
@click.option("--allow-host", "allow_hosts", multiple=True, help="Allow a non-loopback host.")
def plan(drill_file: str, overrides: tuple[str, ...], time_scale: float, allow_hosts: tuple[str, ...]) -> None:
    """Print the resolved timeline, target and faults of a drill (a dry run)."""
    with handle_errors():
        loaded = load_drill(drill_file, overrides=overrides, time_scale=time_scale, allow_missing=True)
        if loaded.target_params is not None:
            check_hosts(loaded, allow_hosts)
        redactor = Redactor(secrets=secret_values(loaded.target_params.model_dump() if loaded.target_params else {}))
        for line in render_plan(loaded):
            echo(redactor.value(line))  # as resolved.json and the report are: credentials never printed


def render_plan(loaded: LoadedDrill) -> list[str]:
    drill = loaded.drill
    lines = [f"drill {drill.name}" + (f" — {drill.title}" if drill.title else "")]
    if loaded.time_scale != 1.0:
        lines.append(f"(--time-scale {loaded.time_scale:g} applied to every timeline duration)")
    if drill.sweep is not None:
        lines += _sweep(loaded)
    info: TargetInfo | None = None
    lines.append(f"target: {drill.target.kind}")
    if loaded.target_params is not None:
        target = registry.targets.get(drill.target.kind)(loaded.target_params, TargetContext("plan", "-"))
        lines += [f"  {line}" for line in target.describe_plan()]
        info = target.planned_info()
    else:
        lines.append("  (not built yet)")
    lines += _timeline(loaded, info)
    lines += _load(loaded)
    lines += [f"stop condition: {c.label()}" for c in drill.stop_conditions]
    lines += [f"check: {c.name or c.kind} ({c.kind})" for c in drill.checks]
    if drill.runbook:
        lines.append(f"runbook: {loaded.runbook_path}")
    if loaded.missing:
        lines.append("cannot run yet — these parts are not built:")
        lines += [f"  {d.render()}" for d in loaded.missing]
    lines.append("nothing was started (dry run).")
    return lines


def _sweep(loaded: LoadedDrill) -> list[str]:
    """A sweep's variants, each with its one change and any fault it runs without; the plan below is the file's."""
    from drill.sweeps.resolve import resolve_sweep

    plan = resolve_sweep(loaded)
    lines = [
        f"sweep: {plan.sweep.variable} — one run per value, the same seed and request set; below: the drill as written"
    ]
    for variant in plan.variants:
        lines.append(f"  variant {variant.label}: --set {variant.assignment}")
        lines += [f"    runs without {line}" for line in variant.skipped_faults]
    return lines


def _timeline(loaded: LoadedDrill, info: TargetInfo | None) -> list[str]:
    timeline = plan_timeline(loaded)
    drill = loaded.drill
    lines = ["timeline (offsets from the start of load):"]
    for slot in timeline.phases:
        if slot.length_s is None:
            what = (
                "until the first good response (timeout " + fmt(drill.phases.cold_start.timeout) + ")"
                if slot.phase.value == "cold_start"
                else f"after recovery: resend up to {drill.phases.replay.max_samples} failing requests"
            )
            lines.append(f"  {slot.phase.value:<11} {what}")
            continue
        lines.append(f"  {slot.phase.value:<11} {fmt(slot.start_s)} – {fmt(slot.start_s + slot.length_s)}")
        if slot.phase.value == "fault":
            lines += _faults(loaded, timeline, info)
    return lines


def _faults(loaded: LoadedDrill, timeline: Timeline, info: TargetInfo | None) -> list[str]:
    lines: list[str] = []
    base = timeline.fault_phase_start_s
    for window, spec, params in zip(timeline.faults, loaded.drill.faults, loaded.fault_params):
        when = f"{fmt(base + window.start_s)} – {fmt(base + window.end_s)}"
        if params is None:
            lines.append(f"    fault {window.fault_id} ({spec.kind}, not built yet): {when}")
            lines += [f"      {key} = {value}" for key, value in spec.params.items()]
            continue
        fault = registry.faults.get(spec.kind)(params)
        lines.append(
            f"    fault {window.fault_id} ({spec.kind}, {fault.realism_for(params).value}): "
            f"{fmt(base + window.start_s)} – {fmt(base + window.end_s)}"
        )
        for key, value in params.model_dump(mode="json").items():
            lines.append(f"      {key} = {value}")
        lines += [f"      touches {t}" for t in _touches(fault, spec, info, loaded.drill.seed)]
    return lines


def _touches(fault: Fault, spec: FaultSpec, info: TargetInfo | None, seed: int) -> list[str]:
    if info is None:
        return ["(resolved against the target once it is started)"]
    try:
        targets = resolve_targets(fault, spec.selector, info, seed)
    except ValueError as exc:
        return [f"(selector problem: {exc})"]
    return fault.describe_targets(FaultContext("plan", info, targets))


def _load(loaded: LoadedDrill) -> list[str]:
    scenario = loaded.scenario
    name = scenario.name or (loaded.scenario_path.name if loaded.scenario_path else "inline")
    lines = [f"load: scenario {name}, seed {scenario.seed}, at most {scenario.max_in_flight} requests in flight"]
    for pool in scenario.pools:
        arrival = pool.arrival or scenario.arrival
        assert arrival is not None  # Scenario's validator: a pool has its own arrival process or the shared one
        share = f"{pool.share:.0%} of " if pool.share is not None and pool.arrival is None else ""
        rate = f"{arrival.rate:g} req/s" if arrival.rate is not None else arrival.process.value
        slo = ", ".join(f"{k} {fmt(v)}" for k, v in (pool.slo or loaded.drill.slo).items()) or "none"
        lines.append(
            f"  pool {pool.name}: {share}{arrival.process.value} {rate}, priority {pool.priority}, "
            f"{pool.endpoint.value}{' stream' if pool.stream else ''}, SLO {slo}"
        )
    return lines
