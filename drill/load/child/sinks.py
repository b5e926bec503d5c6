"""Where a load-generating process puts finished records.

:class:`FileSink` (the local runner and the distributed master) appends to
``requests.jsonl`` and ``failing_samples.jsonl`` in the run directory, at most
``FLUSH_INTERVAL_S`` after a record is made, in whole lines: each flush is one
``os.write`` on an ``O_APPEND`` descriptor, so a reader tailing the file
(``drill/runner/stopconditions.py``) never sees half a record from us.
:class:`BatchSink` (a distributed worker) keeps records until the next report to
the master (``events.report_to_master``, ``docs/dependencies.md`` §1.5) or the
final flush at stop.
"""

from __future__ import annotations

import os
from pathlib import Path

import gevent

__all__ = ["FileSink", "BatchSink", "FLUSH_INTERVAL_S", "REQUESTS_FILE", "SAMPLES_FILE"]

FLUSH_INTERVAL_S = 0.1
REQUESTS_FILE = "requests.jsonl"
SAMPLES_FILE = "failing_samples.jsonl"


class FileSink:
    """Buffered, periodically flushed appends of whole JSON lines."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self._fds = (os.open(run_dir / REQUESTS_FILE, flags, 0o644), os.open(run_dir / SAMPLES_FILE, flags, 0o644))
        self._buffers: tuple[list[str], list[str]] = ([], [])
        self.written = 0
        self.samples_written = 0
        self._flusher = gevent.spawn(self._flush_loop)

    def add(self, record: str, sample: str | None) -> None:
        self._buffers[0].append(record)
        if sample is not None:
            self._buffers[1].append(sample)

    def add_many(self, records: list[str], samples: list[str]) -> None:
        self._buffers[0].extend(records)
        self._buffers[1].extend(samples)

    def flush(self) -> None:
        """Write everything buffered now (whole lines, one write per file)."""
        for index, buffer in enumerate(self._buffers):
            if not buffer:
                continue
            lines = buffer[:]
            del buffer[: len(lines)]
            _write_all(self._fds[index], ("\n".join(lines) + "\n").encode())
            if index == 0:
                self.written += len(lines)
            else:
                self.samples_written += len(lines)

    def close(self) -> None:
        self._flusher.kill(block=False)
        self.flush()
        for fd in self._fds:
            os.close(fd)

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(FLUSH_INTERVAL_S)
            self.flush()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class BatchSink:
    """Records kept for the master; ``take`` hands them over and forgets them."""

    def __init__(self) -> None:
        self.records: list[str] = []
        self.samples: list[str] = []
        self.taken = 0

    def add(self, record: str, sample: str | None) -> None:
        self.records.append(record)
        if sample is not None:
            self.samples.append(sample)

    def take(self) -> tuple[list[str], list[str]]:
        records, samples = self.records, self.samples
        self.records, self.samples = [], []
        self.taken += len(records)
        return records, samples
