"""Entry point of the ``drill`` command.

Subcommands live one per module and are imported only when used, so
``drill --version`` stays fast and no command pays for another's imports.
"""

from __future__ import annotations

import importlib
import sys

import click

from drill import __version__

# name -> "module:attribute" of a click command or group. Keep sorted.
SUBCOMMANDS: dict[str, str] = {
    "capacity": "drill.cli.capacity:capacity",
    "cleanup": "drill.cli.cleanup:cleanup",
    "compare": "drill.cli.compare:compare",
    "drills": "drill.cli.drills:drills",
    "fault": "drill.cli.faults:fault",
    "faults": "drill.cli.faults:faults",
    "gameday": "drill.cli.gameday:gameday",
    "judge": "drill.cli.judge:judge",
    "kube": "drill.cli.kube:kube",
    "load": "drill.cli.load:load",
    "plan": "drill.cli.plan:plan",
    "report": "drill.cli.report:report",
    "run": "drill.cli.run:run",
    "stack": "drill.cli.stack:stack",
    "supervise": "drill.cli.supervise:supervise",
    "traces": "drill.cli.traces:traces",
    "validate": "drill.cli.validate:validate",
    "worker": "drill.cli.load:worker",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def invoke(self, ctx: click.Context) -> object:
        """Run the subcommand; a usage error's message (which quotes what was typed) is shown as literal text, and
        a Ctrl-C that no command handler saw (while a subcommand is imported) is exit 130, not click's exit 1."""
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            from drill.cli.terminal import literal

            exc.__dict__["message"] = literal(exc.message)  # click types it Final; shown as typed, made safe
            raise
        except KeyboardInterrupt:
            from drill.cli.terminal import say

            say("interrupted (^C)", err=True)
            sys.exit(130)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return _missing_command(cmd_name, module_name)
        return getattr(module, attr)


def _missing_command(name: str, module_name: str) -> click.Command:
    @click.command(
        name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True}, help="(not built yet)"
    )
    def missing() -> None:
        raise click.ClickException(f"'drill {name}' is not built yet ({module_name} is missing)")

    return missing


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="drill", message="%(prog)s %(version)s")
def cli() -> None:
    """Chaos and fault-injection drills for GPU LLM serving stacks."""


def main() -> None:
    cli(prog_name="drill")
