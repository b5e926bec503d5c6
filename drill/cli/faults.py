"""``drill faults list|describe`` — the fault catalogue; ``drill fault inject`` — one fault by hand.

``drill fault inject KIND --target stack[:NAME] --for 30s`` is for game days: the fault is
journaled and reverted exactly like a drill's (the engine's journal, revert stack and watchdog),
in a run directory ``reports/manual/<run id>/`` registered as an active run, so ``drill cleanup``
finds it if this process dies. It holds the fault for ``--for`` (mandatory: the watchdog's lease
is its end), then reverts; Ctrl-C or SIGTERM revert at once. Exit codes: 0 the fault landed and
was reverted, 1 it did not land (verify found no proof), 2 bad input, 4 a revert failed, 130
interrupted (reverted).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from drill.cli.common import console, err_console, handle_errors, parse_duration_option

__all__ = ["fault", "faults"]


@click.group("faults")
def faults() -> None:
    """The fault library: list and describe fault kinds."""


@faults.command("list")
def list_faults() -> None:
    """One line per installed fault kind: its summary and how real each of its methods is."""
    from drill import registry
    from drill.cli.describe import realism_summary

    with handle_errors():
        for fault_cls in registry.faults.all():
            console.print(f"{fault_cls.kind:<20} {fault_cls.summary}", markup=False, soft_wrap=True)
            console.print(f"{'':<20} realism: {realism_summary(fault_cls)}", markup=False, soft_wrap=True)


@faults.command("describe")
@click.argument("kind")
def describe(kind: str) -> None:
    """Params with units and defaults, capabilities, revert semantics, realism, a YAML example."""
    from drill import registry
    from drill.cli.describe import describe_fault

    with handle_errors():
        console.print(describe_fault(registry.faults.get(kind)), markup=False, soft_wrap=True)


@click.group("fault")
def fault() -> None:
    """Manual fault control during a game day (journaled and reverted like any drill fault)."""


@fault.command("inject")
@click.argument("kind")
@click.option(
    "--target",
    "target_spec",
    required=True,
    metavar="stack[:NAME] | FILE.yaml",
    help="A stack started by `drill stack up` (name: default), or the target: section of a drill file.",
)
@click.option(
    "--param", "params", multiple=True, metavar="KEY=VALUE", help="A fault param (value read as YAML; repeatable)."
)
@click.option(
    "--selector",
    "selectors",
    multiple=True,
    metavar="KEY=VALUE",
    help="Which replicas/links: replicas=[0], fraction=0.5, count=1, random=true, seed=7, links=[tp] (repeatable).",
)
@click.option(
    "--for",
    "hold_s",
    required=True,
    callback=parse_duration_option,
    metavar="DURATION",
    help="How long the fault stays (e.g. 30s); the watchdog reverts it if this process dies.",
)
@click.option("--name", "fault_id", default=None, help="The fault's id in the journal (default: KIND).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="reports",
    show_default=True,
    help="Base directory: the run goes to OUT/manual/<run id>/.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where `drill stack up` keeps state (default: $DRILL_STATE_DIR or ~/.local/state/llm-drill).",
)
@click.option("--allow-host", "allow_hosts", multiple=True, help="Allow a non-loopback host (repeatable).")
def inject(
    kind: str,
    target_spec: str,
    params: tuple[str, ...],
    selectors: tuple[str, ...],
    hold_s: float,
    fault_id: str | None,
    out_dir: str,
    state_dir: Path | None,
    allow_hosts: tuple[str, ...],
) -> None:
    """Inject KIND now, prove it landed, hold it for --for, then revert it (Ctrl-C reverts at once)."""
    from drill.runner.manual import hold_fault

    with handle_errors() as crash:
        if hold_s <= 0:
            raise click.BadParameter("must be a positive duration", param_hint="--for")
        outcome = hold_fault(
            kind,
            target_spec,
            params,
            selectors,
            hold_s=hold_s,
            out_dir=Path(out_dir),
            fault_id=fault_id,
            state_dir=state_dir,
            allow_hosts=allow_hosts,
            say=_say,
            argv=tuple(sys.argv),
            opened=lambda run_dir: setattr(crash, "run_dir", run_dir),
        )
    sys.exit(outcome.exit_code)


def _say(line: str, *, error: bool = False) -> None:
    (err_console if error else console).print(line, markup=False, soft_wrap=True, highlight=False)
