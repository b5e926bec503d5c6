"""Load a drill file: every problem in it reported in one pass, nothing started.

``load_drill(path)`` reads the YAML (keeping positions), applies ``--set``
overrides, validates the envelope (:class:`~drill.spec.models.Drill`), loads
the scenario (inline or from ``scenarios/``), then validates each plugin's
``Params`` — the target's ``config``, every fault's and check's ``params`` —
and finally the cross-field rules (faults inside the fault phase, selectors
that name existing pools, the runbook file exists, target capabilities cover
each fault's needs). All problems are raised together as one
:class:`~drill.errors.SpecError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from drill import registry
from drill.catalogue import packaged_path
from drill.errors import DrillError, SpecError, UnknownPluginError, did_you_mean
from drill.rundir.files import MAX_INPUT_BYTES, UnsafeFileError, read_bytes
from drill.spec.azure_trace import read_trace
from drill.spec.diagnostics import Diagnostic, KeyPath, Position, format_path
from drill.spec.models import Drill
from drill.spec.overrides import parse_override
from drill.spec.scenario import Arrival, ArrivalProcess, Scenario, planned_load_problem
from drill.spec.timescale import scale_timeline
from drill.spec.validation import unset_env_refs, validate_model
from drill.spec.yamlio import Locations, load_located
from drill.units import MAX_DURATION_S

__all__ = [
    "LoadedDrill",
    "load_drill",
    "load_model_file",
    "load_scenario",
    "read_input_file",
    "resolve_drill_path",
    "fault_key_positions",
]

M = TypeVar("M", bound=BaseModel)

MAX_FILE_BYTES = MAX_INPUT_BYTES


@dataclass(frozen=True)
class LoadedDrill:
    """A validated drill with its plugins' validated params, ready to plan or run."""

    path: Path
    text: str
    drill: Drill
    scenario: Scenario
    scenario_path: Path | None
    target_params: BaseModel | None
    fault_params: tuple[BaseModel, ...]
    check_params: tuple[BaseModel, ...]
    overrides: tuple[str, ...] = ()
    time_scale: float = 1.0
    runbook_path: Path | None = None
    #: Parts the drill names that are planned but not built yet (only with ``allow_missing=True``).
    missing: tuple[Diagnostic, ...] = ()
    #: Faults left out because the target as configured cannot take them, each with why (only with
    #: ``skip_unsupported_faults=True``, as a sweep's variant asks: at TP=1 there is no TP link to degrade).
    skipped_faults: tuple[str, ...] = ()


@dataclass
class _Collector:
    locations: Locations
    diagnostics: list[Diagnostic] = field(default_factory=list)
    missing: list[Diagnostic] = field(default_factory=list)

    def add(self, path: KeyPath, message: str, hint: str | None = None, *, key: bool = False) -> None:
        self.diagnostics.append(Diagnostic(self.locations.position_of(path, key=key), path, message, hint=hint))

    def extend(self, items: list[Diagnostic]) -> None:
        """Add problems, except at a key whose value the YAML reader already refused (one problem per value)."""
        refused = {d.path for d in self.diagnostics if d.path}
        self.diagnostics.extend(d for d in items if d.path not in refused)


#: Most problems listed for one file; the rest are counted (a generated file can have thousands).
MAX_SHOWN = 100


def _spec_error(diagnostics: list[Diagnostic]) -> SpecError:
    ordered = sorted(diagnostics, key=Diagnostic.sort_key)
    if len(ordered) <= MAX_SHOWN:
        return SpecError(ordered)
    rest = len(ordered) - MAX_SHOWN
    shown = ordered[:MAX_SHOWN]
    shown.append(
        Diagnostic(
            ordered[MAX_SHOWN].position,
            (),
            f"... and {rest} more problem{'s' if rest != 1 else ''} after this position, not listed",
            hint="fix the ones above and validate again",
        )
    )
    return SpecError(shown, f"{len(ordered)} errors; nothing was run.")


