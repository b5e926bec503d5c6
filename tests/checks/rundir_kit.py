"""Hand-built run directories for check tests: a journal, client records, ledgers and spans.

A check is a pure function of the run directory, so a test writes the few lines a rule needs and
judges them — no mocks. Times are given in seconds relative to the kit's ``t0`` (a fixed UNIX time)
so tests read like a timeline::

    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 60), fault=(60, 120), recovery=(120, 180))
    kit.fault("flood-0", injected=65, reverted=110)
    kit.pool("interactive", timeout="60s", slo={"ttft_p95": 1.0})
    kit.request(at=70, pool="interactive", status=503, error="refused", headers_ms=12)
    kit.ledger(0, key="k-1", status="ok")
    kit.span(trace_id=..., name="llm_request", service="drill-replica-0", kind="SERVER", start=70, end=71)
    evidence = kit.evidence()          # writes everything, returns drill.rundir.evidence.RunEvidence

The API is shared by the checks' tests; keep it stable (add keyword arguments, never change one).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from drill.rundir.evidence import RunEvidence
from drill.rundir.records import RequestRecord

__all__ = ["T0", "RunKit"]

#: The kit's time origin (UNIX seconds); every ``at``/``start``/``end`` is relative to it.
T0 = 1_700_000_000.0

_PHASE_ORDER = ("warmup", "baseline", "fault", "recovery", "replay")


class RunKit:
    """Collects a run's lines in memory and writes them as the runner would (``write``/``evidence``)."""

    def __init__(self, run_dir: Path, t0: float = T0) -> None:
        self.run_dir = Path(run_dir)
        self.t0 = t0
        self.journal: list[dict[str, Any]] = []
        self.records: list[RequestRecord] = []
        self.ledgers: dict[int, list[dict[str, Any]]] = {}
        self.spans: list[dict[str, Any]] = []
        self.pools: list[dict[str, Any]] = []
        self.slo_by_pool: dict[str, dict[str, float]] = {}
        self.target: dict[str, Any] = {}
        self.extra_lines: dict[str, list[str]] = {}
        self._ids = itertools.count(1)
        self._seq = itertools.count(1)
        self._ledger_seq = itertools.count(1)

    # --- time ---------------------------------------------------------------------------------------

    def ts(self, at: float) -> float:
        """The UNIX time ``at`` seconds after ``t0``."""
        return self.t0 + at

    # --- journal ------------------------------------------------------------------------------------

    def event(self, event: str, at: float, **data: Any) -> dict[str, Any]:
        entry = {"seq": next(self._seq), "event": event, "ts": self.ts(at), "mono": at, "by": "runner", **data}
        self.journal.append(entry)
        return entry

    def phase(self, name: str, start: float, end: float, *, stopped_by: str | None = None) -> None:
        """A phase from ``start`` to ``end`` (``phase_started`` / ``phase_ended`` events)."""
        self.event("phase_started", start, phase=name, planned_s=end - start)
        extra = {"stopped_by": stopped_by} if stopped_by else {}
        self.event("phase_ended", end, phase=name, elapsed_s=end - start, **extra)

    def phases(self, **windows: tuple[float, float]) -> None:
        """Several phases at once, in run order: ``phases(baseline=(0, 60), fault=(60, 120))``."""
        for name in sorted(windows, key=lambda n: _PHASE_ORDER.index(n) if n in _PHASE_ORDER else 99):
            self.phase(name, *windows[name])

    def fault(
        self,
        fault_id: str,
        *,
        injected: float,
        reverted: float | None = None,
        kind: str = "queue_flood",
        landed: bool = True,
    ) -> None:
        """A fault injected at ``injected`` (verified when ``landed``) and reverted at ``reverted``."""
        self.event("fault_injected", injected, fault_id=fault_id, kind=kind)
        if landed:
            self.event("fault_verified", injected, fault_id=fault_id, kind=kind, summary="landed")
        else:
            self.event("fault_not_landed", injected, fault_id=fault_id, kind=kind, error="not verified")
        if reverted is not None:
            self.event("fault_reverted", reverted, fault_id=fault_id, kind=kind)

    # --- scenario -----------------------------------------------------------------------------------

    def pool(
        self,
        name: str,
        *,
        timeout: str = "60s",
        slo: dict[str, float] | None = None,
        attempts: int = 0,
        stream: bool = True,
    ) -> None:
        """A scenario pool (written to ``resolved.json``) and its SLO in seconds (``RunEvidence.slo_by_pool``)."""
        self.pools.append(
            {
                "name": name,
                "timeout": timeout,
                "stream": stream,
                "retry": {"attempts": attempts},
                "slo": {k: f"{v}s" for k, v in (slo or {}).items()},
            }
        )
        if slo:
            self.slo_by_pool[name] = dict(slo)

    def embedded_target(self, replicas: int) -> None:
        """Say the run's target was the embedded stack with ``replicas`` replicas (ledger coverage)."""
        self.target = {"kind": "embedded", "replicas": replicas}

    # --- client records -----------------------------------------------------------------------------

    def request(
        self,
        at: float,
        *,
        pool: str = "interactive",
        status: int | None = 200,
        error: str | None = None,
        ttft_ms: float | None = None,
        e2e_ms: float | None = None,
        headers_ms: float | None = None,
        logical_id: str | None = None,
        attempt: int = 1,
        request_id: str | None = None,
        trace_id: str | None = None,
        idempotency_key: str | None = None,
        payload_digest: str = "d0",
        completion_tokens: int | None = None,
        retry_after_s: float | None = None,
        **fields: Any,
    ) -> RequestRecord:
        """One attempt intended at ``at``. A success defaults to TTFT 100 ms, E2E 500 ms and 10 tokens."""
        n = next(self._ids)
        logical_id = logical_id or f"{pool}-{n}"
        ok = error is None and status is not None and status < 400
        if ok:
            ttft_ms = 100.0 if ttft_ms is None else ttft_ms
            e2e_ms = max(ttft_ms, 500.0) if e2e_ms is None else e2e_ms
            headers_ms = ttft_ms if headers_ms is None else headers_ms
            completion_tokens = 10 if completion_tokens is None else completion_tokens
        record = RequestRecord.from_dict(
            {
                "request_id": request_id or f"{logical_id}-{attempt}",
                "logical_id": logical_id,
                "pool": pool,
                "attempt": attempt,
                "intended_ts": self.ts(at),
                "sent_ts": self.ts(at),
                "schedule_lag_ms": 0.0,
                "status": status,
                "error": error,
                "headers_ms": headers_ms,
                "ttft_ms": ttft_ms,
                "e2e_ms": e2e_ms,
                "completion_tokens": completion_tokens,
                "trace_id": trace_id or f"{n:032x}",
                "idempotency_key": idempotency_key if idempotency_key is not None else f"key-{logical_id}",
                "payload_digest": payload_digest,
                "retry_after_s": retry_after_s,
                **fields,
            }
        )
        self.records.append(record)
        return record

    # --- the stack's side-effect ledger ---------------------------------------------------------------

    def ledger(
        self,
        replica: int,
        *,
        key: str | None,
        status: str = "ok",
        request_id: str | None = None,
        trace_id: str | None = None,
        at: float = 0.0,
        billed_tokens: int = 110,
        prompt_tokens: int = 100,
        completion_tokens: int = 10,
    ) -> dict[str, Any]:
        """One ``ledger/replica-<replica>.jsonl`` record (the fields of ``drill.rundir.ledger.LedgerRecord``)."""
        ts = self.ts(at)
        record = {
            "seq": next(self._ledger_seq),
            "ts": ts,
            "replica": f"replica-{replica}",
            "request_id": request_id or f"req-{key}",
            "idempotency_key": key,
            "trace_id": trace_id,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "billed_tokens": billed_tokens,
            "finish_reason": "length" if status == "ok" else "abort",
            "status": status,
            "arrival_ts": ts,
            "first_token_ts": ts + 0.05,
            "finish_ts": ts + 0.5,
            "cached_tokens": 0,
            "num_preemptions": 0,
            "priority": 0,
        }
        self.ledgers.setdefault(replica, []).append(record)
        return record

    def empty_ledger(self, replica: int) -> None:
        """A replica whose ledger file exists but holds no record."""
        self.ledgers.setdefault(replica, [])

    # --- spans (normalized, as the run's receiver writes spans.jsonl) ----------------------------------

    def span(
        self,
        *,
        trace_id: str,
        span_id: str,
        name: str,
        service: str,
        kind: str = "INTERNAL",
        parent_id: str | None = None,
        start: float = 0.0,
        end: float = 0.1,
        status: str = "UNSET",
        message: str | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One span; ``start``/``end`` in seconds relative to ``t0``."""
        start_ns, end_ns = int(round(self.ts(start) * 1e9)), int(round(self.ts(end) * 1e9))
        span = {
            "trace_id": trace_id,
            "span_id": span_id,
            "parent_span_id": parent_id,
            "name": name,
            "kind": kind,
            "service": service,
            "scope": "test",
            "start_ns": start_ns,
            "end_ns": end_ns,
            "duration_ms": (end_ns - start_ns) / 1e6,
            "status": {"code": status, "message": message},
            "attributes": attributes or {},
            "resource": {"service.name": service},
            "events": [],
        }
        self.spans.append(span)
        return span

    def raw_line(self, name: str, line: str) -> None:
        """Append ``line`` verbatim (give its ``\\n``; leave it off for a torn last line) to a run-directory
        file (e.g. ``"requests.jsonl"``, ``"ledger/replica-0.jsonl"``) after the kit's own lines."""
        self.extra_lines.setdefault(name, []).append(line)

    # --- writing --------------------------------------------------------------------------------------

    def write(self) -> Path:
        """Write the run directory (again, from scratch, on every call); returns its path."""
        files: dict[str, str] = {
            "journal.jsonl": _lines(json.dumps(e) for e in self.journal),
            "requests.jsonl": _lines(r.to_json() for r in self.records),
        }
        if self.spans:
            files["spans.jsonl"] = _lines(json.dumps(s) for s in self.spans)
        for replica, records in sorted(self.ledgers.items()):
            files[f"ledger/replica-{replica}.jsonl"] = _lines(json.dumps(r) for r in records)
        for name, lines in self.extra_lines.items():
            files[name] = files.get(name, "") + "".join(lines)
        files["resolved.json"] = json.dumps(self._resolved())
        for name, text in files.items():
            path = self.run_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return self.run_dir

    def evidence(self) -> RunEvidence:
        """Write the directory and open it as the checks see it."""
        return RunEvidence(self.write(), self.slo_by_pool)

    def _resolved(self) -> dict[str, Any]:
        resolved: dict[str, Any] = {"scenario": {"pools": self.pools}}
        if self.target:
            resolved["drill"] = {"target": {"kind": self.target["kind"]}}
            resolved["target_params"] = {"replicas": self.target["replicas"]}
        return resolved


def _lines(lines: Iterable[str]) -> str:
    return "".join(line + "\n" for line in lines)
