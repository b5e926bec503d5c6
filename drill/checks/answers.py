"""``output_correctness``: at temperature 0, every answer equals the golden answer to the same request bytes.

An HTTP 200 says nothing about the tokens: a decode worker that read stale or foreign KV blocks answers 200 with
other words (vLLM #52234, Dynamo #12463; ``docs/disaggregated.md``). This check compares each answer's digest
(``output_digest``, sha256 of the generated text, :mod:`drill.load.output`) with the golden answer to the same
request body (``payload_digest``: the same bytes, so at temperature 0 the same answer):

- **golden from the run** (the default): the answers the ``golden_phases`` (the baseline) gave to the same bytes.
  Every prompt of a run is new, so the runner makes a control set: ``control_share`` of the requests after the
  baseline re-send the exact body of a baseline request of their pool (:func:`drill.load.replay.choose_repeats`;
  temperature-0 pools only). A body the baseline answered in two different ways has no golden answer (the target
  is not deterministic on it; counted, never judged);
- **golden file**: ``golden_file``, a JSON-lines file inside the run directory whose lines carry
  ``payload_digest``, ``output_digest`` and optionally ``output_head`` — the ``requests.jsonl`` of a clean run of the
  same drill (same seed, same bytes) copied there does.

The load generator digests every temperature-0 answer (and keeps its first tokens, ``output_head``) when the
drill names this check (``LoadPlan.capture_outputs``); the replay's controls are digested in any drill. Judged are
the successful answers of ``judged_phases`` in pools whose temperature is 0 (``resolved.json``). A mismatch is a
FAIL whatever the HTTP status; the verdict names the requests and, from the first tokens, where each answer parts
from its golden one (the token itself only with ``report: {include_text: true}``, else its digest).

INCONCLUSIVE, never PASS: no answer could be compared (none digested, or none with a golden answer).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import Field, field_validator

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.load.output import token_digest
from drill.rundir.evidence import RunEvidence
from drill.rundir.jsonl import ReadReport, read_jsonl
from drill.rundir.records import RequestRecord

__all__ = ["GoldenAnswer", "OutputCorrectnessCheck", "OutputCorrectnessParams", "first_difference", "read_golden"]


@dataclass(frozen=True)
class GoldenAnswer:
    """The answer a request body must get: its text's digest, its first tokens, and where it came from."""

    payload_digest: str
    output_digest: str
    output_head: tuple[str, ...] | None
    source: str  # the request id (or golden-file line) it came from


def _golden_line(data: dict) -> GoldenAnswer | None:
    """One golden-file line; a line without an answer digest (a failed request of a copied requests.jsonl) is
    skipped, one of the wrong shape is a ValueError (counted by the reader)."""
    payload, output, head = data.get("payload_digest"), data.get("output_digest"), data.get("output_head")
    if not isinstance(payload, str) or not payload:
        raise ValueError("payload_digest: expected a non-empty string")
    if output is None:
        return None
    if not isinstance(output, str):
        raise ValueError("output_digest: expected a string")
    if head is not None and not (isinstance(head, list) and all(isinstance(t, str) for t in head)):
        raise ValueError("output_head: expected a list of strings")
    source = data.get("request_id")
    named = f"golden-file answer {source}" if isinstance(source, str) and source else "a golden-file answer"
    return GoldenAnswer(payload, output, tuple(head) if head is not None else None, named)


def read_golden(path: Path, report: ReadReport | None = None) -> Iterator[GoldenAnswer]:
    """The answers of a golden file (see the module docstring); unreadable lines are counted in ``report``."""
    for answer in read_jsonl(path, _golden_line, report):
        if answer is not None:
            yield answer


def first_difference(answer: tuple[str, ...] | None, golden: tuple[str, ...] | None) -> tuple[int, str, str] | None:
    """Where two answers' first tokens part: ``(index, this token, golden token)`` ("" past an end); None when
    either head is unknown or the heads agree as far as they go."""
    if answer is None or golden is None:
        return None
    for index in range(max(len(answer), len(golden))):
        mine = answer[index] if index < len(answer) else ""
        theirs = golden[index] if index < len(golden) else ""
        if mine != theirs:
            return index, mine, theirs
    return None


class OutputCorrectnessParams(CheckParams):
    golden_file: str | None = Field(
        None, description="a JSON-lines file of golden answers inside the run directory; None: the run's baseline"
    )
    golden_phases: tuple[str, ...] = Field(
        ("baseline",), min_length=1, description="phases whose answers are the golden ones (without a golden file)"
    )
    judged_phases: tuple[str, ...] = Field(
        ("fault", "recovery"), min_length=1, description="phases whose answers are compared with the golden ones"
    )
    max_mismatches: int = Field(0, ge=0, description="answers that may differ from their golden answer, at most")
    control_share: float = Field(
        0.25, ge=0, le=1, description="share of the later requests that re-send a baseline body (golden controls)"
    )
    min_compared: int = Field(1, ge=1, description="answers that need a golden answer before a PASS is given")

    @field_validator("golden_file")
    @classmethod
    def _inside_run(cls, value: str | None) -> str | None:
        if value is not None:
            path = PurePosixPath(value)
            if not value or path.is_absolute() or ".." in path.parts or "\\" in value:
                raise ValueError("golden_file must be a relative path inside the run directory (no '..')")
        return value


