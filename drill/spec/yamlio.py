"""Safe YAML loading that remembers where every key and value was written.

``load_located(text, source)`` returns plain Python data (dicts, lists, scalars,
exactly as ``yaml.safe_load`` would) together with a :class:`Locations` map from
key paths such as ``("faults", 0, "params", "latency_ms")`` to ``line:col``.
Validation uses it to point each problem at the file position a user can open.

Duplicate keys, which ``yaml.safe_load`` silently resolves to the last one, are
reported as errors: a drill file with two ``duration:`` keys is ambiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from drill.spec.diagnostics import Diagnostic, KeyPath, Position

__all__ = ["Locations", "LocatedDocument", "load_located"]

_MAX_DEPTH = 64


@dataclass
class Locations:
    """Positions of the values (and of the keys) at each key path of a document."""

    source: str
    values: dict[KeyPath, Position] = field(default_factory=dict)
    keys: dict[KeyPath, Position] = field(default_factory=dict)

    def of(self, path: KeyPath, *, key: bool = False) -> Position:
        """Position of ``path``; falls back to the nearest ancestor that has one."""
        table = self.keys if key else self.values
        probe = tuple(path)
        while probe:
            if probe in table:
                return table[probe]
            if not key and probe in self.keys:
                return self.keys[probe]
            probe = probe[:-1]
        return self.values.get((), Position(self.source, 1, 1))

    def rebased(self, prefix: KeyPath, other: "Locations") -> None:
        """Merge ``other`` (a nested document, e.g. a scenario file) under ``prefix``."""
        for path, pos in other.values.items():
            self.values[prefix + path] = pos
        for path, pos in other.keys.items():
            self.keys[prefix + path] = pos


@dataclass
class LocatedDocument:
    data: object
    locations: Locations
    diagnostics: list[Diagnostic]


def load_located(text: str, source: str) -> LocatedDocument:
    """Parse one YAML document; problems go to ``diagnostics``, never raise."""
    locations = Locations(source)
    diagnostics: list[Diagnostic] = []
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        diagnostics.append(Diagnostic(_offset_position(text, exc.position, source), (),
                                      f"character {exc.character!r} is not allowed in YAML",
                                      hint="remove control characters; the file must be plain UTF-8 text"))
        return LocatedDocument(None, locations, diagnostics)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Position(source, mark.line + 1, mark.column + 1) if mark else Position(source, 1, 1)
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        diagnostics.append(Diagnostic(where, (), f"YAML syntax error: {problem or exc}",
                                      hint="check indentation, colons and quotes around this position"))
        return LocatedDocument(None, locations, diagnostics)
    except yaml.YAMLError as exc:
        diagnostics.append(Diagnostic(Position(source, 1, 1), (), f"YAML error: {exc}"))
        return LocatedDocument(None, locations, diagnostics)
    finally:
        loader.dispose()
    if node is None:
        return LocatedDocument(None, locations, diagnostics)
    builder = _Builder(loader, locations, diagnostics)
    data = builder.build(node, (), 0)
    return LocatedDocument(data, locations, diagnostics)


def _offset_position(text: str, offset: int, source: str) -> Position:
    before = text[:offset]
    line = before.count("\n") + 1
    return Position(source, line, offset - (before.rfind("\n") + 1) + 1)


class _Builder:
    """Turns a composed node tree into Python data, recording positions."""

    def __init__(self, loader: yaml.SafeLoader, locations: Locations, diagnostics: list[Diagnostic]):
        self.loader = loader
        self.locations = locations
        self.diagnostics = diagnostics
        self.source = locations.source

    def position(self, node: yaml.Node) -> Position:
        mark = node.start_mark
        return Position(self.source, mark.line + 1, mark.column + 1)

    def build(self, node: yaml.Node, path: KeyPath, depth: int) -> object:
        self.locations.values[path] = self.position(node)
        if depth > _MAX_DEPTH:
            self.error(node, path, f"nesting deeper than {_MAX_DEPTH} levels (a recursive alias?)")
            return None
        if isinstance(node, yaml.MappingNode):
            return self.build_mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        return self.build_scalar(node, path)

    def build_scalar(self, node: yaml.Node, path: KeyPath) -> object:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.error(node, path, f"cannot read value: {getattr(exc, 'problem', None) or exc}")
            return None

    def build_mapping(self, node: yaml.MappingNode, path: KeyPath, depth: int) -> dict:
        try:
            self.loader.flatten_mapping(node)
        except yaml.YAMLError as exc:
            self.error(node, path, f"invalid merge key: {getattr(exc, 'problem', None) or exc}")
        result: dict = {}
        for key_node, value_node in node.value:
            key = self.build_key(key_node, path)
            if key is None:
                continue
            child = path + (key,)
            if key in result:
                first = self.locations.keys.get(child)
                where = f" (first written at line {first.line})" if first else ""
                self.error(key_node, child, f"duplicate key {key!r}{where}",
                           hint="remove one of them; YAML would silently keep only the last")
                continue
            self.locations.keys[child] = self.position(key_node)
            result[key] = self.build(value_node, child, depth + 1)
        return result

    def build_key(self, key_node: yaml.Node, path: KeyPath) -> str | None:
        """Keys are names: their text is taken as written, so ``on:`` stays "on", not True."""
        if not isinstance(key_node, yaml.ScalarNode):
            self.error(key_node, path, "a mapping key must be a plain name, not a list or mapping")
            return None
        return str(key_node.value)

    def error(self, node: yaml.Node, path: KeyPath, message: str, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(self.position(node), path, message, hint=hint))
