"""``drill faults list|describe`` — the fault catalogue, generated from the installed plugins."""

from __future__ import annotations

import click

from drill.cli.common import console, handle_errors


@click.group("faults")
def faults() -> None:
    """The fault library: list and describe fault kinds."""


@faults.command("list")
def list_faults() -> None:
    """One line per installed fault kind, with its realism."""
    from drill import registry

    with handle_errors():
        for fault_cls in registry.faults.all():
            console.print(f"{fault_cls.kind:<20} {fault_cls.realism.value:<34} {fault_cls.summary}", markup=False)


@faults.command("describe")
@click.argument("kind")
def describe(kind: str) -> None:
    """Params with units and defaults, capabilities, revert semantics, realism."""
    from drill import registry
    from drill.cli.describe import describe_fault

    with handle_errors():
        console.print(describe_fault(registry.faults.get(kind)), markup=False)


@click.group("fault")
def fault() -> None:
    """Manual fault control during a game day (journaled and reverted like any drill fault)."""
