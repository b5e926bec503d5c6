"""``drill judge RUN_DIR``: re-judge a past run from its directory alone and print the verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from drill.cli.common import console, handle_errors, interrupts_kept, print_verdicts

__all__ = ["judge"]


@click.command("judge")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts.json document instead of lines.")
def judge(run_dir: Path, as_json: bool) -> None:
    """Evaluate a finished run's checks again from RUN_DIR (its resolved.json and raw files); changes nothing.

    Exit 0 when every check passes, 1 when one fails or is inconclusive, 2 when RUN_DIR is not a run directory.
    """
    from drill.api import Status
    from drill.errors import InputError
    from drill.runner.judge import rejudge
    from drill.sweeps.sweeper import judge_sweep

    with handle_errors(), interrupts_kept():
        judgement = rejudge(run_dir, sweep_judge=judge_sweep)
        if not judgement.verdicts:  # nothing judged is not a PASS
            raise InputError(
                f"{run_dir / 'resolved.json'}: the drill has no check and no fault: there is nothing to judge",
                hint="a run's verdicts come from its drill's checks; a run directory without them cannot pass",
            )
    if as_json:
        click.echo(json.dumps(judgement.document(), indent=2, default=str))
    else:
        print_verdicts(judgement.verdicts)
        console.print(f"run directory: {run_dir}")
    sys.exit(0 if all(v.status is Status.PASS for v in judgement.verdicts) else 1)