def fault_key_positions(loaded: LoadedDrill, *key: str) -> tuple[str, ...]:
    """Where each fault's ``key`` (e.g. ``params``, ``method``) is written in the drill file (``file:line:col``, the
    nearest enclosing entry when the key is not written there): for an error found at run time, located."""
    locations = load_located(loaded.text, str(loaded.path)).locations
    return tuple(str(locations.position_of(("faults", i, *key))) for i in range(len(loaded.drill.faults)))


def resolve_drill_path(name: str | Path, drills_dir: Path = Path("drills")) -> Path:
    """``unbounded-queue`` or ``unbounded-queue.yaml`` also resolve inside ``drills/``; a relative path found
    neither as given nor there is looked up in the packaged catalogue (:mod:`drill.catalogue`)."""
    path = Path(name)
    if _exists(path):
        return path
    if len(path.parts) == 1:
        for candidate in (drills_dir / path, drills_dir / f"{path}.yaml", drills_dir / f"{path}.yml"):
            if _exists(candidate):
                return candidate

    return packaged_path(path) or path


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long, or with a NUL: reading it reports why
        return False


def read_input_file(path: Path, *, what: str = "drill") -> str:
    """The text of an input file (a regular file of at most MAX_FILE_BYTES of UTF-8), or SpecError located at
    the file itself; read through :func:`drill.rundir.files.read_bytes` (never blocks on a FIFO or a device,
    checks the size before reading)."""
    where = Position(str(path), 1, 1)
    try:
        data = read_bytes(path, limit=MAX_FILE_BYTES, what=what)
    except FileNotFoundError:
        hint = (
            (
                "a bare name is looked up in drills/, then in the packaged catalogue (e.g. 'drill run "
                "unbounded-queue'; 'drill drills list' shows them)"
            )
            if what == "drill"
            else None
        )
        raise SpecError([Diagnostic(where, (), "file not found", hint=hint)]) from None
    except UnsafeFileError as exc:
        raise SpecError([Diagnostic(where, (), exc.reason, hint=exc.hint)]) from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SpecError([Diagnostic(where, (), f"cannot read file: {reason}")]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            [Diagnostic(where, (), f"not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r})")]
        ) from None


def load_model_file(path: str | Path, model: type[M], *, what: str) -> M:
    """Read one YAML file (a stack config, a params file) as ``model``, the way drill files are read.

    Bounded YAML reading, ``file:line:col`` for every problem, did-you-mean for unknown keys; an empty
    file is the model's defaults. Raises :class:`SpecError` listing every problem.
    """
    path = Path(path)
    doc = load_located(read_input_file(path, what=what), str(path))
    out = _Collector(doc.locations, list(doc.diagnostics))
    data = {} if doc.data is None else doc.data
    instance = None
    if not isinstance(data, dict):
        out.add((), f"expected a mapping of {what} keys at the top level, got {type(data).__name__}")
    elif not (out.diagnostics and doc.data is None):  # nothing to validate when the YAML itself was unreadable
        instance, problems = validate_model(model, data, doc.locations)
        out.extend(problems)
    if out.diagnostics or instance is None:
        raise _spec_error(out.diagnostics)
    return instance


