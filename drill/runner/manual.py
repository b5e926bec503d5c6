"""One fault injected by hand (``drill fault inject``), journaled and reverted like a drill's.

The same engine pieces as a run: a run directory ``<out>/manual/<run id>/`` and its ``journal.jsonl``
(opened by :func:`drill.rundir.directory.open_run`), the :class:`~drill.runner.reverts.RevertStack` (the
revert record is journaled with fsync before ``inject``), the dead-man
:class:`~drill.runner.watchdog.Watchdog` whose lease is the ``--for`` duration, the active-run registry (so
``drill cleanup`` finds an injection whose process died) and the :class:`~drill.runner.signals.SignalGuard`
(SIGINT/SIGTERM revert at once, never in the middle of an inject or a revert).

``--target stack[:NAME]`` is a stack started by ``drill stack up`` (its state file and plan, turned
into a TargetInfo by :mod:`drill.targets.embedded`); ``--target FILE.yaml`` takes the ``target:``
section of a drill file, for targets that attach (an embedded target in a file is started per
run, so it is refused with a hint).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from drill import registry
from drill.api import Capability, Fault, FaultContext, FaultParams, FaultTargets, Selector, TargetContext, TargetInfo
from drill.errors import InputError, RunInterrupted, SpecError, TargetError
from drill.rundir.directory import open_run
from drill.rundir.journal import Event, RunStatus
from drill.runner import active
from drill.runner.fault_schedule import FAULT_TIMEOUT_S, register_and_inject, resolve_targets, verify_and_journal
from drill.runner.reverts import RevertStack
from drill.runner.safety import check_host_list
from drill.runner.signals import SignalGuard
from drill.runner.watchdog import Watchdog
from drill.spec.diagnostics import Diagnostic, Position
from drill.spec.loader import read_input_file
from drill.spec.validation import validate_model
from drill.spec.yamlio import Locations, load_located
from drill.stack.supervision.launcher import read_state, supervisor_alive
from drill.stack.supervision.stack_plan import StackPlan
from drill.targets.embedded import EmbeddedStack, info_from_state
from drill.targets.openai import OpenAITargetParams

_Model = TypeVar("_Model", bound=BaseModel)

__all__ = [
    "ManualInjection",
    "ManualOutcome",
    "ManualRequest",
    "ManualTarget",
    "hold_fault",
    "manual_request",
    "target_info",
]

#: The watchdog reverts a manual fault this long after ``--for`` ends if this process is stuck or dead (s).
LEASE_GRACE_S = 5.0
_TICK_S = 0.2
Say = Callable[..., None]


@dataclass(frozen=True)
class ManualRequest:
    """A validated manual injection: the fault, where it acts, for how long (s)."""

    kind: str
    fault_id: str
    fault: Fault
    target: TargetInfo
    targets: FaultTargets
    hold_s: float


@dataclass(frozen=True)
class ManualTarget:
    """What ``--target`` names: its TargetInfo and, in a drill file, where each replica gives ``upstream``."""

    info: TargetInfo
    upstream_at: dict[str, Diagnostic] = field(default_factory=dict)  # replica -> the refusal, located there


@dataclass
class ManualOutcome:
    run_dir: Path
    landed: bool = False
    interrupted: str | None = None
    revert_errors: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """4 revert failed, 130 interrupted, 1 the fault did not land, 0 landed and reverted."""
        if self.revert_errors:
            return 4
        if self.interrupted:
            return 130
        return 0 if self.landed else 1


# -- the request ---------------------------------------------------------------------------------


def manual_request(
    kind: str,
    target_spec: str,
    params: tuple[str, ...],
    selectors: tuple[str, ...],
    *,
    hold_s: float,
    fault_id: str | None = None,
    state_dir: Path | None = None,
    allow_hosts: tuple[str, ...] = (),
) -> ManualRequest:
    """Validate everything before touching anything; raises InputError/SpecError (exit 2)."""
    fault_cls = registry.faults.get(kind)
    fault_params = _validated(fault_cls.Params, _pairs(params, "--param"), "<--param>", ("params",))
    selector = _validated(Selector, _pairs(selectors, "--selector"), "<--selector>", ("selector",))
    fault = fault_cls(fault_params)
    manual = target_info(target_spec, state_dir, allow_hosts)
    target = manual.info
    _check_capabilities(fault, fault_params, target)
    try:
        targets = resolve_targets(fault, selector, target, selector.seed or 0)
    except ValueError as exc:
        raise InputError(f"--selector: {exc}", hint="`drill stack status` lists the replicas") from exc
    if Capability.TOXIPROXY_REPLICA in fault.needs_for(fault_params):
        _refuse_harness_proxies(targets, manual)
    return ManualRequest(kind, fault_id or kind, fault, target, targets, hold_s)


def _pairs(items: tuple[str, ...], option: str) -> dict:
    data: dict = {}
    for item in items:
        text = item.strip()
        if text.startswith("{"):
            value = _yaml(text, option)
            if not isinstance(value, dict):
                raise InputError(f"{option} {item!r}: expected KEY=VALUE or a YAML mapping")
            data.update(value)
            continue
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{option} {item!r}: expected KEY=VALUE", hint=f"e.g. {option} latency_ms=300")
        data[key.strip()] = _yaml(raw, option) if raw.strip() else ""
    return data


def _yaml(text: str, option: str) -> object:
    """A value from the command line, read with the same bounded YAML reader as drill files."""
    doc = load_located(text, f"<{option}>")
    if doc.diagnostics:
        raise SpecError(doc.diagnostics, f"{option}: cannot read {text[:60]!r} as YAML; nothing was injected.")
    return doc.data


def _validated(model: type[_Model], data: dict, source: str, prefix: tuple) -> _Model:
    instance, problems = validate_model(model, data, Locations(source), prefix)
    if problems:
        raise SpecError(problems, f"{len(problems)} error{'s' if len(problems) != 1 else ''}; nothing was injected.")
    assert instance is not None  # validate_model returns an instance when it found no problem
    return instance


def _check_capabilities(fault: Fault, params: FaultParams, target: TargetInfo) -> None:
    offered = target.capabilities - {Capability.LOAD_CONTROL}  # no load driver runs in a manual injection
    missing = sorted(c.value for c in fault.needs_for(params) - offered)
    if missing:
        hint = (
            "queue_flood multiplies a drill's load: use it in `drill run`"
            if "load.control" in missing
            else "change the fault's method (--param method=...) or use a target that offers it"
        )
        raise InputError(
            f"fault {fault.kind!r} needs {', '.join(missing)}; the target provides "
            f"{', '.join(sorted(c.value for c in offered)) or '(nothing)'}",
            hint=hint,
        )


def _refuse_harness_proxies(targets: FaultTargets, manual: ManualTarget) -> None:
    """A replica that gives ``upstream`` has its Toxiproxy proxy made by ``drill run``, for the run only: outside
    one there is no proxy to put a toxic on."""
    problems = [manual.upstream_at[r.name] for r in targets.replicas if r.name in manual.upstream_at]
    if problems:
        raise SpecError(problems, "nothing was injected.")


# -- the target ----------------------------------------------------------------------------------


def target_info(spec: str, state_dir: Path | None = None, allow_hosts: tuple[str, ...] = ()) -> ManualTarget:
    """The TargetInfo of ``stack[:NAME]`` or of a drill file's ``target:`` section."""
    if spec == "stack" or spec.startswith("stack:"):
        return ManualTarget(_stack_info(spec.partition(":")[2] or "default", state_dir, allow_hosts))
    path = Path(spec)
    if not path.is_file():
        raise InputError(
            f"--target {spec!r} is neither stack[:NAME] nor a drill file",
            hint="start a stack with `drill stack up` and pass --target stack, or give a drill YAML",
        )
    return _file_info(path, allow_hosts)


