"""The dead-man watchdog: a separate process that reverts a run's faults when the runner cannot.

The runner starts it in a session of its own (so a Ctrl-C aimed at the runner's
process group does not reach it) and holds the write end of a pipe whose read
end is the watchdog's stdin. The runner writes a heartbeat byte every second
and ``d`` when it has finished its own reverts.

- **EOF without ``d``**: the runner died (SIGKILL, crash). Revert everything
  pending in the journal and tear down targets the run started; exit.
- **no heartbeat for ``--heartbeat-timeout``**: the runner is hung (or stopped).
  Revert pending faults; keep watching (the runner's own later reverts are
  idempotent).
- **lease**: a fault still registered ``--lease-grace`` seconds after its
  planned end is reverted even while the runner lives — a fault must not
  outlive its window because the runner is stuck.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from drill.rundir.journal import read_journal
from drill.runner.cleanup import CleanupReport, clean_run
from drill.runner.reverts import pending_reverts

__all__ = ["Watchdog", "main"]

log = logging.getLogger("drill.watchdog")

HEARTBEAT_INTERVAL_S = 1.0


class Watchdog:
    """Runner-side handle: starts the watchdog process and feeds it heartbeats."""

    def __init__(self, run_dir: Path, *, heartbeat_timeout_s: float = 15.0, lease_grace_s: float = 30.0) -> None:
        self.run_dir = run_dir
        read_fd, self._write_fd = os.pipe()
        log_file = open(run_dir / "watchdog.log", "ab")
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "drill.runner.watchdog",
                    "--run-dir",
                    str(run_dir),
                    "--heartbeat-timeout",
                    str(heartbeat_timeout_s),
                    "--lease-grace",
                    str(lease_grace_s),
                ],
                stdin=read_fd,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(read_fd)
            log_file.close()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="watchdog-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            self._send(b"h")

    def _send(self, data: bytes) -> bool:
        try:
            os.write(self._write_fd, data)
            return True
        except OSError:
            return False

    def finish(self, timeout_s: float = 5.0) -> None:
        """The runner has reverted everything: tell the watchdog to exit quietly."""
        self._stop.set()
        self._send(b"d")
        try:
            os.close(self._write_fd)
        except OSError:
            pass
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _watch(run_dir: Path, heartbeat_timeout_s: float, lease_grace_s: float) -> int:
    fd = sys.stdin.fileno()
    last_beat = time.monotonic()
    done = False
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            data = os.read(fd, 4096)
            if not data:
                return _runner_gone(run_dir, done)
            done = done or b"d" in data
            last_beat = time.monotonic()
        elif not done and time.monotonic() - last_beat > heartbeat_timeout_s:
            log.warning("no heartbeat for %.0fs: runner hung; reverting pending faults", heartbeat_timeout_s)
            _report(clean_run(run_dir, by="watchdog-hung", teardown=False))
            last_beat = time.monotonic()
        _enforce_lease(run_dir, lease_grace_s)


def _runner_gone(run_dir: Path, done: bool) -> int:
    if done:
        log.info("runner finished; nothing to do")
        return 0
    log.warning("runner died; reverting what its journal left in place")
    report = clean_run(run_dir, by="watchdog")
    _report(report)
    return 1 if report.failed else 0


def _enforce_lease(run_dir: Path, grace_s: float) -> None:
    now = time.time()
    overdue = {
        r.fault_id
        for r in pending_reverts(list(read_journal(run_dir / "journal.jsonl")))
        if r.planned_end_ts is not None and now > r.planned_end_ts + grace_s
    }
    if overdue:
        log.warning("lease expired for %s; reverting", ", ".join(sorted(overdue)))
        _report(clean_run(run_dir, by="watchdog-lease", only=overdue, teardown=False))


def _report(report: CleanupReport) -> None:
    for fid in report.reverted:
        log.warning("reverted %s", fid)
    for target in report.torn_down:
        log.warning("tore down %s", target)
    for what, error in report.failed:
        log.error("FAILED to revert %s: %s", what, error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="drill-watchdog")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--heartbeat-timeout", type=float, default=15.0)
    parser.add_argument("--lease-grace", type=float, default=30.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s watchdog %(levelname)s %(message)s")
    return _watch(args.run_dir, args.heartbeat_timeout, args.lease_grace)


if __name__ == "__main__":
    sys.exit(main())