@dataclass
class _Comparison:
    compared: int = 0
    matched: int = 0
    mismatched: list[tuple[RequestRecord, GoldenAnswer]] = field(default_factory=list)
    not_captured: int = 0  # answered, but its text was not digested
    no_golden: int = 0  # digested, but no golden answer for its bytes
    not_deterministic_pools: tuple[str, ...] = ()


class OutputCorrectnessCheck(Check):
    """At temperature 0, every answer of the judged phases equals the golden answer to the same bytes."""

    kind = "output_correctness"
    Params = OutputCorrectnessParams
    params: OutputCorrectnessParams
    reads: tuple[str, ...] = ("journal.jsonl", "requests.jsonl")

    def __init__(self, params: OutputCorrectnessParams, name: str | None = None) -> None:
        super().__init__(params, name)
        if params.golden_file is not None:
            self.reads = (*type(self).reads, params.golden_file)

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        golden, ambiguous = self._golden(evidence)
        result = self._compare(evidence, golden)
        return self._judge(evidence, result, golden, ambiguous)

    # --- golden answers -------------------------------------------------------------------------------

    def _golden(self, evidence: RunEvidence) -> tuple[dict[str, GoldenAnswer], set[str]]:
        """Golden answers by payload digest, and the bodies whose golden answers disagree (left out)."""
        if self.params.golden_file is not None:
            answers = evidence.read(self.params.golden_file, read_golden)
        else:
            deterministic = _deterministic_pools(evidence)
            answers = [
                GoldenAnswer(r.payload_digest, r.output_digest, _head(r), r.request_id)
                for phase in self.params.golden_phases
                for r in evidence.requests_in(phase)
                if r.ok and r.output_digest and r.payload_digest and deterministic.get(r.pool, True)
            ]
        golden: dict[str, GoldenAnswer] = {}
        ambiguous: set[str] = set()
        for answer in answers:
            known = golden.setdefault(answer.payload_digest, answer)
            if known.output_digest != answer.output_digest:
                ambiguous.add(answer.payload_digest)
        for payload in ambiguous:
            del golden[payload]
        return golden, ambiguous

    # --- comparing ----------------------------------------------------------------------------------------

    def _compare(self, evidence: RunEvidence, golden: dict[str, GoldenAnswer]) -> _Comparison:
        deterministic = _deterministic_pools(evidence)
        result = _Comparison(not_deterministic_pools=tuple(sorted(p for p, d in deterministic.items() if not d)))
        seen: set[str] = set()
        for phase in self.params.judged_phases:
            for record in evidence.requests_in(phase):
                if not record.ok or record.request_id in seen or not deterministic.get(record.pool, True):
                    continue
                seen.add(record.request_id)
                if not record.output_digest:
                    result.not_captured += 1
                    continue
                answer = golden.get(record.payload_digest)
                if answer is None:
                    result.no_golden += 1
                    continue
                if answer.source == record.request_id:
                    continue  # the golden answer itself (a judged phase that is also a golden one)
                result.compared += 1
                if record.output_digest == answer.output_digest:
                    result.matched += 1
                else:
                    result.mismatched.append((record, answer))
        return result

    # --- the verdict --------------------------------------------------------------------------------------

    def _judge(
        self, evidence: RunEvidence, c: _Comparison, golden: dict[str, GoldenAnswer], ambiguous: set[str]
    ) -> Verdict:
        p = self.params
        mismatched = c.mismatched
        include_text = _include_text(evidence)
        source = f"the golden file {p.golden_file}" if p.golden_file else f"the {'/'.join(p.golden_phases)} answers"
        observed: dict[str, Any] = {
            "compared": c.compared,
            "matched": c.matched,
            "mismatched": len(mismatched),
            "mismatched_http_200": sum(1 for r, _ in mismatched if r.status == 200),
            "mismatched_request_ids": sorted(r.request_id for r, _ in mismatched),
            "not_captured": c.not_captured,
            "no_golden": c.no_golden,
            "golden_answers": len(golden),
            "ambiguous_golden": len(ambiguous),
        }
        units = {k: "requests" for k in observed if k not in ("mismatched_request_ids", "golden_answers")}
        units["golden_answers"] = "request bodies"
        units["ambiguous_golden"] = "request bodies"
        notes = list(_notes(c, ambiguous))
        common: dict[str, Any] = dict(
            observed=observed,
            expected={"mismatched": f"<= {p.max_mismatches}", "compared": f">= {p.min_compared}"},
            units=units,
            window="/".join(p.judged_phases),
            notes=tuple(notes),
        )
        if len(mismatched) > p.max_mismatches:
            first = mismatched[0]
            return self.verdict(
                Status.FAIL,
                f"{len(mismatched)} of {c.compared} answer(s) differ from {source} for the same request bytes "
                f"({observed['mismatched_http_200']} of them HTTP 200; at most {p.max_mismatches} allowed); "
                f"first: {first[0].request_id} {_where(first, include_text)}",
                evidence=_mismatch_refs(mismatched, include_text),
                **common,
            )
        if c.compared < p.min_compared:
            why = (
                "no judged answer was digested (the load generator digests them when the drill names this check)"
                if c.compared == 0 and c.no_golden == 0
                else f"{c.no_golden} digested answer(s) have no golden answer in {source}"
            )
            return self.verdict(
                Status.INCONCLUSIVE, f"{c.compared} answer(s) compared ({p.min_compared} needed): {why}", **common
            )
        return self.verdict(
            Status.PASS,
            f"{c.matched}/{c.compared} answer(s) equal {source} for the same request bytes",
            **common,
        )