def _stack_info(name: str, state_dir: Path | None, allow_hosts: tuple[str, ...]) -> TargetInfo:
    state = read_state(name, state_dir)
    if state is None:
        raise InputError(f"no stack named {name!r} is running", hint=f"start one: drill stack up --name {name}")
    if not supervisor_alive(state):
        raise TargetError(
            f"stack {name!r} is not running (its supervisor is gone)",
            hint=f"drill stack down --name {name}, then up again",
        )
    plan = StackPlan.model_validate_json((state.run_dir / "plan.json").read_text(encoding="utf-8"))
    config = plan.replica_launches[0].config.model_copy(update={"runtime": state.runtime})
    check_host_list(EmbeddedStack.hosts(config), allow_hosts)
    return info_from_state(state, EmbeddedStack.static_capabilities(config))


def _file_info(path: Path, allow_hosts: tuple[str, ...]) -> ManualTarget:
    doc = load_located(read_input_file(path, what="target"), str(path))
    data = doc.data if isinstance(doc.data, dict) else {}
    section = data.get("target")
    if doc.diagnostics or not isinstance(section, dict):
        raise SpecError(doc.diagnostics or [Diagnostic(Position(str(path), 1, 1), (), "no 'target:' mapping here")])
    kind = section.get("kind", "embedded")
    if kind == "embedded":
        raise InputError(
            f"{path}: an embedded target is started per run; a manual fault needs a running one",
            hint="drill stack up --config STACK.yaml, then --target stack",
        )
    target_cls = registry.targets.get(kind)
    params = _validated_located(target_cls.Params, section.get("config") or {}, doc.locations)
    check_host_list(target_cls.hosts(params), (*allow_hosts, *(data.get("allowed_hosts") or [])))
    info = target_cls(params, TargetContext("manual", str(path.parent))).planned_info()
    if info is None:
        raise InputError(f"target kind {kind!r} cannot describe itself without starting", hint="use --target stack")
    return ManualTarget(info, _upstream_at(params, doc.locations))


