"""``drill stack up|status|down``: the embedded reference serving stack from the command line.

``up`` starts router, replicas, TP/PP ranks and Toxiproxy (local processes, or one container per
replica with ``--runtime docker``), prints the endpoints and writes them to the state file;
``status`` prints them (``--json`` for programs); ``down`` stops everything, idempotently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from drill.cli.common import console, handle_errors, parse_duration_option, say

if TYPE_CHECKING:
    from drill.stack.supervision.state import StackState

__all__ = ["stack"]

_NAME = click.option("--name", default="default", show_default=True, help="Which stack (several may run at once).")
_STATE_DIR = click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where state files live (default: $DRILL_STATE_DIR or ~/.local/state/llm-drill).",
)


@click.group()
def stack() -> None:
    """Start, inspect and stop the embedded reference serving stack."""


@stack.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Stack YAML (stack-contracts.md §1); the defaults without it.",
)
@click.option(
    "--runtime",
    type=click.Choice(["local", "docker"]),
    default=None,
    help="Override the config's runtime: local processes or one Docker container per replica.",
)
@click.option(
    "--otlp-endpoint", default=None, help="Send the stack's traces here (OTLP/HTTP, e.g. http://127.0.0.1:4318)."
)
@click.option(
    "--timeout",
    "timeout_s",
    default="120s",
    show_default=True,
    callback=parse_duration_option,
    help="How long to wait for every part to answer.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON instead of a table.")
@_NAME
@_STATE_DIR
def up(
    config_path: Path | None,
    runtime: str | None,
    otlp_endpoint: str | None,
    timeout_s: float,
    as_json: bool,
    name: str,
    state_dir: Path | None,
) -> None:
    """Start a stack and print its endpoints."""
    with handle_errors():
        from drill.stack.config import StackConfig, load_stack_config
        from drill.stack.supervision.launcher import start_stack

        config = load_stack_config(config_path) if config_path else StackConfig()
        if not as_json:
            say(
                "starting stack ",
                (name, "bold"),
                f": {config.replicas} replica(s) of {config.model} on {config.gpu}, "
                f"tp={config.engine.tensor_parallel_size} pp={config.engine.pipeline_parallel_size} ...",
            )
        state = start_stack(
            config, name=name, runtime=runtime, otlp_endpoint=otlp_endpoint, state_dir=state_dir, timeout_s=timeout_s
        )
        _show(state, as_json, running=True)


@stack.command()
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON (router, replicas with URLs).")
@_NAME
@_STATE_DIR
def status(as_json: bool, name: str, state_dir: Path | None) -> None:
    """Show a stack's endpoints; exit 1 when it is not running."""
    with handle_errors():
        from drill.stack.supervision.launcher import read_state, supervisor_alive

        state = read_state(name, state_dir)
        if state is None:
            if as_json:
                click.echo(json.dumps({"name": name, "running": False}))
            else:
                console.print(f"no stack named {name!r} is running (start one with `drill stack up`)")
            raise SystemExit(1)
        running = supervisor_alive(state)
        _show(state, as_json, running=running)
        if not running:
            raise SystemExit(1)


@stack.command()
@click.option(
    "--timeout",
    "timeout_s",
    default="30s",
    show_default=True,
    callback=parse_duration_option,
    help="How long to wait for a graceful stop before killing.",
)
@_NAME
@_STATE_DIR
def down(timeout_s: float, name: str, state_dir: Path | None) -> None:
    """Stop a stack: no process, container or proxy of it is left. Safe to repeat."""
    with handle_errors():
        from drill.stack.supervision.launcher import stop_stack

        stopped = stop_stack(name, state_dir=state_dir, timeout_s=timeout_s)
        console.print(f"stack {name!r} stopped" if stopped else f"stack {name!r} was not running; nothing to stop")


def _show(state: StackState, as_json: bool, *, running: bool) -> None:
    if as_json:
        data = json.loads(state.to_json())
        data["running"] = running
        click.echo(json.dumps(data, indent=2))
        return
    say(
        "stack ",
        (state.name, "bold"),
        f" ({state.runtime.value}, model {state.model}) ",
        "running" if running else ("not running", "red"),
    )
    lines = [
        f"  router      {state.router}    admin {state.router_admin_url}",
        f"  toxiproxy   {state.toxiproxy_url}",
    ]
    for replica in state.replicas:
        where = replica.container or f"pid {replica.pid}"
        lines.append(
            f"  {replica.name:<11} {replica.url}  (direct {replica.direct_url}, {where}, proxy {replica.proxy or '-'})"
        )
        lines.extend(
            f"    {link.kind} rank {link.rank}: {link.listen} -> {link.upstream} (proxy {link.proxy or '-'})"
            for link in replica.links
        )
    lines.append(f"  state file {state.run_dir.parent / (state.name + '.json')} (admin token); logs in {state.run_dir}")
    for line in lines:
        console.print(line, soft_wrap=True)