def load_drill(
    path: str | Path,
    *,
    overrides: list[str] | tuple[str, ...] = (),
    time_scale: float = 1.0,
    allow_missing: bool = False,
    skip_unsupported_faults: bool = False,
) -> LoadedDrill:
    """Validate the drill at ``path``; raises SpecError listing every problem.

    Kinds that are planned but not built yet are problems too, unless ``allow_missing``
    (``drill plan``), which returns them in ``LoadedDrill.missing`` instead. With
    ``skip_unsupported_faults``, a fault the target cannot take is left out (``LoadedDrill.skipped_faults``
    says which and why) instead of being a problem. A drill with a ``sweep`` has each of its variants
    validated too; a variant's problems are located at its value.
    """
    _check_time_scale(time_scale)
    path = resolve_drill_path(path)
    text = read_input_file(path)
    doc = load_located(text, str(path))
    out = _Collector(doc.locations, list(doc.diagnostics))
    if doc.data is None and not out.diagnostics:
        out.add((), "the file is empty", hint="a drill needs at least 'name', 'target' and 'scenario'")
    data = doc.data
    if data is not None and not isinstance(data, dict):
        out.add((), f"expected a mapping of drill keys at the top level, got {type(data).__name__}")
        data = None
    if data is None:
        raise _spec_error(out.diagnostics)
    data = _apply_overrides(data, overrides, out)
    loaded = _validate(path, text, data, out, tuple(overrides), skip_unsupported_faults)
    if loaded is not None and loaded.drill.sweep is not None and not out.diagnostics:
        _check_sweep_values(path, loaded, tuple(overrides), out)
    if not allow_missing:
        out.diagnostics += out.missing
    if out.diagnostics or loaded is None:
        raise _spec_error(out.diagnostics)
    if out.missing:
        loaded = replace(loaded, missing=tuple(sorted(out.missing, key=Diagnostic.sort_key)))
    if time_scale != 1.0:
        loaded = scale_timeline(loaded, time_scale)
        _check_scaled(loaded, time_scale)
    return loaded


_TIME_SCALE = Position("<--time-scale>", 1, 1)


def _check_time_scale(time_scale: float) -> None:
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise SpecError(
            [
                Diagnostic(
                    _TIME_SCALE,
                    (),
                    f"--time-scale must be a positive finite number, got {time_scale!r}",
                    hint="e.g. --time-scale 0.1 for a run ten times shorter",
                )
            ]
        )


def _check_scaled(loaded: LoadedDrill, time_scale: float) -> None:
    """The scaled timeline must still be plannable: what validation checked before scaling, checked again."""
    length = loaded.drill.phases.loaded_length()
    problem = planned_load_problem(loaded.scenario, length)
    if length > MAX_DURATION_S:
        problem = f"the phases last {length:g}s once scaled, longer than the longest accepted ({MAX_DURATION_S:g}s)"
    if problem:
        raise SpecError(
            [Diagnostic(_TIME_SCALE, (), f"--time-scale {time_scale:g}: {problem}", hint="use a smaller --time-scale")]
        )


def _check_sweep_values(path: Path, loaded: LoadedDrill, overrides: tuple[str, ...], out: _Collector) -> None:
    """Each variant of the sweep loads as a drill of its own; its problems are located at its value."""
    sweep = loaded.drill.sweep
    assert sweep is not None
    for i, value in enumerate(sweep.values):
        try:
            load_drill(
                path,
                overrides=(*overrides, *sweep.overrides(value)),
                skip_unsupported_faults=sweep.skip_unsupported_faults,
            )
        except SpecError as exc:
            for problem in exc.diagnostics:
                where = f" ({format_path(problem.path)})" if problem.path else ""
                message = f"the variant {sweep.variable}={value!r}: {problem.message}{where}"
                hint = problem.hint
                if problem.path[:1] == ("faults",) and problem.path[-1:] == ("kind",):
                    hint = "set sweep.skip_unsupported_faults: true to run that variant without the fault"
                out.add(("sweep", "values", i), message, hint=hint)


