"""``resolved.json`` as the checks and the report read it: its shape is checked once, when it is read.

A run directory may come from someone else (attached to a ticket, copied from CI), so ``resolved.json`` is
untrusted input: ``[]``, ``null``, a check without ``kind`` or an SLO that is not a duration is a located
:class:`~drill.errors.InputError` (exit 2) naming the key, never an AttributeError deep in a check (exit 3).
Only the keys something reads are checked; other keys are left as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drill.errors import InputError
from drill.rundir.files import read_json
from drill.units import parse_duration

__all__ = ["read_resolved"]

_HINT = "the run directory is damaged; `drill run` writes resolved.json, and its raw files can still be read by hand"


def read_resolved(path: Path, root: Path | None = None) -> dict[str, Any]:
    """The document of ``path`` (read through :func:`drill.rundir.files.read_json`, below ``root``); InputError
    naming the file (and the key) when it is not JSON of the right shape. A missing file is FileNotFoundError."""
    data = read_json(path, root=root)
    problems = _problems(data)
    if problems:
        raise InputError(f"{path}: not a resolved drill: {'; '.join(problems[:5])}", hint=_HINT)
    return data


def _problems(data: object) -> list[str]:
    if not isinstance(data, dict):
        return [f"the document must be a JSON object, not {_kind(data)}"]
    problems: list[str] = []
    drill = _mapping(data, "drill", "drill", problems)
    scenario = _mapping(data, "scenario", "scenario", problems)
    _mapping(data, "target_params", "target_params", problems)
    for i, check in enumerate(_items(drill, "checks", "drill.checks", problems)):
        where = f"drill.checks[{i}]"
        if not isinstance(check, dict):
            problems.append(f"{where} must be an object, not {_kind(check)}")
            continue
        if not isinstance(check.get("kind"), str) or not check["kind"]:
            problems.append(f"{where}.kind must be the check's kind (a string), not {_kind(check.get('kind'))}")
        if check.get("name") is not None and not isinstance(check["name"], str):
            problems.append(f"{where}.name must be a string, not {_kind(check['name'])}")
    for i, fault in enumerate(_items(drill, "faults", "drill.faults", problems)):
        if not isinstance(fault, dict):
            problems.append(f"drill.faults[{i}] must be an object, not {_kind(fault)}")
    _slo(_mapping(drill, "slo", "drill.slo", problems), "drill.slo", problems)
    for i, pool in enumerate(_items(scenario, "pools", "scenario.pools", problems)):
        if not isinstance(pool, dict) or not isinstance(pool.get("name"), str):
            problems.append(f"scenario.pools[{i}] must be an object with a name")
            continue
        _slo(_mapping(pool, "slo", f"scenario.pools[{i}].slo", problems), f"scenario.pools[{i}].slo", problems)
    checks = drill.get("checks") or []
    dumps = _items(data, "check_params", "check_params", problems)
    if "check_params" in data and isinstance(data["check_params"], list) and len(dumps) != len(checks):
        problems.append(f"check_params has {len(dumps)} entries for {len(checks)} check(s)")
    for i, dump in enumerate(dumps):
        if dump is not None and not isinstance(dump, dict):
            problems.append(f"check_params[{i}] must be an object, not {_kind(dump)}")
    return problems


def _mapping(parent: dict, key: str, where: str, problems: list[str]) -> dict:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{where} must be an object, not {_kind(value)}")
        return {}
    return value


def _items(parent: dict, key: str, where: str, problems: list[str]) -> list:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{where} must be a list, not {_kind(value)}")
        return []
    return value


def _slo(slo: dict, where: str, problems: list[str]) -> None:
    for name, value in slo.items():
        try:
            seconds = parse_duration(value)
        except (ValueError, TypeError):
            problems.append(f"{where}.{name} must be a duration, not {_kind(value)}")
            continue
        if not seconds > 0:
            problems.append(f"{where}.{name} must be a positive duration, not {value!r}")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
