"""The resolved-configuration diff of a comparison: which variables differ between baseline and candidate.

Both sides are compared in the form the runner writes to ``resolved.json`` (:func:`drill.runner.run.
resolved_inputs`), made *effective*: each plugin's ``config``/``params`` is replaced by its validated params
(defaults filled in, so writing a default out is no difference) and ``scenario`` by the resolved scenario (a
file name and the same scenario inline are no difference). Paths are the drill's own dotted key paths, as
``--set`` takes them (``target.config.engine.max_num_queued_reqs``, ``faults[0].params.rate_multiplier``).

How a side was made (its file name, its ``--set`` list) is not a variable, and neither are the labels that do
not change what runs: :data:`LABELS`. Every other leaf is: a changed value, a key one side has and the other
lacks, a list item one side has and the other lacks, each counts as one difference.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from drill.errors import InputError
from drill.rundir.redact import REDACTED, Redactor, is_secret_name, secret_values
from drill.runner.run import resolved_inputs
from drill.spec.diagnostics import format_path
from drill.spec.loader import LoadedDrill

__all__ = [
    "ABSENT",
    "LABELS",
    "Difference",
    "diff_configs",
    "diff_drills",
    "diff_labels",
    "effective_config",
    "require_one",
]

#: Top-level drill keys that describe a drill without changing its run; the baseline's are the comparison's.
LABELS = ("name", "title", "description", "hypothesis", "runbook", "predicts", "decision")


class _Absent:
    """The value of a key or list item one side does not have."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Difference:
    """One variable that differs: its dotted path and the two values (:data:`ABSENT` where a side lacks it)."""

    path: str
    baseline: Any
    candidate: Any

    def describe(self) -> str:
        return f"{self.path}: {_shown(self.baseline)} -> {_shown(self.candidate)}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "baseline": _jsonable(self.baseline), "candidate": _jsonable(self.candidate)}


def _shown(value: Any) -> str:
    return "(absent)" if value is ABSENT else json.dumps(value, sort_keys=True)


def _jsonable(value: Any) -> Any:
    return "(absent)" if value is ABSENT else value


def effective_config(resolved: dict[str, Any]) -> dict[str, Any]:
    """The variables of one resolved drill (``resolved.json``'s shape): the drill with validated params, the
    resolved scenario and the time scale; without the labels."""
    drill = copy.deepcopy(resolved.get("drill") or {})
    for key in LABELS:
        drill.pop(key, None)
    target = drill.get("target")
    if isinstance(target, dict) and resolved.get("target_params") is not None:
        target["config"] = copy.deepcopy(resolved["target_params"])
    for key, params_key in (("faults", "fault_params"), ("checks", "check_params")):
        for item, params in zip(drill.get(key) or [], resolved.get(params_key) or []):
            if isinstance(item, dict) and params is not None:
                item["params"] = copy.deepcopy(params)
    drill["scenario"] = copy.deepcopy(resolved.get("scenario"))
    drill["time_scale"] = resolved.get("time_scale")
    return drill


def diff_configs(baseline: Any, candidate: Any, path: tuple[str | int, ...] = ()) -> list[Difference]:
    """Every leaf where ``baseline`` and ``candidate`` differ, in key order (mappings) and index order (lists)."""
    if isinstance(baseline, dict) and isinstance(candidate, dict):
        found: list[Difference] = []
        for key in sorted(set(baseline) | set(candidate), key=str):
            found += diff_configs(baseline.get(key, ABSENT), candidate.get(key, ABSENT), (*path, key))
        return found
    if isinstance(baseline, list) and isinstance(candidate, list):
        found = []
        for i in range(max(len(baseline), len(candidate))):
            a = baseline[i] if i < len(baseline) else ABSENT
            b = candidate[i] if i < len(candidate) else ABSENT
            found += diff_configs(a, b, (*path, i))
        return found
    if _same(baseline, candidate):
        return []
    return [Difference(format_path(path) or "(the whole drill)", baseline, candidate)]


def _same(a: Any, b: Any) -> bool:
    if a is ABSENT or b is ABSENT:
        return a is b
    return type(a) is type(b) and a == b or (_number(a) and _number(b) and a == b)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def diff_drills(baseline: LoadedDrill, candidate: LoadedDrill) -> list[Difference]:
    """The differences of two loaded drills' effective configurations, secrets of either target redacted."""
    a, b = resolved_inputs(baseline), resolved_inputs(candidate)
    redactor = Redactor(secrets=[*secret_values(a.get("target_params")), *secret_values(b.get("target_params"))])
    found = diff_configs(effective_config(a), effective_config(b))
    return [
        Difference(d.path, _redacted(redactor, d.path, d.baseline), _redacted(redactor, d.path, d.candidate))
        for d in found
    ]


def diff_labels(baseline: LoadedDrill, candidate: LoadedDrill) -> list[Difference]:
    """The labels (:data:`LABELS`) that differ: not variables, but shown, so nothing differs unsaid."""
    a = baseline.drill.model_dump(mode="json", by_alias=True)
    b = candidate.drill.model_dump(mode="json", by_alias=True)
    return diff_configs({k: a.get(k) for k in LABELS}, {k: b.get(k) for k in LABELS})


def _redacted(redactor: Redactor, path: str, value: Any) -> Any:
    """A secret-named key's value is ``[redacted]`` (the difference is still listed); other values scrubbed."""
    if value is ABSENT or value in (None, ""):
        return value
    return REDACTED if is_secret_name(path.rsplit(".", 1)[-1]) else redactor.data(value)


def require_one(differences: list[Difference]) -> Difference:
    """The one changed variable; exactly one is a comparison, any other count is refused (InputError, exit 2)."""
    if len(differences) == 1:
        return differences[0]
    if not differences:
        raise InputError(
            "baseline and candidate resolve to the same configuration: nothing to compare; nothing was started",
            hint="change one variable, e.g. --set target.config.engine.max_num_queued_reqs=128",
        )
    listed = "\n".join(f"  {d.describe()}" for d in differences)
    raise InputError(
        f"baseline and candidate differ in {len(differences)} variables, a comparison changes exactly one; "
        f"nothing was started:\n{listed}",
        hint="compare one change at a time (apply the shared ones to both sides with --set-both)",
    )