def _validate(
    path: Path, text: str, data: dict, out: _Collector, overrides: tuple[str, ...], skip_unsupported: bool = False
) -> LoadedDrill | None:
    drill, problems = validate_model(Drill, data, out.locations)
    out.extend(problems)
    scenario, scenario_path = _scenario(path, data.get("scenario"), out)
    if drill is None:
        _plugins_for_raw(data, out)  # still report plugin-level problems in the same pass
        return None
    target_params = _plugin_params(
        registry.targets, drill.target.kind, drill.target.config, ("target", "kind"), ("target", "config"), out
    )
    fault_params = [
        _plugin_params(registry.faults, f.kind, f.params, ("faults", i, "kind"), ("faults", i, "params"), out)
        for i, f in enumerate(drill.faults)
    ]
    check_params = [
        _plugin_params(registry.checks, c.kind, c.params, ("checks", i, "kind"), ("checks", i, "params"), out)
        for i, c in enumerate(drill.checks)
    ]
    runbook = _runbook(path, drill, out)
    skipped: list[str] = []
    if skip_unsupported and target_params is not None:
        drill, fault_params, skipped = _without_unsupported_faults(drill, fault_params, target_params)
    if scenario is not None:
        _cross_checks(drill, scenario, fault_params, check_params, target_params, out)
    if out.diagnostics or scenario is None:
        return None
    return LoadedDrill(
        path,
        text,
        drill,
        scenario,
        scenario_path,
        target_params,
        # _plugin_params is None only where it added a diagnostic, and there are none here
        tuple(fault_params),  # type: ignore[arg-type]
        tuple(check_params),  # type: ignore[arg-type]
        overrides,
        1.0,
        runbook,
        skipped_faults=tuple(skipped),
    )


def _plugins_for_raw(data: dict, out: _Collector) -> None:
    """When the envelope is invalid, still check plugin kinds and params where they are readable."""
    target = data.get("target")
    if isinstance(target, dict) and isinstance(target.get("kind", "embedded"), str):
        _plugin_params(
            registry.targets,
            target.get("kind", "embedded"),
            target.get("config") or {},
            ("target", "kind"),
            ("target", "config"),
            out,
        )
    for group, key in ((registry.faults, "faults"), (registry.checks, "checks")):
        items = data.get(key)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if isinstance(item, dict) and isinstance(item.get("kind"), str):
                _plugin_params(group, item["kind"], item.get("params") or {}, (key, i, "kind"), (key, i, "params"), out)


def _plugin_params(
    reg: registry.Registry, kind: str, params: object, kind_path: KeyPath, params_path: KeyPath, out: _Collector
) -> BaseModel | None:
    try:
        plugin = reg.get(kind)
    except UnknownPluginError as exc:
        coming = registry.planned(reg.group, kind)
        if coming is not None:
            out.missing.append(
                Diagnostic(
                    out.locations.position_of(kind_path),
                    kind_path,
                    f"{reg.label} kind {kind!r} is not built yet: it comes with {coming}",
                    hint="nothing was started; remove it from the drill to run the rest now",
                )
            )
            return None
        out.add(kind_path, exc.message, hint=exc.hint)
        return None
    except DrillError as exc:
        out.add(kind_path, str(exc))
        return None
    instance, problems = validate_model(plugin.Params, params if params is not None else {}, out.locations, params_path)
    out.extend(problems)
    return instance


def load_scenario(path: Path) -> tuple[Scenario | None, list[Diagnostic]]:
    """Load a scenario file on its own (``drill load``); problems are located in that file."""
    try:
        text = read_input_file(path, what="scenario")
    except SpecError as exc:
        return None, exc.diagnostics
    doc = load_located(text, str(path))
    out = _Collector(doc.locations, list(doc.diagnostics))
    if out.diagnostics:
        return None, out.diagnostics
    if not isinstance(doc.data, dict):
        out.add((), "expected a mapping with 'pools' at the top level of a scenario file")
        return None, out.diagnostics
    scenario, problems = validate_model(Scenario, doc.data, out.locations)
    out.extend(problems)
    if scenario is not None:
        scenario = _resolve_trace(scenario, path.parent, out, ())
        too_much = planned_load_problem(scenario, scenario.duration) if scenario.duration else None
        if too_much:
            out.add(("duration",), too_much, hint="lower the arrival rates or shorten 'duration'")
    return (scenario if not out.diagnostics else None), out.diagnostics


