"""``drill supervise --pid-file F -- COMMAND...``: keep a server you start yourself running, for the process faults.

``replica_crash`` and ``replica_pause`` with ``method: process`` find a replica's process through its PID file,
and ``replica_crash`` expects something to start the replica again (the target's ``supervised: true``). Around a
server that has no supervisor of its own (a ``llama-server``, a ``vllm serve`` on a workstation), this is one:

.. code-block:: console

    drill supervise --pid-file /tmp/llama.pid -- llama-server -m model.gguf --port 8080 --metrics

It runs COMMAND, writes the PID of COMMAND's process (not its own) to the PID file, and starts COMMAND again
whenever it exits, with the embedded stack's backoff (0.2 s, doubling to 5 s while it keeps dying within 10 s of
its start). COMMAND runs in a process group of its own: when it exits, what is left of the group (the workers it
started, such as vLLM's engine core after a SIGKILLed API server) is SIGKILLed before the restart, as a container's
processes go with its main process. A stopped process (SIGSTOP, as ``replica_pause`` does) is not an exit. COMMAND
dies with the supervisor, even when the supervisor is SIGKILLed. On SIGTERM, SIGINT or SIGHUP it stops COMMAND
(SIGTERM, then SIGKILL after 5 s) and the rest of its group, removes the PID file and exits 0.
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

import click

from drill.stack.supervision.supervisor import Child

__all__ = ["supervise"]

_TICK_S = 0.05
_STOP_GRACE_S = 5.0
log = logging.getLogger("drill.supervise")


@click.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--pid-file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where the PID of COMMAND's current process is written (the target's replicas[].pid_file).",
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="COMMAND's output, appended across restarts (default: the PID file's name with .log).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def supervise(pid_file: Path, log_path: Path | None, command: tuple[str, ...]) -> None:
    """Run COMMAND, restart it whenever it exits, and keep its PID in --pid-file."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s drill supervise: %(message)s")
    child = Child(
        Path(command[0]).name, list(command), log_path or pid_file.with_suffix(".log"), pid_file, own_group=True
    )
    stopping: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stopping.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        child.spawn()
    except OSError as exc:
        raise click.BadParameter(f"cannot start {command[0]}: {exc}", param_hint="COMMAND") from exc
    while not stopping:
        child.check(time.monotonic())
        time.sleep(_TICK_S)
    log.info("signal %s: stopping %s", signal.Signals(stopping[0]).name, child.name)
    _stop(child)
    pid_file.unlink(missing_ok=True)


def _stop(child: Child) -> None:
    """SIGTERM (and SIGCONT, so a stopped process gets it), then SIGKILL after the grace period; then what is left
    of its process group."""
    process = child.process
    if process is None:
        return
    if process.poll() is not None:
        child.reap_group()
        return
    process.terminate()
    process.send_signal(signal.SIGCONT)
    try:
        process.wait(timeout=_STOP_GRACE_S)
    except Exception:  # subprocess.TimeoutExpired: it ignored SIGTERM
        process.kill()
        process.wait()
    child.reap_group()