def _upstream_at(params: object, locations: Locations) -> dict[str, Diagnostic]:
    """Each replica whose proxy the harness makes (``upstream``), with the refusal a manual fault on it gets."""
    if not isinstance(params, OpenAITargetParams):
        return {}
    found = {}
    for i, replica in enumerate(params.replicas):
        if replica.upstream is not None:
            key = ("target", "config", "replicas", i, "upstream")
            found[replica.name] = Diagnostic(
                locations.position_of(key),
                key,
                f"replica {replica.name!r}: its Toxiproxy proxy is made by the harness during a `drill run` only; "
                "a manual fault has no proxy to act on",
                hint="run the fault in a drill (drill run), or make the proxy yourself: give the replica 'url' and "
                "'proxy' on 'toxiproxy_url'",
            )
    return found


def _validated_located(model: type[_Model], data: object, locations: Locations) -> _Model:
    instance, problems = validate_model(model, data, locations, ("target", "config"))
    if problems:
        raise SpecError(problems, f"{len(problems)} error(s) in the target; nothing was injected.")
    assert instance is not None  # as in _validated
    return instance


# -- the session ---------------------------------------------------------------------------------


class ManualInjection:
    """Runs one :class:`ManualRequest`: open, inject, verify, hold, revert, close — reverting on every path."""

    def __init__(
        self, request: ManualRequest, out_dir: Path, say: Say = lambda line, **kw: None, argv: tuple[str, ...] = ()
    ) -> None:
        self.request = request
        self.say = say
        target = request.target.model_dump(mode="json")
        self.rundir, self.journal = open_run(
            out_dir, "manual", argv, kind=request.kind, hold_s=request.hold_s, target=target
        )
        self.outcome = ManualOutcome(self.rundir.path)
        self.stack = RevertStack(self.journal)
        self.guard = SignalGuard(on_signal=lambda name: self.journal.write(Event.SIGNAL, signal=name))
        self.watchdog: Watchdog | None = None
        self.ctx = FaultContext(
            request.fault_id,
            request.target,
            request.targets,
            timeout_s=FAULT_TIMEOUT_S,
            note=lambda message: self.journal.write(Event.NOTE, fault_id=request.fault_id, message=message),
        )

    def run(self) -> ManualOutcome:
        """Inject, verify, hold for ``hold_s``, revert. Returns the outcome (its ``exit_code``)."""
        self._open()
        self.guard.install()
        reason = "held for the planned time"
        try:
            if self._inject() and self._verify():
                self._hold()
            else:
                reason = "the fault did not land"
        except RunInterrupted as exc:
            self.outcome.interrupted, reason = exc.signal_name, f"interrupted by {exc.signal_name}"
        finally:
            self._revert(reason)
            self._finish()
        return self.outcome

    def _open(self) -> None:
        r = self.request
        active.register(self.rundir.run_id, self.rundir.path)
        self.watchdog = Watchdog(self.rundir.path, lease_grace_s=LEASE_GRACE_S)
        self.say(f"run directory {self.rundir.path}")
        for line in r.fault.describe_targets(self.ctx):
            self.say(f"{r.kind} ({r.fault.realism_for(r.fault.params).value}) touches {line}")

    def _inject(self) -> bool:
        r = self.request
        with self.guard.critical():
            error = register_and_inject(r.fault, self.ctx, r.kind, self.stack, self.journal, time.time() + r.hold_s)
        return self._landed(error)

    def _verify(self) -> bool:
        proof, error = verify_and_journal(self.request.fault, self.ctx, self.request.kind, self.journal)
        if proof is not None:
            self.outcome.landed = True
            self.say(f"landed: {proof.summary}")
        return self._landed(error)

    def _landed(self, error: str | None) -> bool:
        if error is not None:
            self.say(f"NOT LANDED: {error}", error=True)
        return error is None

    def _hold(self) -> None:
        self.say(f"holding it for {self.request.hold_s:g}s (Ctrl-C reverts now)")
        deadline = time.monotonic() + self.request.hold_s
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(_TICK_S, left))

    def _revert(self, reason: str) -> None:
        self.guard.shutting_down()
        with self.guard.critical():
            outcomes = self.stack.revert_all(reason)
        for outcome in outcomes:
            if outcome.ok:
                self.say(f"reverted {outcome.fault_id} in {outcome.seconds:.2f}s ({reason})")
            else:
                self.outcome.revert_errors.append(f"{outcome.fault_id}: {outcome.error}")
                self.say(
                    f"REVERT FAILED for {outcome.fault_id}: {outcome.error}; the target may still be "
                    f"faulted: run `drill cleanup --run-dir {self.rundir.path}`",
                    error=True,
                )

    def _finish(self) -> None:
        code = self.outcome.exit_code
        status = RunStatus.INTERRUPTED if self.outcome.interrupted else RunStatus.COMPLETED
        self.journal.write(
            Event.RUN_FINISHED, status=status, exit_code=code, revert_failures=self.outcome.revert_errors
        )
        self.journal.close()
        self.ctx.close()
        if self.watchdog is not None:
            self.watchdog.finish()
        if not self.outcome.revert_errors:
            active.unregister(self.rundir.run_id)
        self.guard.uninstall()


def hold_fault(
    kind: str,
    target_spec: str,
    params: tuple[str, ...],
    selectors: tuple[str, ...],
    *,
    hold_s: float,
    out_dir: Path,
    fault_id: str | None = None,
    state_dir: Path | None = None,
    allow_hosts: tuple[str, ...] = (),
    say: Say = lambda line, **kw: None,
    argv: tuple[str, ...] = (),
    opened: Callable[[Path], None] = lambda run_dir: None,
) -> ManualOutcome:
    """``drill fault inject``: validate everything (InputError/SpecError, nothing touched), then open a run under
    ``out_dir/manual/`` (``opened`` is told its directory), inject, verify, hold for ``hold_s`` and revert."""
    request = manual_request(
        kind,
        target_spec,
        params,
        selectors,
        hold_s=hold_s,
        fault_id=fault_id,
        state_dir=state_dir,
        allow_hosts=allow_hosts,
    )
    injection = ManualInjection(request, out_dir, say=say, argv=argv)
    opened(injection.rundir.path)
    return injection.run()
