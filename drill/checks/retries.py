"""``duplicate_side_effects`` and ``retry_budget``: what retries did to the server.

The rules, their sources and their params are in :class:`DuplicateSideEffectsCheck` and
:class:`RetryBudgetCheck`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.checks.builtin import PhaseName
from drill.checks.judging import records_in, usable_traces, window_of
from drill.rundir.evidence import RunEvidence
from drill.rundir.jsonl import read_jsonl
from drill.rundir.ledger import LEDGER_READS, RunLedger
from drill.rundir.records import ErrorClass, RequestRecord

if TYPE_CHECKING:
    from drill.traces.table import SpanTable

__all__ = [
    "DuplicateSideEffectsCheck",
    "DuplicateSideEffectsParams",
    "Execution",
    "RetryBudgetCheck",
    "RetryBudgetParams",
]

SPANS = "spans.jsonl"
REPLAY = "replay.jsonl"
#: Span kinds (OTLP SpanKind codes).
SERVER, CLIENT = 2, 3
ERROR = 2  # OTLP status code


# --- duplicate side effects -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Execution:
    """One execution of a request on the server: a ledger record, or a server span carrying the key."""

    key: str
    request_id: str
    trace_id: str
    replica: str
    start_ts: float
    end_ts: float
    where: str = ""  # the record it was counted from: "ledger seq 12", "span 8f3a..."


class DuplicateSideEffectsParams(CheckParams):
    source: str = Field("auto", pattern="^(auto|ledger|spans)$")  # auto: the ledger, else spans
    span_name: str = "llm_request"  # the server span that is one execution (spans fallback)
    key_attribute: str = "drill.idempotency_key"  # the span attribute that carries the key
    pools: list[str] | None = None  # default: every pool
    min_keys: int = Field(1, ge=1)  # fewer keyed client requests: INCONCLUSIVE


@dataclass
class _Classes:
    """Jepsen-style classes of the keys (values: the keys)."""

    duplicated: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    different_payload: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    concurrent: list[str] = field(default_factory=list)


class DuplicateSideEffectsCheck(Check):
    """Each idempotency key was executed on the server at most once, and only when the client asked.

    Sources of the rule:

    - Stripe (docs.stripe.com/idempotency): the first request with an ``Idempotency-Key`` executes,
      later ones with the same key get the saved response; a key reused with different parameters is
      an error.
    - IETF draft-ietf-httpapi-idempotency-key-header: a key MUST NOT be reused with a different
      payload (422); a concurrent request with the same key gets 409; the server keeps the result.
    - Jepsen's checkers (jepsen-io/jepsen ``checker.clj``, ``total-queue`` / ``unique-ids``) classify
      delivered values as duplicated, lost, unexpected and recovered; valid only without them.

    Per idempotency key, the check counts the executions the server really did — the stack's
    side-effect ledger (``ledger/*.jsonl``: a record with status ``ok``, or one that was billed,
    ``billed_tokens`` > 0), else the server spans named ``span_name`` carrying ``key_attribute``
    (one that is not an ERROR, or that carries a positive ``drill.billed_tokens``) — and compares
    them with the client's attempts in ``requests.jsonl`` (and ``replay.jsonl``):

    - **duplicated**: more than one execution of a key (two executions overlapping in time are
      also counted as ``concurrent``: the draft's 409 case);
    - **lost**: a key the client was answered with success for, never executed;
    - **unexpected**: an executed key the client never sent;
    - **different payload**: attempts of one key with different ``payload_digest`` (the draft's 422);
    - **recovered** (information): the client never saw success, yet it executed exactly once.

    FAIL on any duplicated, unexpected or different-payload key, and on lost keys judged from a
    complete ledger. Lost keys judged from spans are INCONCLUSIVE, not FAIL: a span the exporter
    dropped looks the same. INCONCLUSIVE without a ledger and without spans ("the target exported no
    spans"), when a replica's ledger is missing (duplicates found are still a FAIL), or when the
    client sent no idempotency keys. PASS: every key at most once, none lost or unexpected.
    """

    kind = "duplicate_side_effects"
    Params = DuplicateSideEffectsParams
    params: DuplicateSideEffectsParams
    reads: tuple[str, ...] = ("requests.jsonl", LEDGER_READS)

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        p: DuplicateSideEffectsParams = self.params
        attempts = _keyed(evidence.requests, p.pools)
        if len(attempts) < p.min_keys:
            return self.verdict(
                Status.INCONCLUSIVE,
                f"only {len(attempts)} client request(s) carried an "
                f"Idempotency-Key (< {p.min_keys}): nothing to count executions of",
                observed={"keys_requested": len(attempts)},
                units={"keys_requested": "keys"},
            )
        executions, source, gaps = self._executions(evidence)
        if executions is None:
            return self.verdict(
                Status.INCONCLUSIVE,
                source,
                observed={"keys_requested": len(attempts)},
                units={"keys_requested": "keys"},
            )
        requested = set(_keyed(evidence.requests, None)) | _replay_keys(evidence)
        classes = _classify(attempts, executions, requested)
        return self._judge(classes, attempts, executions, source, gaps)

    def _executions(self, evidence: RunEvidence) -> tuple[dict[str, list[Execution]] | None, str, list[str]]:
        """Executions per key, the source's name (or why there is none) and what the source may lack."""
        p: DuplicateSideEffectsParams = self.params
        ledger = evidence.ledger if p.source in ("auto", "ledger") else None
        if ledger is not None and ledger.present:
            gaps = [f"no ledger for {', '.join(ledger.missing_replicas)}"] if ledger.missing_replicas else []
            return _ledger_executions(ledger), "ledger", gaps
        if p.source == "ledger":
            return None, "the run directory holds no side-effect ledger (ledger/*.jsonl)", []
        traces, reason = usable_traces(evidence)
        self.reads = self.reads + (SPANS,)
        if traces is None:
            return None, f"no side-effect ledger and no spans: {reason}", []
        executions = _span_executions(traces.table, p.span_name, p.key_attribute)
        if not executions:
            return (
                None,
                (
                    f"no side-effect ledger, and no {p.span_name!r} span carries {p.key_attribute!r}: "
                    "executions cannot be counted"
                ),
                [],
            )
        return executions, "spans", []

    def _judge(
        self,
        classes: _Classes,
        attempts: dict[str, list[RequestRecord]],
        executions: dict[str, list[Execution]],
        source: str,
        gaps: list[str],
    ) -> Verdict:
        extra = {k: len(executions[k]) - 1 for k in classes.duplicated}
        observed = {
            "keys_requested": len(attempts),
            "keys_executed": sum(1 for k in attempts if executions.get(k)),
            "executions": sum(len(executions.get(k, ())) for k in attempts),
            "executions_total": sum(len(v) for v in executions.values()),
            "duplicated": len(classes.duplicated),
            "extra_executions": sum(extra.values()),
            "concurrent": len(classes.concurrent),
            "lost": len(classes.lost),
            "unexpected": len(classes.unexpected),
            "different_payload": len(classes.different_payload),
            "recovered": len(classes.recovered),
        }
        units = {k: "keys" for k in observed} | dict.fromkeys(
            ("executions", "executions_total", "extra_executions"), "executions"
        )
        expected = {"duplicated": "== 0", "unexpected": "== 0", "different_payload": "== 0", "lost": "== 0"}
        refs = _refs(classes, attempts, executions)
        caveat = " (an exporter may drop spans: a key with no span is not proven lost)" if source == "spans" else ""
        notes = (f"executions counted from the {source}{caveat}", *(f"the source may be incomplete: {g}" for g in gaps))
        bad = [
            f"{len(getattr(classes, name))} {name.replace('_', ' ')}"
            for name in ("duplicated", "unexpected", "different_payload")
            if getattr(classes, name)
        ]
        complete = source == "ledger" and not gaps
        if classes.lost and complete:
            bad.append(f"{len(classes.lost)} lost (answered with success, never executed)")
        summary = f"{observed['keys_requested']} keys, {observed['executions']} executions ({source})"
        if bad:
            message = f"{', '.join(bad)} idempotency key(s): {summary}"
            return self.verdict(
                Status.FAIL, message, observed=observed, expected=expected, units=units, evidence=refs, notes=notes
            )
        if classes.lost or gaps:
            why = "; ".join(
                (
                    [f"{len(classes.lost)} key(s) answered with success have no execution in the {source}"]
                    if classes.lost
                    else []
                )
                + gaps
            )
            return self.verdict(
                Status.INCONCLUSIVE,
                f"no duplicate found, but {why}: {summary}",
                observed=observed,
                expected=expected,
                units=units,
                evidence=refs,
                notes=notes,
            )
        return self.verdict(
            Status.PASS,
            f"every idempotency key executed at most once: {summary}",
            observed=observed,
            expected=expected,
            units=units,
            evidence=refs,
            notes=notes,
        )


def _keyed(records: list[RequestRecord], pools: list[str] | None) -> dict[str, list[RequestRecord]]:
    """Client attempts per idempotency key (attempts the client never sent are left out)."""
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.idempotency_key and r.sent_ts is not None and (pools is None or r.pool in pools):
            out[r.idempotency_key].append(r)
    return dict(out)


def _replay_keys(evidence: RunEvidence) -> set[str]:
    """Keys the recovery replay sent (they are requested too, after the load)."""
    if not (evidence.run_dir / REPLAY).exists():
        return set()
    rows = evidence.read(REPLAY, lambda path, report: read_jsonl(path, dict, report))
    return {str(r["idempotency_key"]) for r in rows if r.get("idempotency_key")}


def _ledger_executions(ledger: RunLedger) -> dict[str, list[Execution]]:
    return {
        key: [
            Execution(key, r.request_id, r.trace_id or "", r.replica, r.arrival_ts, r.finish_ts, f"ledger seq {r.seq}")
            for r in records
        ]
        for key, records in ledger.by_key().items()
    }


def _span_executions(table: SpanTable, span_name: str, key_attribute: str) -> dict[str, list[Execution]]:
    """Server spans named ``span_name`` with the key attribute: one execution each (unless failed unbilled)."""
    code = table.name_code(span_name)
    if code is None:
        return {}
    out: dict[str, list[Execution]] = defaultdict(list)
    for row in np.flatnonzero(table.name == code).tolist():
        attributes = table.attributes[row]
        key = attributes.get(key_attribute)
        if not key:
            continue
        billed = attributes.get("drill.billed_tokens")
        counts = billed > 0 if isinstance(billed, (int, float)) else table.status[row] != ERROR
        if not counts:
            continue
        out[str(key)].append(
            Execution(
                str(key),
                str(attributes.get("gen_ai.request.id", table.span_id[row])),
                table.trace_id[row],
                str(attributes.get("drill.replica", table.services[table.service[row]])),
                int(table.start_ns[row]) / 1e9,
                int(table.end_ns[row]) / 1e9,
                f"span {table.span_id[row]}",
            )
        )
    return {k: sorted(v, key=lambda e: e.start_ts) for k, v in out.items()}


def _classify(
    attempts: dict[str, list[RequestRecord]], executions: dict[str, list[Execution]], requested: set[str]
) -> _Classes:
    classes = _Classes()
    for key, tries in attempts.items():
        done = executions.get(key, [])
        acked = any(r.ok for r in tries)
        if len(done) > 1:
            classes.duplicated.append(key)
            if _overlap(done):
                classes.concurrent.append(key)
        elif not done and acked:
            classes.lost.append(key)
        elif len(done) == 1 and not acked:
            classes.recovered.append(key)
        if len({r.payload_digest for r in tries if r.payload_digest}) > 1:
            classes.different_payload.append(key)
    classes.unexpected = sorted(k for k in executions if k not in requested)
    return classes


def _overlap(executions: list[Execution]) -> bool:
    ordered = sorted(executions, key=lambda e: e.start_ts)
    return any(b.start_ts < a.end_ts for a, b in zip(ordered, ordered[1:]))


def _refs(
    classes: _Classes, attempts: dict[str, list[RequestRecord]], executions: dict[str, list[Execution]]
) -> list[EvidenceRef]:
    """Per bad key: the key, each execution (request id, replica, the ledger line or span), its traces,
    and for keys without a duplicate the client's attempts."""
    refs: list[EvidenceRef] = []
    for name in ("duplicated", "different_payload", "unexpected", "lost"):
        for key in getattr(classes, name)[:10]:
            done = executions.get(key, [])
            replicas = ", ".join(sorted({e.replica for e in done}))
            refs.append(
                EvidenceRef(
                    EvidenceKind.IDEMPOTENCY_KEY,
                    key,
                    f"{name}: {len(done)} execution(s)" + (f" on {replicas}" if replicas else ""),
                )
            )
            for n, e in enumerate(done[:3], 1):
                refs.append(
                    EvidenceRef(EvidenceKind.REQUEST, e.request_id, f"execution {n} on {e.replica} ({e.where})")
                )
            refs += [
                EvidenceRef(EvidenceKind.TRACE, t, f"execution of {key}")
                for t in dict.fromkeys(e.trace_id for e in done[:3] if e.trace_id)
            ]
            if name != "duplicated":
                refs += [
                    EvidenceRef(
                        EvidenceKind.REQUEST,
                        r.request_id,
                        f"client attempt {r.attempt}: {'ok' if r.ok else r.error.value if r.error else r.status}",
                    )
                    for r in attempts.get(key, [])[:3]
                ]
    return refs


# --- retry budget ---------------------------------------------------------------------------------------


class RetryBudgetParams(CheckParams):
    phase: PhaseName | None = "fault"  # None: the whole run
    max_retry_share: float = Field(0.10, ge=0, le=1)  # retries / attempts, per layer
    max_attempts: int = Field(3, ge=1)  # attempts of one logical request, end to end
    pools: list[str] | None = None
    min_requests: int = Field(20, ge=1)  # fewer logical requests: INCONCLUSIVE
    use_spans: bool = True  # count the server-side (router) retries from spans


@dataclass
class _Layer:
    """One layer's attempts: the client's, or a server's upstream calls."""

    attempts: int = 0
    calls: int = 0  # logical requests (client) / calls made (server: one per parent SERVER span)

    @property
    def retries(self) -> int:
        return self.attempts - self.calls

    @property
    def share(self) -> float | None:
        return self.retries / self.attempts if self.attempts else None


class RetryBudgetCheck(Check):
    """Retries stay within budget: a share of requests per layer, and attempts per logical request.

    Sources of the rule:

    - Google SRE book, ch. 21 "Handling Overload": a per-request budget of at most 3 attempts ("If a
      request has already failed three times, we let the failure bubble up"), and a per-client budget:
      retry only while retries/requests is below 10% (load growth 1.1x instead of up to 3x); retry
      only at the layer immediately above the one that rejects.
    - Ch. 22 "Addressing Cascading Failures": retries at several layers multiply (3 layers of 4
      attempts: 64x); Envoy's retry budget lets at most 20% of active requests be retries; the AWS
      SDKs' standard mode makes at most 3 attempts.

    From ``requests.jsonl``: the client's attempts (``attempt``) of each logical request
    (``logical_id``) whose first attempt falls in the window (the fault window for ``phase: fault``).
    From spans, when the target exports them (``use_spans``): retries the client cannot see — sibling
    CLIENT spans with the same name under one SERVER span are attempts of one upstream call (the
    embedded router makes one per upstream attempt). A logical request's attempts end to end are its
    upstream attempts summed over its client attempts (client attempts without spans count 1).

    Observed: the retry share (retries / attempts) of the client — overall and per pool, each pool
    being one client as the SRE budget counts — and of the server layer, the most attempts of one
    logical request, the requests retried at both layers. FAIL when a pool's client share or the
    server layer's share exceeds ``max_retry_share``, or a logical request made more than
    ``max_attempts`` attempts (its logical ids are the evidence). PASS otherwise; without spans the
    verdict is the client's view, noted. INCONCLUSIVE with fewer than ``min_requests`` logical
    requests in the window.
    """

    kind = "retry_budget"
    Params = RetryBudgetParams
    params: RetryBudgetParams
    reads: tuple[str, ...] = ("journal.jsonl", "requests.jsonl")

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        p: RetryBudgetParams = self.params
        logical, window_name = self._logical(evidence)
        if logical is None:
            return self.verdict(Status.INCONCLUSIVE, f"the run has no {p.phase} phase", window=p.phase)
        if len(logical) < p.min_requests:
            return self.verdict(
                Status.INCONCLUSIVE,
                f"only {len(logical)} logical request(s) in {window_name} (< {p.min_requests})",
                observed={"logical_requests": len(logical)},
                units={"logical_requests": "requests"},
                window=p.phase,
            )
        client = _Layer(sum(len(v) for v in logical.values()), len(logical))
        server, per_trace, note = self._server_layer(evidence, logical)
        return self._judge(logical, client, server, per_trace, note)

    def _logical(self, evidence: RunEvidence) -> tuple[dict[str, list[RequestRecord]] | None, str]:
        p: RetryBudgetParams = self.params
        pools = None if p.pools is None else set(p.pools)
        every = [
            r
            for r in evidence.requests
            if r.sent_ts is not None and r.error is not ErrorClass.CLIENT_DROP and (pools is None or r.pool in pools)
        ]
        by_logical: dict[str, list[RequestRecord]] = defaultdict(list)
        for r in every:
            by_logical[r.logical_id].append(r)
        if p.phase is None:
            return dict(by_logical), "the run"
        window = window_of(evidence, p.phase)
        if window is None:
            return None, p.phase
        first = {r.logical_id for r in records_in(evidence, window, p.pools) if r.attempt == 1}
        chosen = {k: sorted(v, key=lambda r: r.attempt) for k, v in by_logical.items() if k in first}
        return chosen, f"the {p.phase} window"

    def _server_layer(
        self,
        evidence: RunEvidence,
        logical: dict[str, list[RequestRecord]],
    ) -> tuple[_Layer | None, dict[str, int], str | None]:
        """The server layer's attempts, upstream attempts per client trace id, or why none."""
        if not self.params.use_spans:
            return None, {}, "server-side retries not counted (use_spans: false)"
        traces, reason = usable_traces(evidence)
        self.reads = self.reads + (SPANS,)
        if traces is None:
            return None, {}, f"server-side retries are invisible without spans ({reason}): the client's view only"
        wanted = {r.trace_id.lower() for records in logical.values() for r in records if r.trace_id}
        layer, per_trace = _upstream_attempts(traces.table, wanted)
        unseen = len(wanted) - len(per_trace)
        note = (
            (
                f"{unseen} of {len(wanted)} client attempt(s) have no upstream CLIENT span under a SERVER span "
                "(answered without an upstream call — e.g. from an idempotency store — or not traced): "
                "server-side retries of those are not counted"
            )
            if unseen
            else None
        )
        return layer, per_trace, note

    def _judge(
        self,
        logical: dict[str, list[RequestRecord]],
        client: _Layer,
        server: _Layer | None,
        per_trace: dict[str, int],
        note: str | None,
    ) -> Verdict:
        p: RetryBudgetParams = self.params
        end_to_end = {
            lid: sum(per_trace.get(r.trace_id.lower(), 1) for r in records) for lid, records in logical.items()
        }
        over = sorted((lid for lid, n in end_to_end.items() if n > p.max_attempts), key=lambda k: -end_to_end[k])
        pools = sorted(_per_pool(logical).items())
        observed, expected, units = self._figures(logical, client, server, pools, end_to_end, per_trace, over)
        layers = [(f"pool {pool}'s client", layer.share) for pool, layer in pools]
        layers.append(("the server's", server.share if server is not None else None))
        problems = [
            f"{name} retries were {share:.1%} of its attempts (budget {p.max_retry_share:.0%})"
            for name, share in layers
            if share is not None and share > p.max_retry_share
        ]
        if over:
            problems.append(
                f"{len(over)} logical request(s) made more than {p.max_attempts} attempts (most: {end_to_end[over[0]]})"
            )
        refs = [EvidenceRef(EvidenceKind.LOGICAL, lid, f"{end_to_end[lid]} attempts end to end") for lid in over[:20]]
        refs += [
            EvidenceRef(EvidenceKind.TRACE, r.trace_id, f"attempt {r.attempt} of {lid}")
            for lid in over[:5]
            for r in logical[lid]
            if r.trace_id
        ]
        status = Status.FAIL if problems else Status.PASS
        message = (
            "; ".join(problems)
            if problems
            else (
                f"retries within budget: client {client.share:.1%}"
                + (f", server {server.share:.1%}" if server is not None and server.share is not None else "")
                + f", at most {observed['max_attempts_seen']} attempt(s) per logical request"
            )
        )
        return self.verdict(
            status,
            message,
            observed=observed,
            expected=expected,
            units=units,
            evidence=refs,
            window=p.phase,
            notes=(note,) if note else (),
        )

    def _figures(
        self,
        logical: dict[str, list[RequestRecord]],
        client: _Layer,
        server: _Layer | None,
        pools: list[tuple[str, _Layer]],
        end_to_end: dict[str, int],
        per_trace: dict[str, int],
        over: list[str],
    ) -> tuple[dict, dict, dict]:
        p: RetryBudgetParams = self.params
        both = [
            lid
            for lid, records in logical.items()
            if len(records) > 1 and any(per_trace.get(r.trace_id.lower(), 1) > 1 for r in records)
        ]
        observed = {
            "logical_requests": len(logical),
            "client_attempts": client.attempts,
            "client_retries": client.retries,
            "client_retry_share": _round(client.share),
            "max_attempts_seen": max(end_to_end.values()),
            "over_max_attempts": len(over),
            "retried_at_both_layers": len(both),
        }
        expected = {"max_attempts_seen": f"<= {p.max_attempts}"}
        for pool, layer in pools:
            observed[f"{pool}.client_retry_share"] = _round(layer.share)
            expected[f"{pool}.client_retry_share"] = f"<= {p.max_retry_share:g}"
        if server is not None:
            observed.update(
                server_calls=server.calls,
                server_attempts=server.attempts,
                server_retries=server.retries,
                server_retry_share=_round(server.share),
            )
            expected["server_retry_share"] = f"<= {p.max_retry_share:g}"
        units = {k: ("ratio" if k.endswith("_share") else "requests") for k in observed}
        units["max_attempts_seen"] = "attempts"
        return observed, expected, units


def _upstream_attempts(table: SpanTable, traces: set[str]) -> tuple[_Layer, dict[str, int]]:
    """Attempts of each upstream call: CLIENT spans with one name under one SERVER span (in ``traces``).

    Returns the layer (calls = groups, attempts = their spans) and, per trace, its attempts end to
    end (the largest group, as one client attempt reaches the server through one call).
    """
    layer = _Layer()
    per_trace: dict[str, int] = {}
    if not len(table) or not traces:
        return layer, per_trace
    parents = table.parent_row
    rows = np.flatnonzero((table.kind == CLIENT) & (parents >= 0))
    rows = rows[table.kind[parents[rows]] == SERVER]
    groups: dict[tuple[int, int], int] = defaultdict(int)
    for row in rows.tolist():
        if table.trace_id[row] in traces:
            groups[(int(parents[row]), int(table.name[row]))] += 1
    for (parent, _), count in groups.items():
        layer.calls += 1
        layer.attempts += count
        trace = table.trace_id[parent]
        per_trace[trace] = max(per_trace.get(trace, 1), count)
    return layer, per_trace


def _per_pool(logical: dict[str, list[RequestRecord]]) -> dict[str, _Layer]:
    """The client layer of each pool (the SRE budget is per client)."""
    out: dict[str, _Layer] = defaultdict(_Layer)
    for records in logical.values():
        layer = out[records[0].pool]
        layer.attempts += len(records)
        layer.calls += 1
    return dict(out)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
