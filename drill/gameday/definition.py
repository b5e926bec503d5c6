"""Game-day files (``gamedays/*.yaml``): a named list of drills run in order, read like every other input file.

``load_gameday(path)`` validates the game day itself (:class:`GameDay`, located ``file:line:col`` problems with
did-you-mean hints), then loads every drill it names with its ``set`` overrides and time scale through
:func:`drill.spec.loader.load_drill` — so a game day whose fifth drill has a typo is refused before the first
drill starts. Every problem, in the game-day file and in the drill files, is raised together as one
:class:`~drill.errors.SpecError` (exit 2, nothing started).

A drill is named by a path (relative to the game-day file, then to the working directory) or by its catalogue
name (``unbounded-queue``, looked up as ``drill run`` looks it up). ``--set`` problems of a drill are located at
the ``set:`` item of the game-day file that wrote them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from drill.errors import SpecError, UnsafeTargetError, did_you_mean
from drill.runner.safety import check_hosts
from drill.spec.diagnostics import Diagnostic, KeyPath, Position, format_path
from drill.spec.listing import catalogue_drills
from drill.spec.loader import (
    LoadedDrill,
    _apply_overrides,
    _Collector,
    load_drill,
    read_input_file,
    resolve_drill_path,
)
from drill.spec.overrides import parse_override
from drill.spec.validation import SpecModel, validate_model
from drill.spec.yamlio import Locations, load_located
from drill.units import Duration

__all__ = ["AbortRule", "GameDay", "GameDayDrill", "LoadedGameDay", "PlannedDrill", "find_drill_file", "load_gameday"]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class AbortRule(SpecModel):
    """When a game day stops before its last drill.

    - ``on_revert_failure`` (true, always): a drill that exits 4 (a revert failed: the target may still be
      faulted) stops the game day at once; the next drill would run against a faulted target.
    - ``on_first_fail`` (false): also stop after the first drill that does not pass (exit 1: a FAIL,
      INCONCLUSIVE or ERROR verdict; or a drill that could not run).
    """

    on_revert_failure: bool = True
    on_first_fail: bool = False

    @field_validator("on_revert_failure")
    @classmethod
    def _always_on(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "a drill whose revert failed always stops the game day (the target may still be "
                "faulted); remove the key or write true"
            )
        return value


class GameDayDrill(SpecModel):
    """One drill of the game day.

    - ``drill``: a drill file (relative to the game-day file, or to the working directory) or a catalogue name.
    - ``name``: the label in the index and the trend view (default: the drill's own ``name``); two entries that
      run the same drill need one each.
    - ``set``: ``KEY=VALUE`` overrides of the drill's fields, as ``drill run --set`` takes them.
    - ``time_scale`` (1.0): multiplies the drill's timeline, times the game day's and ``--time-scale``.
    """

    drill: str = Field(min_length=1)
    name: str | None = Field(None, pattern=_NAME, max_length=100)
    overrides: list[str] = Field(default_factory=list, alias="set")
    time_scale: float = Field(1.0, gt=0)


class GameDay(SpecModel):
    """A game-day file: ``name``, ``drills``, and how they run (``cooldown``, ``abort``, ``time_scale``, ``set``)."""

    schema_: Literal["drill/gameday/v1"] = Field("drill/gameday/v1", alias="schema")
    name: str = Field(pattern=_NAME, max_length=100)  # a folder name under <reports>/gamedays/
    title: str | None = None
    owner: str | None = None
    cooldown: Duration = Field(30.0, ge=0)
    time_scale: float = Field(1.0, gt=0)
    overrides: list[str] = Field(default_factory=list, alias="set")  # applied to every drill, before its own
    abort: AbortRule = AbortRule()
    drills: list[GameDayDrill] = Field(min_length=1)


@dataclass(frozen=True)
class PlannedDrill:
    """A drill of the game day, validated, with everything its ``drill run`` needs."""

    number: int  # 1-based position in the game day
    label: str
    path: Path  # the drill file, absolute
    overrides: tuple[str, ...]  # the game day's ``set`` then the drill's own
    time_scale: float  # effective: --time-scale x game day x drill
    loaded: LoadedDrill


@dataclass(frozen=True)
class LoadedGameDay:
    path: Path
    text: str
    gameday: GameDay
    drills: tuple[PlannedDrill, ...]
    overrides: tuple[str, ...] = ()  # the command line's --set, applied to the game-day file
    time_scale: float = 1.0  # the command line's --time-scale

    @property
    def cooldown_s(self) -> float:
        """The cooldown between drills, scaled by --time-scale like the drills' timelines."""
        return self.gameday.cooldown * self.time_scale


def load_gameday(
    path: str | Path,
    *,
    overrides: tuple[str, ...] | list[str] = (),
    time_scale: float = 1.0,
    allow_hosts: tuple[str, ...] = (),
) -> LoadedGameDay:
    """Validate the game day at ``path`` and every drill it names; raises SpecError listing every problem."""
    path = Path(path)
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise SpecError(
            [
                Diagnostic(
                    Position("<--time-scale>", 1, 1),
                    (),
                    f"--time-scale must be a positive finite number, got {time_scale!r}",
                )
            ]
        )
    text = read_input_file(path, what="game day")
    doc = load_located(text, str(path))
    out = _Collector(doc.locations, list(doc.diagnostics))
    if doc.data is None and not out.diagnostics:
        out.add((), "the file is empty", hint="a game day needs at least 'name' and 'drills'")
    if doc.data is not None and not isinstance(doc.data, dict):
        out.add((), f"expected a mapping of game-day keys at the top level, got {type(doc.data).__name__}")
    if out.diagnostics or not isinstance(doc.data, dict):
        raise SpecError(sorted(out.diagnostics, key=Diagnostic.sort_key))
    data = _apply_overrides(doc.data, tuple(overrides), out)
    gameday, problems = validate_model(GameDay, data, out.locations)
    out.extend(problems)
    planned: list[PlannedDrill] = []
    where = _plan(path, gameday or _readable_part(data, out.locations), time_scale, allow_hosts, out, planned)
    _check_labels(planned, where, out)
    if out.diagnostics or gameday is None:
        raise SpecError(sorted(out.diagnostics, key=Diagnostic.sort_key))
    return LoadedGameDay(path, text, gameday, tuple(planned), tuple(overrides), time_scale)


def _readable_part(data: dict, locations: Locations) -> GameDay:
    """When the game day itself is invalid, the drills that can be read, to check them in the same pass."""
    drills = data.get("drills")
    entries = []
    for item in drills if isinstance(drills, list) else []:
        entry, _ = validate_model(GameDayDrill, item, locations)  # its problems are reported already
        entries.append(entry if entry is not None else GameDayDrill.model_construct(drill=""))
    sets = data.get("set")
    shared = sets if isinstance(sets, list) and all(isinstance(s, str) for s in sets) else []
    return GameDay.model_construct(name="", overrides=shared, drills=entries, time_scale=1.0)


def _plan(
    path: Path,
    gameday: GameDay,
    time_scale: float,
    allow_hosts: tuple[str, ...],
    out: _Collector,
    planned: list[PlannedDrill],
) -> list[KeyPath]:
    """Load each drill; returns the key paths of the planned drills' entries, for locating label clashes."""
    where: list[KeyPath] = []
    for i, entry in enumerate(gameday.drills):
        if not entry.drill:
            continue  # an entry that could not be read: its problems are reported already
        found = find_drill_file(entry.drill, path.parent)
        if found is None:
            _not_found(entry.drill, path.parent, ("drills", i, "drill"), out)
            continue
        sets = (*gameday.overrides, *entry.overrides)
        scale = time_scale * gameday.time_scale * entry.time_scale
        loaded = _load_one(found, sets, scale, gameday, i, allow_hosts, out)
        if loaded is None:
            continue
        label = entry.name or loaded.drill.name
        planned.append(PlannedDrill(i + 1, label, found.resolve(), sets, scale, loaded))
        where.append(("drills", i, "name") if entry.name else ("drills", i, "drill"))
    return where


def _load_one(
    found: Path,
    sets: tuple[str, ...],
    scale: float,
    gameday: GameDay,
    i: int,
    allow_hosts: tuple[str, ...],
    out: _Collector,
) -> LoadedDrill | None:
    try:
        loaded = load_drill(found, overrides=sets, time_scale=scale)
        check_hosts(loaded, allow_hosts)
    except SpecError as exc:
        known = {(d.position, d.message) for d in out.diagnostics}
        for d in (_relocate(d, sets, gameday, i, out.locations) for d in exc.diagnostics):
            if (d.position, d.message) not in known:  # a shared ``set`` problem is the same for every drill
                known.add((d.position, d.message))
                out.diagnostics.append(d)
        return None
    except UnsafeTargetError as exc:
        out.add(("drills", i, "drill"), f"drill {found}: {exc.message}", hint=exc.hint)
        return None
    return loaded


def _relocate(d: Diagnostic, sets: tuple[str, ...], gameday: GameDay, i: int, locations: Locations) -> Diagnostic:
    """A drill's problem that a ``set`` item or the time scale caused, located where the game-day file wrote it."""
    source = d.position.source
    n = d.position.line - 1 if source == "<--set>" else _set_item_for(d.path, sets)
    if n is not None:
        shared = len(gameday.overrides)
        key: KeyPath = ("set", n) if n < shared else ("drills", i, "set", n - shared)
        where = format_path(d.path)
        message = f"{where}: {d.message}" if where and not d.message.startswith("--set") else d.message
        return Diagnostic(locations.position_of(key), key, message, hint=d.hint)
    if source == "<--time-scale>":
        entry_key: KeyPath = ("drills", i, "time_scale")
        key = entry_key if entry_key in locations.values else ("drills", i, "drill")
        return Diagnostic(
            locations.position_of(key), key, f"at time scale {_scale_text(gameday, i)}: {d.message}", hint=d.hint
        )
    return d


def _set_item_for(path: KeyPath, sets: tuple[str, ...]) -> int | None:
    """The last ``set`` item whose key path is (a prefix of) ``path``: the value the problem is in."""
    found = None
    for n, item in enumerate(sets):
        try:
            key, _ = parse_override(item)
        except ValueError:
            continue
        if path and tuple(path[: len(key)]) == tuple(key):
            found = n
    return found


def _scale_text(gameday: GameDay, i: int) -> str:
    return f"{gameday.time_scale * gameday.drills[i].time_scale:g} (before --time-scale)"


def _check_labels(planned: list[PlannedDrill], where: list[KeyPath], out: _Collector) -> None:
    seen: dict[str, int] = {}
    for drill, key in zip(planned, where):
        if drill.label in seen:
            out.add(
                key,
                f"drill {drill.label!r} is already drill {seen[drill.label]} of this game day",
                hint="give one of them a 'name:' of its own; the index and the trend view tell them apart by it",
            )
        else:
            seen[drill.label] = drill.number


def find_drill_file(name: str, base: Path) -> Path | None:
    """A drill file next to the game day, then as given (working directory), then by its catalogue name."""
    for candidate in (base / name, Path(name), resolve_drill_path(name)):
        try:
            if candidate.is_file():
                return candidate
        except (OSError, ValueError):
            continue
    return None


def _not_found(name: str, base: Path, key: KeyPath, out: _Collector) -> None:
    beside = base.parent / "drills"
    known = sorted({d.name for d in catalogue_drills(Path.cwd())} | {p.stem for p in beside.glob("*.yaml")})
    suggestion = did_you_mean(Path(name).stem, known)
    hint = (
        f"did you mean '{suggestion}'?"
        if suggestion
        else (f"catalogue drills: {', '.join(known)}" if known else "give a path to a drill file")
    )
    out.add(
        key,
        f"no drill file or catalogue drill named {name!r} (looked next to the game day, in the working "
        "directory, in drills/ and in the packaged catalogue)",
        hint=hint,
    )
