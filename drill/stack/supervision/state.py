"""The state file of a running stack: ``<state_dir>/stack/<name>.json`` (stack-contracts.md §9).

Written by the launcher once the stack answers, read by ``drill stack status``, by ``drill stack
down`` and by the harness when a drill targets the embedded stack. ``state_dir`` defaults to
``$DRILL_STATE_DIR``, else ``~/.local/state/llm-drill``. Writes are atomic (write, then rename).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drill.errors import InputError, StackError
from drill.stack.config import Runtime

__all__ = [
    "LinkState",
    "ReplicaEntry",
    "STATE_SCHEMA",
    "StackState",
    "read_state",
    "remove_state",
    "resolve_state_dir",
    "run_dir",
    "state_path",
    "validate_name",
    "write_state",
]

STATE_SCHEMA = "llm-drill/stack-state/v1"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,40}$")
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class LinkState(BaseModel):
    """One TP/PP link: rank 0 (or stage ``rank-1``) dials ``listen``, which forwards to ``upstream``."""

    model_config = _FROZEN

    name: str
    kind: str  # "tp" | "pp" | "kv"
    rank: int
    proxy: str | None  # Toxiproxy proxy name, None when links of this kind are not proxied
    listen: str  # host:port the upstream peer dials (the proxy, or the rank itself)
    upstream: str  # host:port the rank/stage process listens on


class ReplicaEntry(BaseModel):
    """One replica. ``url`` is how the router reaches it (through its proxy when there is one),
    ``direct_url`` its own socket, ``admin_url`` where its admin API answers (direct)."""

    model_config = _FROZEN

    name: str
    index: int
    url: str
    direct_url: str
    admin_url: str
    pid: int | None = None
    pid_file: Path
    container: str | None = None
    proxy: str | None = None
    links: tuple[LinkState, ...] = ()
    ledger_path: Path
    log_path: Path
    role: Literal["prefill", "decode"] | None = None  # a P/D worker's role (a pod's llm-d.ai/role label)


class StackState(BaseModel):
    """Everything a client of the stack needs: endpoints, tokens, processes, proxies."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_: str = Field(STATE_SCHEMA, alias="schema")
    name: str
    runtime: Runtime
    model: str
    router: str
    router_admin_url: str
    admin_token: str
    toxiproxy_url: str
    toxiproxy_owned: bool
    supervisor_pid: int | None = None
    otlp_endpoint: str | None = None
    replicas: tuple[ReplicaEntry, ...]
    run_dir: Path
    created_at: float

    def to_json(self) -> str:
        """The state file's text."""
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2)

    @classmethod
    def from_json(cls, text: str) -> StackState:
        """Parse a state file's text; raises ValueError when it is not a valid state."""
        return cls.model_validate_json(text)


def validate_name(name: str) -> str:
    """Check a stack name (it becomes file, proxy and container names); returns it."""
    if not _NAME.match(name):
        raise InputError(
            f"invalid stack name {name!r}", hint="use 1-41 characters: lower-case letters, digits, '-', '_', '.'"
        )
    return name


def resolve_state_dir(state_dir: Path | None = None) -> Path:
    """``state_dir``, else ``$DRILL_STATE_DIR``, else ``~/.local/state/llm-drill``."""
    if state_dir is not None:
        return Path(state_dir)
    env = os.environ.get("DRILL_STATE_DIR")
    return Path(env) if env else Path.home() / ".local" / "state" / "llm-drill"


def state_path(name: str, state_dir: Path | None = None) -> Path:
    """Where the state file of stack ``name`` lives."""
    return resolve_state_dir(state_dir) / "stack" / f"{validate_name(name)}.json"


def run_dir(name: str, state_dir: Path | None = None) -> Path:
    """The directory of a stack's launches, logs, ledgers and pid files."""
    return resolve_state_dir(state_dir) / "stack" / validate_name(name)


def write_state(state: StackState, state_dir: Path | None = None) -> Path:
    """Write the state file atomically; returns its path."""
    path = state_path(state.name, state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(state.to_json(), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_state(name: str = "default", state_dir: Path | None = None) -> StackState | None:
    """The state of stack ``name``, or None when no state file exists.

    Raises StackError when the file exists but cannot be parsed (with the path to remove).
    """
    path = state_path(name, state_dir)
    try:
        return StackState.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, ValidationError) as exc:
        raise StackError(
            f"the state file {path} is damaged: {exc}",
            hint=f"run `drill stack down --name {name}` (it cleans up by label) or delete it",
        ) from exc


def remove_state(name: str, state_dir: Path | None = None) -> bool:
    """Delete the state file; returns False when there was none."""
    try:
        state_path(name, state_dir).unlink()
    except FileNotFoundError:
        return False
    return True