def _scenario(drill_path: Path, value: object, out: _Collector) -> tuple[Scenario | None, Path | None]:
    if value is None:
        return None, None  # the envelope reports the missing key
    if isinstance(value, dict):
        scenario, problems = validate_model(Scenario, value, out.locations, ("scenario",))
        out.extend(problems)
        if scenario is not None:
            scenario = _resolve_trace(scenario, drill_path.parent, out, ("scenario",))
        return scenario, None
    if not isinstance(value, str):
        return None, None
    found = _find_scenario(drill_path, value)
    if found is None:
        out.add(
            ("scenario",),
            f"scenario file {value!r} not found",
            hint="looked next to the drill and in scenarios/; available: "
            f"{', '.join(_known_scenarios(drill_path)) or '(none)'}",
        )
        return None, None
    scenario, problems = load_scenario(found)
    out.extend(problems)
    return scenario, found


def _find_scenario(drill_path: Path, name: str) -> Path | None:
    if not name.strip() or "\x00" in name:
        return None
    base = drill_path.parent
    candidates = [base / name, Path(name), base.parent / "scenarios" / name, Path("scenarios") / name]
    candidates += [c.parent / f"{c.name}.yaml" for c in candidates if c.name and not c.suffix]
    for candidate in candidates:
        try:
            if candidate.is_file():
                return candidate
        except (OSError, ValueError):
            continue
    return None


def _known_scenarios(drill_path: Path) -> list[str]:
    """Scenario files in the ``scenarios/`` folder beside the drill's folder (as in this repository)."""
    folder = drill_path.parent.parent / "scenarios"
    return sorted(p.name for p in folder.glob("*.yaml")) if folder.is_dir() else []


def _resolve_trace(scenario: Scenario, base: Path, out: _Collector, prefix: KeyPath) -> Scenario:
    """Make trace file paths absolute (relative to the scenario file) and check they exist."""
    arrivals = [(("arrival",), scenario.arrival)] + [
        (("pools", i, "arrival"), p.arrival) for i, p in enumerate(scenario.pools)
    ]
    replaced = scenario
    for path, arrival in arrivals:
        if arrival is None or arrival.process is not ArrivalProcess.TRACE or arrival.trace is None:
            continue
        file = Path(arrival.trace.file)
        resolved = file if file.is_absolute() else (base / file)
        if not arrival.trace.file.strip() or not _is_file(resolved):
            out.add(
                prefix + path + ("trace", "file"),
                f"trace file {arrival.trace.file!r} not found (looked at {resolved})",
                hint="paths are relative to the scenario file",
            )
            continue
        unreadable = _trace_problem(resolved)
        if unreadable:
            out.add(
                prefix + path + ("trace", "file"), unreadable, hint="the file must be an Azure LLM inference trace CSV"
            )
            continue
        new_arrival = arrival.model_copy(
            update={"trace": arrival.trace.model_copy(update={"file": str(resolved.resolve())})}
        )
        replaced = _replace_arrival(replaced, path, new_arrival)
    return replaced


def _trace_problem(path: Path) -> str | None:
    """Read the trace now, so a malformed row is a validation error and not a failure once the run started."""
    try:
        read_trace(path)
    except DrillError as exc:
        return exc.message
    return None


def _replace_arrival(scenario: Scenario, path: KeyPath, arrival: Arrival) -> Scenario:
    if path == ("arrival",):
        return scenario.model_copy(update={"arrival": arrival})
    pools = list(scenario.pools)
    pools[path[1]] = pools[path[1]].model_copy(update={"arrival": arrival})
    return scenario.model_copy(update={"pools": pools})


