"""Safe YAML loading with bounded work that remembers where every key and value was written.

``load_located(text, source)`` returns plain Python data (dicts, lists, scalars,
exactly as ``yaml.safe_load`` would) together with a :class:`Locations` map from
key paths such as ``("faults", 0, "params", "latency_ms")`` to ``line:col``.
Validation uses it to point each problem at the file position a user can open.

Duplicate keys, which ``yaml.safe_load`` silently resolves to the last one, are
reported as errors: a drill file with two ``duration:`` keys is ambiguous.

Hostile input cannot make it work without bound. The parser's events come from
libyaml (PyYAML's wheels include it; 4 MiB parse in tens of milliseconds) or else
PyYAML's own parser. The node tree is composed here from those events, without
recursion, and composing stops with a located error, before anything is
constructed, when the document nests deeper than :data:`MAX_DEPTH`, uses more
than :data:`MAX_ALIASES` aliases, or would expand to more than :data:`MAX_NODES`
values once every alias is counted as many times as it is used (an
alias-expansion "billion laughs" file is ten lines long). Numbers that are not
finite (``.inf``, ``.nan``) and integers beyond 64 bits are refused where they
are written.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from drill.spec.diagnostics import Diagnostic, KeyPath, Position

__all__ = ["Locations", "LocatedDocument", "load_located", "MAX_ALIASES", "MAX_DEPTH", "MAX_NODES"]

#: Deepest nesting of lists and mappings (after expanding aliases); drill files need fewer than 10.
MAX_DEPTH = 64
#: Most values (scalars, lists, mappings, keys) a document may expand to, aliases counted each time used.
MAX_NODES = 20_000
#: Most aliases (``*name``) one document may use.
MAX_ALIASES = 1_000
#: Largest integer magnitude accepted: what a 64-bit signed integer holds.
MAX_INT = 2**63 - 1

_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's event parser when installed


@dataclass
class Locations:
    """Positions of the values (and of the keys) at each key path of a document."""

    source: str
    values: dict[KeyPath, Position] = field(default_factory=dict)
    keys: dict[KeyPath, Position] = field(default_factory=dict)

    def position_of(self, path: KeyPath, *, key: bool = False) -> Position:
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


@dataclass
class LocatedDocument:
    data: object
    locations: Locations
    diagnostics: list[Diagnostic]


class _Problem(Exception):
    """Composing stopped: a located problem in the text."""

    def __init__(self, where: Position, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.diagnostic = Diagnostic(where, (), message, hint=hint)


def load_located(text: str, source: str) -> LocatedDocument:
    """Parse one YAML document; problems go to ``diagnostics``, never raise."""
    locations = Locations(source)
    try:
        node = _compose(text, source)
    except _Problem as problem:
        return LocatedDocument(None, locations, [problem.diagnostic])
    diagnostics: list[Diagnostic] = []
    if node is None:
        return LocatedDocument(None, locations, diagnostics)
    data = _Builder(locations, diagnostics).build(node, (), 0)
    return LocatedDocument(data, locations, diagnostics)


def _compose(text: str, source: str) -> Node | None:
    bad = yaml.reader.Reader.NON_PRINTABLE.search(text)
    if bad:
        raise _Problem(
            _offset_position(text, bad.start(), source),
            f"character {bad.group()!r} is not allowed in YAML",
            hint="remove control characters; the file must be plain UTF-8 text",
        )
    parser = _Parser(text)
    try:
        return _Composer(parser, source).document()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Position(source, mark.line + 1, mark.column + 1) if mark else Position(source, 1, 1)
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise _Problem(
            where,
            f"YAML syntax error: {problem or exc}",
            hint="check indentation, colons and quotes around this position",
        ) from None
    except yaml.reader.ReaderError as exc:
        raise _Problem(Position(source, 1, 1), f"YAML error: {exc}") from None
    finally:
        parser.dispose()


#: What YAML counts as a line break (the parser's marks count lines the same way).
_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")


def _offset_position(text: str, offset: int, source: str) -> Position:
    breaks = list(_LINE_BREAK.finditer(text, 0, offset))
    start = breaks[-1].end() if breaks else 0
    return Position(source, len(breaks) + 1, offset - start + 1)


@dataclass
class _Open:
    """A list or mapping being composed: its node, anchor, expanded size and height so far."""

    node: SequenceNode | MappingNode
    anchor: str | None
    size: int = 1
    height: int = 1
    key: Node | None = None


@dataclass(frozen=True)
class _Anchored:
    node: Node
    size: int
    height: int


class _Composer:
    """Builds the node tree from parser events with a stack (no recursion), within the limits."""

    def __init__(self, parser: yaml.SafeLoader, source: str) -> None:
        self.parser = parser
        self.source = source
        self.resolver = yaml.resolver.Resolver()
        self.anchors: dict[str, _Anchored] = {}
        self.open_anchors: set[str] = set()
        self.expanded = 0
        self.aliases = 0

    def where(self, event: Event) -> Position:
        mark = event.start_mark
        return Position(self.source, mark.line + 1, mark.column + 1)

    def document(self) -> Node | None:
        self.expect(StreamStartEvent)
        if isinstance(self.parser.peek_event(), StreamEndEvent):
            return None
        self.expect(DocumentStartEvent)
        root = self.root()
        self.expect(DocumentEndEvent)
        event = self.parser.get_event()
        if not isinstance(event, StreamEndEvent):
            raise _Problem(
                self.where(event),
                "a second YAML document ('---') follows the first",
                hint="a file holds one document; remove the '---' and what follows, or merge them",
            )
        return root

    def expect(self, kind: type) -> None:
        event = self.parser.get_event()
        if not isinstance(event, kind):
            raise _Problem(self.where(event), f"unexpected YAML event {type(event).__name__}")

    def root(self) -> Node:
        stack: list[_Open] = []
        while True:
            event = self.parser.get_event()
            if isinstance(event, (SequenceStartEvent, MappingStartEvent)):
                stack.append(self.open(event, len(stack)))
                continue
            if isinstance(event, (SequenceEndEvent, MappingEndEvent)):
                done = self.close(stack.pop(), event)
            elif isinstance(event, AliasEvent):
                done = self.alias(event, len(stack))
            elif isinstance(event, ScalarEvent):
                done = self.scalar(event)
            else:
                raise _Problem(self.where(event), f"unexpected YAML event {type(event).__name__}")
            if not stack:
                return done.node
            self.attach(stack[-1], done)

    def count(self, event: Event, size: int) -> None:
        self.expanded += size
        if self.expanded > MAX_NODES:
            raise _Problem(
                self.where(event),
                f"the document expands to more than {MAX_NODES} values "
                "(each alias counts as many values as its anchor holds, every time it is used)",
                hint="drill, scenario and stack files need a few hundred values; "
                "remove aliases that repeat large parts",
            )

    def open(self, event: Event, depth: int) -> _Open:
        if depth + 1 > MAX_DEPTH:
            raise _Problem(
                self.where(event),
                f"lists and mappings nest deeper than {MAX_DEPTH} levels",
                hint="drill, scenario and stack files nest a few levels; check for an unclosed '[' or '{'",
            )
        self.check_anchor(event)
        self.count(event, 1)
        tag = self.tag(event, SequenceNode if isinstance(event, SequenceStartEvent) else MappingNode)
        if isinstance(event, SequenceStartEvent):
            node = SequenceNode(tag, [], event.start_mark, None, flow_style=event.flow_style)
        else:
            node = MappingNode(tag, [], event.start_mark, None, flow_style=event.flow_style)
        if event.anchor is not None:
            self.open_anchors.add(event.anchor)
        return _Open(node, event.anchor)

    def close(self, item: _Open, event: Event) -> _Anchored:
        item.node.end_mark = event.end_mark
        done = _Anchored(item.node, item.size, item.height)
        if item.anchor is not None:
            self.open_anchors.discard(item.anchor)
            self.anchors[item.anchor] = done
        return done

    def scalar(self, event: ScalarEvent) -> _Anchored:
        self.check_anchor(event)
        self.count(event, 1)
        node = ScalarNode(
            self.tag(event, ScalarNode, event.value), event.value, event.start_mark, event.end_mark, style=event.style
        )
        done = _Anchored(node, 1, 0)
        if event.anchor is not None:
            self.anchors[event.anchor] = done
        return done

    def alias(self, event: AliasEvent, depth: int) -> _Anchored:
        name = event.anchor
        if name in self.open_anchors:
            raise _Problem(
                self.where(event),
                f"alias *{name} is used inside the value it names (a recursive structure)",
                hint="an alias may only repeat a value that is complete",
            )
        found = self.anchors.get(name)
        if found is None:
            raise _Problem(
                self.where(event),
                f"alias *{name} names no anchor written before it",
                hint=f"write '&{name}' on the value to repeat, above this line",
            )
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            raise _Problem(self.where(event), f"the document uses more than {MAX_ALIASES} aliases")
        if depth + found.height > MAX_DEPTH:
            raise _Problem(
                self.where(event), f"alias *{name} makes lists and mappings nest deeper than {MAX_DEPTH} levels"
            )
        self.count(event, found.size)
        return found

    def attach(self, parent: _Open, child: _Anchored) -> None:
        parent.size += child.size
        parent.height = max(parent.height, child.height + 1)
        if isinstance(parent.node, SequenceNode):
            parent.node.value.append(child.node)
        elif parent.key is None:
            parent.key = child.node
        else:
            parent.node.value.append((parent.key, child.node))
            parent.key = None

    def check_anchor(self, event: Event) -> None:
        name = event.anchor
        if name is not None and (name in self.anchors or name in self.open_anchors):
            raise _Problem(self.where(event), f"anchor &{name} is defined twice", hint="give each anchor its own name")

    def tag(self, event: Event, kind: type, value: str | None = None) -> str:
        if event.tag is not None and event.tag != "!":
            return event.tag
        return self.resolver.resolve(kind, value, event.implicit)


class _Builder:
    """Turns a composed node tree into Python data, recording positions."""

    def __init__(self, locations: Locations, diagnostics: list[Diagnostic]):
        self.constructor = yaml.constructor.SafeConstructor()
        self.locations = locations
        self.diagnostics = diagnostics
        self.source = locations.source

    def position(self, node: Node) -> Position:
        mark = node.start_mark
        return Position(self.source, mark.line + 1, mark.column + 1)

    def build(self, node: Node, path: KeyPath, depth: int) -> object:
        self.locations.values[path] = self.position(node)
        if depth > MAX_DEPTH:  # the composer already refused it; kept so building can never recurse unbounded
            self.error(node, path, f"nesting deeper than {MAX_DEPTH} levels")
            return None
        if isinstance(node, MappingNode):
            return self.build_mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        return self.build_scalar(node, path)

    def build_scalar(self, node: Node, path: KeyPath) -> object:
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.error(node, path, f"cannot read value: {getattr(exc, 'problem', None) or exc}")
            return None
        except (ValueError, OverflowError) as exc:  # e.g. an integer with more digits than Python converts
            self.error(node, path, f"cannot read value {_clip(node.value)!r}: {exc}")
            return None
        return self.checked_number(node, path, value)

    def checked_number(self, node: Node, path: KeyPath, value: object) -> object:
        """Refuse non-finite and oversized numbers; the value is kept, so validation adds no second error there."""
        if isinstance(value, float) and not math.isfinite(value):
            self.error(
                node,
                path,
                f"{_clip(node.value)!r} is not a finite number",
                hint="write a finite number; infinity and NaN mean nothing as a rate, duration or threshold",
            )
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            self.error(node, path, f"integer {_clip(node.value)!r} is larger than a 64-bit integer holds")
        return value

    def build_mapping(self, node: MappingNode, path: KeyPath, depth: int) -> dict:
        try:
            self.constructor.flatten_mapping(node)
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
                self.error(
                    key_node,
                    child,
                    f"duplicate key {key!r}{where}",
                    hint="remove one of them; YAML would silently keep only the last",
                )
                continue
            self.locations.keys[child] = self.position(key_node)
            result[key] = self.build(value_node, child, depth + 1)
        return result

    def build_key(self, key_node: Node, path: KeyPath) -> str | None:
        """Keys are names: their text is taken as written, so ``on:`` stays "on", not True."""
        if not isinstance(key_node, ScalarNode):
            self.error(key_node, path, "a mapping key must be a plain name, not a list or mapping")
            return None
        return str(key_node.value)

    def error(self, node: Node, path: KeyPath, message: str, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(self.position(node), path, message, hint=hint))


def _clip(text: object, limit: int = 40) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
