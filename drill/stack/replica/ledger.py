"""The side-effect ledger of a replica (stack-contracts.md §6): one JSON line per processed request.

Every request the engine admitted appends one :class:`~drill.rundir.ledger.LedgerRecord` (the line's type is the
run directory's: the runner copies the file into it) when it finishes, for any
reason, to ``ledger_path`` (flushed per line, so a killed replica loses nothing written) and keeps
it in memory for ``GET /admin/ledger?since=<seq>``. It is the side-effect truth for duplicate checks
(a retried request billed twice shows as two records with the same idempotency key) and the
server's own request log (arrival, first-token and finish times, UNIX seconds) for latency tests.
``seq`` continues across restarts of the replica on the same file.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from pathlib import Path

from drill.errors import StackError
from drill.rundir.ledger import LedgerRecord

__all__ = ["Ledger"]

log = logging.getLogger(__name__)


class Ledger:
    """Appends records to a JSON-lines file and keeps the last ``keep`` in memory."""

    def __init__(self, path: Path, replica: str, *, keep: int = 100_000) -> None:
        self.path = Path(path)
        self.replica = replica
        # (seq, JSON line) pairs: strings are not tracked by the garbage collector, dicts would be (100k of
        # them made every full collection a pause of tens of ms in the engine loop)
        self._records: deque[tuple[int, str]] = deque(maxlen=keep)
        self._seq = self._load_existing()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise StackError(f"cannot open the ledger {self.path}: {exc.strerror}") from exc

    def _load_existing(self) -> int:
        """Read earlier records (a previous run of this replica); returns the last seq (0 if none)."""
        last = 0
        try:
            with self.path.open(encoding="utf-8") as existing:
                for line in existing:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        log.warning("skipping a torn line in ledger %s", self.path)
                        continue
                    seq = int(record.get("seq", 0))
                    self._records.append((seq, line.rstrip("\n")))
                    last = max(last, seq)
        except FileNotFoundError:
            pass
        return last

    def append(self, **fields: object) -> LedgerRecord:
        """Write one record (``seq`` and ``ts`` are assigned here) and return it."""
        self._seq += 1
        record = LedgerRecord(seq=self._seq, ts=time.time(), replica=self.replica, **fields)  # type: ignore[arg-type]
        data = record.to_json()
        line = json.dumps(data, separators=(",", ":"))
        self._records.append((record.seq, line))
        self._file.write(line + "\n")
        self._file.flush()
        return record

    def since(self, seq: int, limit: int = 10_000) -> list[dict]:
        """Records with ``seq`` greater than ``seq``, oldest first, at most ``limit``."""
        out = []
        for record_seq, line in self._records:
            if record_seq > seq:
                out.append(json.loads(line))
                if len(out) >= limit:
                    break
        return out

    @property
    def last_seq(self) -> int:
        return self._seq

    def close(self) -> None:
        """Flush and close the file; idempotent."""
        if not self._file.closed:
            self._file.close()