def _runbook(drill_path: Path, drill: Drill, out: _Collector) -> Path | None:
    if not drill.runbook:
        return None
    found = None
    if drill.runbook.strip() and "\x00" not in drill.runbook:
        candidates = [drill_path.parent / drill.runbook, Path(drill.runbook), drill_path.parent.parent / drill.runbook]
        found = next((c for c in candidates if _is_file(c)), None)
    if found is None:
        out.add(
            ("runbook",),
            f"runbook {drill.runbook!r} not found",
            hint="paths are relative to the drill file or the project root",
        )
    return found


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _cross_checks(
    drill: Drill,
    scenario: Scenario,
    fault_params: list,
    check_params: list,
    target_params: BaseModel | None,
    out: _Collector,
) -> None:
    _check_fault_windows(drill, out)
    too_much = planned_load_problem(scenario, drill.phases.loaded_length())
    if too_much:
        out.add(("scenario",), too_much, hint="lower the arrival rates or shorten the phases")
    _check_unique_names(drill, out)
    _check_check_plans(drill, check_params, out)
    _check_env_refs(drill, target_params, out)
    pools = [p.name for p in scenario.pools]
    for i, fault in enumerate(drill.faults):
        for j, pool in enumerate(fault.selector.pools or []):
            if pool not in pools:
                suggestion = did_you_mean(pool, pools)
                out.add(
                    ("faults", i, "selector", "pools", j),
                    f"no pool {pool!r} in the scenario (pools: {', '.join(pools)})",
                    hint=f"did you mean '{suggestion}'?" if suggestion else None,
                )
    if target_params is not None:
        _check_capabilities(drill, fault_params, target_params, out)
        target_cls = registry.targets.get(drill.target.kind)
        for path, message, hint in target_cls.check_scenario(target_params, scenario):
            where = ("target", "config") + tuple(path)
            out.add(where if _has_location(out, where) else ("target", "config"), message, hint=hint)


def _check_check_plans(drill: Drill, check_params: list, out: _Collector) -> None:
    """Each check's params against the drill's phases (``Check.plan_problems``), located at the param."""
    for i, (spec, params) in enumerate(zip(drill.checks, check_params)):
        if params is None:  # its params already have a diagnostic
            continue
        for path, message, hint in registry.checks.get(spec.kind).plan_problems(params, drill.phases):
            where = ("checks", i, "params", *path)
            out.add(where if _has_location(out, where) else ("checks", i), message, hint=hint)


def _check_env_refs(drill: Drill, target_params: BaseModel | None, out: _Collector) -> None:
    """Every ``${NAME}`` the run would expand (target config, the metrics source) names a variable that is set."""
    refs = unset_env_refs(drill) + (unset_env_refs(target_params, ("target", "config")) if target_params else [])
    for where, name in refs:
        out.add(
            where,
            f"the environment variable {name} is not set (${{{name}}} is read from the environment at start)",
            hint=f"export {name}=... before the run, or write the value itself",
        )


def _has_location(out: _Collector, path: KeyPath) -> bool:
    return path in out.locations.values or path in out.locations.keys


def _check_fault_windows(drill: Drill, out: _Collector) -> None:
    length = drill.phases.fault
    if drill.faults and length <= 0:
        out.add(
            ("phases", "fault"),
            "the drill has faults but its fault phase lasts 0s",
            hint="set phases.fault to a duration such as 60s",
        )
        return
    for i, fault in enumerate(drill.faults):
        end = fault.start + (fault.duration if fault.duration is not None else length - fault.start)
        name = drill.fault_names()[i]
        hint = "faults must start and end inside the fault phase; lengthen phases.fault or move the fault"
        if fault.start >= length:
            out.add(
                ("faults", i, "start"),
                f"fault {name!r} starts at {fault.start:g}s, but the fault phase ends at {length:g}s",
                hint=hint,
            )
        elif end > length + 1e-9:
            out.add(
                ("faults", i, "duration"),
                f"fault {name!r} runs from {fault.start:g}s to {end:g}s of the fault phase, which lasts {length:g}s",
                hint=hint,
            )


def _check_unique_names(drill: Drill, out: _Collector) -> None:
    names = drill.fault_names()
    for i, name in enumerate(names):
        if names.index(name) != i:
            out.add(("faults", i, "name"), f"fault name {name!r} is used twice", hint="give each fault its own name")


