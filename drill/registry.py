"""Plugin discovery through entry points, with verification at load.

Four groups: ``drill.faults``, ``drill.targets``, ``drill.checks`` and
``drill.traces``. Built-in plugins use the same door as third-party ones: they
are listed in llm-drill's own ``pyproject.toml``. A plugin is verified when it
is first loaded; a broken one raises :class:`PluginError` with a message that
names the plugin, where it was defined and the problem (after pluggy's
``PluginValidationError``).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from drill.errors import PluginError, UnknownPluginError, did_you_mean

__all__ = ["Registry", "checks", "faults", "targets", "traces"]

T = TypeVar("T")

#: What each group's plugins must have: (class attributes, methods).
_REQUIREMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "drill.faults": (("kind", "Params"), ("inject", "verify", "revert")),
    "drill.targets": (("kind", "Params"), ("start", "stop")),
    "drill.checks": (("kind", "Params"), ("evaluate",)),
    "drill.traces": (("kind", "Params"), ("spans",)),
}


@dataclass(frozen=True)
class PluginInfo:
    kind: str
    value: str  # "module:attr" of the entry point
    distribution: str


class Registry(Generic[T]):
    """Plugins of one entry-point group, by ``kind``."""

    def __init__(self, group: str, label: str) -> None:
        self.group = group
        self.label = label
        self._loaded: dict[str, type[T]] = {}

    def _entry_points(self) -> dict[str, EntryPoint]:
        return _entry_points_of(self.group, os.environ.get(EXTRA_PLUGINS_ENV, ""))

    def kinds(self) -> list[str]:
        return sorted(self._entry_points())

    def info(self, kind: str) -> PluginInfo:
        ep = self._entry_points()[kind]
        dist = ep.dist.name if ep.dist is not None else EXTRA_PLUGINS_ENV
        return PluginInfo(kind, ep.value, dist)

    def has(self, kind: str) -> bool:
        return kind in self._entry_points()

    def get(self, kind: str) -> type[T]:
        """The plugin class for ``kind``; UnknownPluginError (with did-you-mean) if none."""
        if kind in self._loaded:
            return self._loaded[kind]
        eps = self._entry_points()
        if kind not in eps:
            raise UnknownPluginError(self.label, kind, sorted(eps), did_you_mean(kind, eps))
        plugin = self._load(eps[kind])
        self._loaded[kind] = plugin
        return plugin

    def all(self) -> list[type[T]]:
        return [self.get(kind) for kind in self.kinds()]

    def _load(self, ep: EntryPoint) -> type[T]:
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken plugin must not look like a missing one
            raise PluginError(
                f"{self.label} plugin {ep.name!r} ({ep.value}) failed to import: {type(exc).__name__}: {exc}",
                hint="reinstall the package that provides it, or remove it",
            ) from exc
        _verify(self.group, self.label, ep, plugin)
        return plugin


def _verify(group: str, label: str, ep: EntryPoint, plugin: Any) -> None:
    attrs, methods = _REQUIREMENTS[group]
    where = f"{label} plugin {ep.name!r}\ndefinition: {ep.value}"
    if not inspect.isclass(plugin):
        raise PluginError(f"{where}\nthe entry point must name a class, found {type(plugin).__name__}")
    missing = [a for a in attrs if not hasattr(plugin, a)] + [
        m for m in methods if not callable(getattr(plugin, m, None))
    ]
    if missing:
        raise PluginError(f"{where}\nmissing: {', '.join(missing)}")
    kind = getattr(plugin, "kind", None)  # present: checked with the other attributes above
    if kind != ep.name:
        raise PluginError(f"{where}\nits kind is {kind!r} but the entry point names it {ep.name!r}")
    params = getattr(plugin, "Params", None)
    if params is not None and not (inspect.isclass(params) and issubclass(params, BaseModel)):
        raise PluginError(f"{where}\nParams must be a pydantic model class")
    if inspect.isabstract(plugin):
        abstract = ", ".join(sorted(getattr(plugin, "__abstractmethods__", ())))
        raise PluginError(f"{where}\nabstract methods not implemented: {abstract}")


#: Extra plugins without packaging, for plugin development and tests:
#: ``DRILL_EXTRA_PLUGINS="drill.faults:my_fault=my_module:MyFault;drill.checks:x=mod:X"``.
EXTRA_PLUGINS_ENV = "DRILL_EXTRA_PLUGINS"


def _extra_entry_points(group: str, spec: str) -> list[EntryPoint]:
    found = []
    for item in filter(None, (part.strip() for part in spec.replace("\n", ";").split(";"))):
        head, _, value = item.partition("=")
        item_group, _, name = head.rpartition(":")
        if not value or not name or not item_group:
            raise PluginError(
                f"{EXTRA_PLUGINS_ENV}: cannot read {item!r}",
                hint="write GROUP:KIND=MODULE:CLASS, e.g. drill.faults:my_fault=my_pkg.faults:MyFault",
            )
        if item_group == group:
            found.append(EntryPoint(name=name, value=value, group=group))
    return found


@cache
def _entry_points_of(group: str, extra: str = "") -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in list(entry_points(group=group)) + _extra_entry_points(group, extra):
        if ep.name in found and found[ep.name].value != ep.value:
            raise PluginError(
                f"two {group} plugins claim kind {ep.name!r}: {found[ep.name].value} and {ep.value}",
                hint="uninstall one of the packages",
            )
        found[ep.name] = ep
    return found


#: Kinds the project plans but has not built yet, with the part that will provide them. A drill that
#: names one is refused before anything starts, with this explanation instead of "unknown kind".
PLANNED: dict[str, dict[str, str]] = {
    "drill.checks": {},
    "drill.faults": {},
}


def planned(group: str, kind: str) -> str | None:
    """What will provide ``kind`` if it is planned but not installed; None otherwise."""
    return PLANNED.get(group, {}).get(kind)


faults: Registry = Registry("drill.faults", "fault")
targets: Registry = Registry("drill.targets", "target")
checks: Registry = Registry("drill.checks", "check")
traces: Registry = Registry("drill.traces", "trace source")