def _head(record: RequestRecord) -> tuple[str, ...] | None:
    return tuple(record.output_head) if record.output_head is not None else None


def _deterministic_pools(evidence: RunEvidence) -> dict[str, bool]:
    """Per pool of ``resolved.json``, whether it samples at temperature 0 (a pool not listed: assumed so)."""
    pools = (evidence.resolved.get("scenario") or {}).get("pools") or []
    found = {}
    for pool in pools:
        if isinstance(pool, dict) and isinstance(pool.get("name"), str):
            sampling = pool.get("sampling") if isinstance(pool.get("sampling"), dict) else {}
            found[pool["name"]] = (sampling or {}).get("temperature", 0.0) == 0
    return found


def _include_text(evidence: RunEvidence) -> bool:
    report = (evidence.resolved.get("drill") or {}).get("report") or {}
    return isinstance(report, dict) and report.get("include_text") is True


def _shown(token: str, include_text: bool) -> str:
    """A token as a verdict may show it: itself (JSON-quoted) with ``include_text``, else its digest."""
    if include_text:
        return json.dumps(token)
    if not token:
        return "(end)"
    if token.startswith("sha256:"):
        return token  # the load generator kept only the token's digest
    return f"sha256:{hashlib.sha256(token.encode('utf-8')).hexdigest()[:12]} ({len(token)} chars)"


def _comparable(
    answer: tuple[str, ...] | None, golden: tuple[str, ...] | None
) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """Both heads as digests when either holds digests only (a run without ``include_text``)."""
    if answer is None or golden is None:
        return answer, golden
    if any(t.startswith("sha256:") for t in answer + golden):
        digested = lambda head: tuple(t if t.startswith("sha256:") else token_digest(t) for t in head)  # noqa: E731
        return digested(answer), digested(golden)
    return answer, golden


def _where(pair: tuple[RequestRecord, GoldenAnswer], include_text: bool) -> str:
    record, golden = pair
    difference = first_difference(*_comparable(_head(record), golden.output_head))
    if difference is None:
        if record.output_head is not None and golden.output_head is not None:
            return f"(differs from {golden.source} after its first {len(golden.output_head)} tokens)"
        return f"(differs from {golden.source}; first tokens not recorded)"
    index, mine, theirs = difference
    return (
        f"(first differing token #{index}: {_shown(mine, include_text)}, "
        f"golden {_shown(theirs, include_text)} from {golden.source})"
    )


def _mismatch_refs(mismatched: list[tuple[RequestRecord, GoldenAnswer]], include_text: bool) -> list[EvidenceRef]:
    refs = []
    for pair in mismatched:
        record = pair[0]
        refs.append(
            EvidenceRef(EvidenceKind.REQUEST, record.request_id, f"HTTP {record.status}, {_where(pair, include_text)}")
        )
        if record.trace_id:
            refs.append(EvidenceRef(EvidenceKind.TRACE, record.trace_id, f"trace of {record.request_id}"))
    return refs


def _notes(c: _Comparison, ambiguous: set[str]) -> Iterator[str]:
    if c.not_deterministic_pools:
        yield f"pool(s) {', '.join(c.not_deterministic_pools)} sample above temperature 0: not judged"
    if ambiguous:
        yield f"{len(ambiguous)} request body(ies) got different golden answers: left out (not deterministic)"
    if c.not_captured:
        yield f"{c.not_captured} answer(s) were not digested by the load generator"
    if c.no_golden:
        yield f"{c.no_golden} answer(s) had no golden answer for their bytes"