def _unsupported_faults(drill: Drill, fault_params: list, target_params: BaseModel) -> list[tuple[int, str]]:
    """(index, why) of each fault whose needs the target as configured does not provide."""
    target_cls = registry.targets.get(drill.target.kind)
    static = getattr(target_cls, "static_capabilities", None)
    if static is None:
        return []
    offered = static(target_params)
    found = []
    for i, (fault, params) in enumerate(zip(drill.faults, fault_params)):
        if params is None:
            continue
        fault_cls = registry.faults.get(fault.kind)
        needed = fault_cls(params).needs_for(params)
        missing = sorted(c.value for c in needed - offered)
        if missing:
            found.append(
                (
                    i,
                    f"fault {fault.kind!r} needs {', '.join(missing)}; target {drill.target.kind!r} as configured "
                    f"provides: {', '.join(sorted(c.value for c in offered)) or '(nothing)'}",
                )
            )
    return found


def _without_unsupported_faults(
    drill: Drill, fault_params: list, target_params: BaseModel
) -> tuple[Drill, list, list[str]]:
    """The drill without the faults its target cannot take, their params, and one line per fault left out."""
    unsupported = dict(_unsupported_faults(drill, fault_params, target_params))
    if not unsupported:
        return drill, fault_params, []
    names = drill.fault_names()
    kept = [i for i in range(len(drill.faults)) if i not in unsupported]
    skipped = [f"{names[i]}: {why}" for i, why in sorted(unsupported.items())]
    # each kept fault keeps its name (an unnamed one's default name is its index in the drill as written)
    faults = [drill.faults[i].model_copy(update={"name": names[i]}) for i in kept]
    trimmed = drill.model_copy(update={"faults": faults})
    return trimmed, [fault_params[i] for i in kept], skipped


def _check_capabilities(drill: Drill, fault_params: list, target_params: BaseModel, out: _Collector) -> None:
    for i, why in _unsupported_faults(drill, fault_params, target_params):
        out.add(
            ("faults", i, "kind"),
            why,
            hint="change the fault's method or enable it on the target (e.g. target.config.links)",
        )


# --- --set overrides -------------------------------------------------------------------------------


def _apply_overrides(data: dict, overrides: tuple[str, ...] | list[str], out: _Collector) -> dict:
    for n, text in enumerate(overrides, start=1):
        where = Position("<--set>", n, 1)
        try:
            path, value = parse_override(text)
            _set_path(data, path, value)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            shown = text if len(text) <= 80 else text[:77] + "..."
            where = Position("<--set>", n, getattr(exc, "column", 1))
            out.diagnostics.append(Diagnostic(where, (), f"--set {shown}: {exc}"))
            continue
        for sub in list(out.locations.values):
            if sub[: len(path)] == path:
                del out.locations.values[sub]
        out.locations.values[path] = Position("<--set>", n, len(text.split("=", 1)[0]) + 2)
    return data


def _set_path(data: object, path: KeyPath, value: object) -> None:
    node = data
    for i, part in enumerate(path[:-1]):
        node = _child(node, part, path[: i + 1], create=not isinstance(path[i + 1], int))
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise IndexError(f"{format_path(path[:-1])} has no item [{last}]")
        node[last] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise TypeError(f"{format_path(path[:-1])} is not a mapping")


def _child(node: object, part: str | int, where: KeyPath, create: bool) -> object:
    if isinstance(part, int):
        if not isinstance(node, list) or part >= len(node):
            raise IndexError(f"{format_path(where[:-1]) or 'the drill'} has no item [{part}]")
        return node[part]
    if not isinstance(node, dict):
        raise TypeError(f"{format_path(where[:-1])} is not a mapping")
    if part not in node or node[part] is None:
        node[part] = {} if create else []
    return node[part]
