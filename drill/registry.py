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
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from pydantic import BaseModel

from drill.errors import PluginError, UnknownPluginError
from drill.spec.diagnostics import did_you_mean

__all__ = ["GROUPS", "Registry", "checks", "faults", "targets", "traces"]

T = TypeVar("T")

GROUPS = ("drill.faults", "drill.targets", "drill.checks", "drill.traces")

#: What each group's plugins must have: (class attributes, methods).
_REQUIREMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "drill.faults": (("kind", "Params"), ("inject", "verify", "revert")),
    "drill.targets": (("kind", "Params"), ("start", "stop")),
    "drill.checks": (("kind", "Params"), ("evaluate",)),
    "drill.traces": (("kind",), ()),
}


@dataclass(frozen=True)
class PluginInfo:
    kind: str
    value: str          # "module:attr" of the entry point
    distribution: str


class Registry(Generic[T]):
    """Plugins of one entry-point group, by ``kind``."""

    def __init__(self, group: str, label: str) -> None:
        self.group = group
        self.label = label
        self._loaded: dict[str, type[T]] = {}

    def _entry_points(self) -> dict[str, EntryPoint]:
        return _entry_points_of(self.group)

    def kinds(self) -> list[str]:
        return sorted(self._entry_points())

    def info(self, kind: str) -> PluginInfo:
        ep = self._entry_points()[kind]
        dist = ep.dist.name if ep.dist is not None else "?"
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


def _verify(group: str, label: str, ep: EntryPoint, plugin: object) -> None:
    attrs, methods = _REQUIREMENTS[group]
    where = f"{label} plugin {ep.name!r}\ndefinition: {ep.value}"
    if not inspect.isclass(plugin):
        raise PluginError(f"{where}\nthe entry point must name a class, found {type(plugin).__name__}")
    missing = [a for a in attrs if not hasattr(plugin, a)] + [m for m in methods if not callable(getattr(plugin, m, None))]
    if missing:
        raise PluginError(f"{where}\nmissing: {', '.join(missing)}")
    if getattr(plugin, "kind") != ep.name:
        raise PluginError(f"{where}\nits kind is {plugin.kind!r} but the entry point names it {ep.name!r}")
    params = getattr(plugin, "Params", None)
    if params is not None and not (inspect.isclass(params) and issubclass(params, BaseModel)):
        raise PluginError(f"{where}\nParams must be a pydantic model class")
    if inspect.isabstract(plugin):
        abstract = ", ".join(sorted(getattr(plugin, "__abstractmethods__", ())))
        raise PluginError(f"{where}\nabstract methods not implemented: {abstract}")


@lru_cache(maxsize=None)
def _entry_points_of(group: str) -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        if ep.name in found and found[ep.name].value != ep.value:
            raise PluginError(
                f"two {group} plugins claim kind {ep.name!r}: {found[ep.name].value} and {ep.value}",
                hint="uninstall one of the packages",
            )
        found[ep.name] = ep
    return found


faults: Registry = Registry("drill.faults", "fault")
targets: Registry = Registry("drill.targets", "target")
checks: Registry = Registry("drill.checks", "check")
traces: Registry = Registry("drill.traces", "trace source")
