"""``resolved.json`` as the checks and the report read it: its shape is checked once, when it is read.

A run directory may come from someone else (attached to a ticket, copied from CI), so ``resolved.json`` is
untrusted input: ``[]``, ``null``, a check without ``kind`` or an SLO that is not a duration is a located
:class:`~drill.errors.InputError` (exit 2) naming the key, never an AttributeError deep in a check (exit 3).
Only the keys something reads are checked; other keys are left as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from drill.errors import InputError
from drill.rundir.files import read_json
from drill.units import parse_duration

__all__ = ["read_resolved", "resolved_shape_problem"]

_SHAPE_HINT = "the run directory is damaged; its raw files can still be read by hand"
_HINT = "the run directory is damaged; `drill run` writes resolved.json, and its raw files can still be read by hand"


def read_resolved(path: Path, root: Path | None = None) -> dict[str, Any]:
    """The document of ``path`` (read through :func:`drill.rundir.files.read_json`, below ``root``); InputError
    naming the file (and the key) when it is not JSON of the right shape. A missing file is FileNotFoundError."""
    data = read_json(path, root=root)
    problems = _problems(data)
    if problems:
        raise InputError(f"{path}: not a resolved drill: {'; '.join(problems[:5])}", hint=_HINT)
    shape = resolved_shape_problem(data)
    if shape is not None:
        raise InputError(f"{path}: {shape}", hint=_SHAPE_HINT)
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


#: The containers of ``resolved.json`` its readers walk (``key.[]`` an item of a list), and the type each must be;
#: a document that the runner wrote always has them so (``drill.runner.run.resolved_inputs``).
_RESOLVED_SHAPE: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("drill", dict),
    ("scenario", dict),
    ("target_params", dict),
    ("check_params", list),
    ("check_params.[]", dict),
    ("fault_params", list),
    ("fault_params.[]", dict),
    ("drill_file", str),
    ("time_scale", (int, float)),
    ("drill.name", str),
    ("drill.checks", list),
    ("drill.checks.[]", dict),
    ("drill.checks.[].kind", str),
    ("drill.faults", list),
    ("drill.faults.[]", dict),
    ("drill.target", dict),
    ("drill.slo", dict),
    ("drill.report", dict),
    ("drill.runbook", str),
    ("scenario.pools", list),
    ("scenario.pools.[]", dict),
    ("scenario.pools.[].slo", dict),
)


_TYPE_WORDS: dict[Any, str] = {dict: "an object", list: "a list", str: "a string"}


def resolved_shape_problem(doc: Any) -> str | None:
    """What is not of the type its readers expect in a ``resolved.json`` document (None: every container is)."""
    if not isinstance(doc, dict):
        return f"expected a JSON object (the resolved drill), found {type(doc).__name__}"
    for key, expected in _RESOLVED_SHAPE:
        for where, value in _at(doc, key.split(".")):
            if value is not None and (not isinstance(value, expected) or isinstance(value, bool)):
                wanted = _TYPE_WORDS.get(expected, "a number")
                return f"{where}: expected {wanted}, found {type(value).__name__}"
    for where, check in _at(doc, ["drill", "checks", "[]"]):
        if isinstance(check, dict) and not check.get("kind"):
            return f"{where}: a check without a 'kind'"
    return None


def _at(doc: Any, keys: list[str], where: str = "") -> Iterator[tuple[str, Any]]:
    """(``drill.checks[2].kind``, value) for each value at the path ``keys`` (``[]``: each item of a list)."""
    if not keys:
        yield where, doc
        return
    key, rest = keys[0], keys[1:]
    if key == "[]":
        for i, item in enumerate(doc if isinstance(doc, list) else ()):
            yield from _at(item, rest, f"{where}[{i}]")
    elif isinstance(doc, dict) and key in doc:
        yield from _at(doc[key], rest, f"{where}.{key}" if where else key)
