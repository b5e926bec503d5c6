"""The report's headline: the run's outcome and, in one sentence, what happened in the drill's terms.

The sentence is derived from the verdicts and the run's evidence, never written per drill: the verdicts that decided
the outcome (the ones with the worst status; the failure-case checks first) each give a clause in their check's
words — ``fast_failure`` says whether overload was refused or left to wait and how many of the late attempts were
refused, with the pools whose requests timed out and when (from ``requests.jsonl``); ``slo`` names the bound that
was missed; ``error_rate`` the share that failed — and a passing ``first_abnormal_span`` says where it showed first.
A check without a clause of its own gives its name, status and the first part of its message.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable

from drill.api import Status, Verdict
from drill.checks.failures import GATEWAY_TIMEOUTS
from drill.checks.judging import records_in, time_to_failure_ms, window_of
from drill.report.model import Headline, VerdictLine
from drill.rundir.evidence import RunEvidence
from drill.rundir.records import ErrorClass
from drill.stats import percentile

__all__ = ["headline"]

#: Check kinds whose verdict is the drill's finding before the others', in this order (the failure case first,
#: then what users saw, then recovery); the rest follow in the drill's order.
_LEAD_KINDS = (
    "fast_failure",
    "duplicate_side_effects",
    "retry_budget",
    "slo",
    "error_rate",
    "recovery_time",
    "recovery_replay",
    "fault_landed",
)
_WORST_FIRST = (Status.ERROR, Status.FAIL, Status.INCONCLUSIVE, Status.PASS)
#: The most verdicts the sentence names one by one; the others are counted.
_MOST_CLAUSES = 2


def headline(
    evidence: RunEvidence,
    verdicts: list[Verdict],
    lines: tuple[VerdictLine, ...],
    outcome: str,
    redact: Callable[[str], str] = str,
) -> Headline:
    """The headline of a run: ``outcome`` (the report header's), the finding sentence and how it matched the
    drill's predictions (``lines`` are the verdict lines, which carry them). ``redact`` is the report's redactor:
    the sentence quotes verdict messages and span names, which may carry what a report never shows."""
    if not verdicts:
        return Headline(
            outcome, "The run was not judged: it has no verdicts.json (drill judge RUN_DIR judges it).", "", ()
        )
    worst = next(s for s in _WORST_FIRST if any(v.status is s for v in verdicts))
    decisive = sorted((v for v in verdicts if v.status is worst), key=_lead_rank)
    if worst is Status.PASS:
        decisive = [v for v in decisive if v.kind != "fault_landed"] or decisive
    named = decisive[:_MOST_CLAUSES]
    clauses = [_clause(v, evidence) for v in named]
    if len(decisive) > len(named):
        clauses.append(f"{len(decisive) - len(named)} more {worst.value}")
    where = next((v for v in verdicts if v.kind == "first_abnormal_span" and v.status is Status.PASS), None)
    if where is not None and where not in named:
        clauses.append(_first_abnormal_span(where, evidence))
    lead = "every check passed — " if worst is Status.PASS and len(verdicts) > 1 else ""
    sentence = lead + "; ".join(c for c in clauses if c)
    text = _sentence(sentence, {v.name for v in verdicts})
    return Headline(outcome, redact(text), redact(_predictions(lines)), tuple(v.name for v in named))


def _lead_rank(v: Verdict) -> int:
    return _LEAD_KINDS.index(v.kind) if v.kind in _LEAD_KINDS else len(_LEAD_KINDS)


def _sentence(text: str, names: set[str]) -> str:
    """``text`` as a sentence: capitalised unless it starts with a name (a verdict's, ``recovered``; a check's or a
    service's, ``fast_failure``, ``drill-replica-0``), which keeps its spelling; a full stop at the end."""
    text = text.strip()
    if not text:
        return text
    first = text.split(" ", 1)[0].rstrip(":")
    if first.isalpha() and first not in names:
        text = text[0].upper() + text[1:]
    return text + ("" if text.endswith(".") else ".")


def _predictions(lines: tuple[VerdictLine, ...]) -> str:
    predicted = [v for v in lines if v.predicted is not None]
    if not predicted:
        return "The drill predicts no verdict."
    missed = [v for v in predicted if not v.as_predicted]
    if not missed:
        return f"Every predicted verdict as predicted ({len(predicted)} of {len(lines)} verdicts predicted)."
    return (
        f"{len(predicted) - len(missed)} of {len(predicted)} predicted verdicts as predicted; not as predicted: "
        + ", ".join(f"{v.name} {v.status} (predicted {v.predicted})" for v in missed)
        + "."
    )


# --- one clause per check kind -------------------------------------------------------------------------------


def _clause(v: Verdict, evidence: RunEvidence) -> str:
    made = _CLAUSES.get(v.kind)
    text = made(v, evidence) if made is not None else None
    return text or _generic(v)


def _generic(v: Verdict) -> str:
    """``name STATUS: the message up to its details`` (the part before `` — ``)."""
    message = v.message.split(" — ", 1)[0].strip()
    return f"{v.name} {v.status.value}" + (f": {message}" if message else "")


def _fast_failure(v: Verdict, evidence: RunEvidence) -> str | None:
    o = v.observed
    refused, late = o.get("refused"), o.get("not_on_time")
    if not isinstance(refused, int) or not isinstance(late, int):
        return None
    counted = f"{refused:,} of {late:,} late attempts refused"
    if v.status is Status.INCONCLUSIVE:
        return f"the fault did not overload the stack enough to judge fast failure: {late:,} attempts late or failed"
    if v.status is Status.PASS:
        p99 = o.get("refusal_ttf_p99_ms")
        return f"overload was refused fast: {counted}" + (f", within {_ms(p99)} at p99" if _number(p99) else "")
    if v.status is not Status.FAIL:
        return None
    waited = _over_bound(o.get("waited_share"), v.expected.get("waited_share")) or _over_bound(
        o.get("timeout_share"), v.expected.get("timeout_share")
    )
    if waited:
        timeouts = _timeouts_by_pool(v, evidence)
        left = o.get("left_to_wait")
        if refused and isinstance(left, int):  # a bounded queue refused some, and what it admitted waited
            lead = f"overload was partly refused, partly left to wait: {counted}, {left:,} left to wait"
            p99 = o.get("refusal_ttf_p99_ms")
            slow = _over_bound(p99, v.expected.get("refusal_ttf_p99_ms"))
            lead += f"; refusals took {_ms(p99)} at p99" if slow else ""
        else:
            lead = f"overload was left to wait: {counted}"
        return lead + (f"; {timeouts}" if timeouts else "")
    p99 = o.get("refusal_ttf_p99_ms")
    return f"overload was refused, but slowly: {counted}, taking {_ms(p99)} at p99" if _number(p99) else None


def _timeouts_by_pool(v: Verdict, evidence: RunEvidence) -> str:
    """``"1,933 batch requests timed out at 30 s"`` — the pools whose attempts in the verdict's window timed out
    (the client's deadline or a gateway's 504/408), most first, at the median time they waited."""
    window = window_of(evidence, v.window or "fault")
    if window is None:
        return ""
    waits: dict[str, list[float]] = defaultdict(list)
    for r in records_in(evidence, window):
        if r.error is ErrorClass.TIMEOUT or (r.status in GATEWAY_TIMEOUTS and not r.ok):
            ms = time_to_failure_ms(r)
            if ms is not None:
                waits[r.pool].append(ms)
    pools = sorted(waits, key=lambda pool: (-len(waits[pool]), pool))[:2]
    parts = [f"{len(waits[pool]):,} {pool} requests timed out at {_ms(percentile(waits[pool], 50))}" for pool in pools]
    return " and ".join(parts)


def _slo(v: Verdict, evidence: RunEvidence) -> str | None:
    if v.status is Status.PASS:
        return f"every SLO held in {v.window}" if v.window else None
    if v.status is not Status.FAIL:
        return None
    missed = [
        (key, value, limit)
        for key, raw in v.observed.items()
        if not key.startswith(("goodput.", "measurement_truth."))
        and (value := _float(raw)) is not None
        and (limit := _bound(v.expected.get(key))) is not None
        and value > limit
    ]
    if not missed:
        return None
    shown = ", ".join(f"{key.replace('.', ' ')} {_ms(value)} (limit {_ms(limit)})" for key, value, limit in missed[:2])
    return f"the SLO was missed in {v.window}: {shown}"


def _error_rate(v: Verdict, evidence: RunEvidence) -> str | None:
    rate, requests = _float(v.observed.get("error_rate")), v.observed.get("requests")
    if v.status not in (Status.PASS, Status.FAIL) or rate is None or not isinstance(requests, int):
        return None
    limit = _bound(v.expected.get("error_rate"))
    bound = f" (max {limit:.1%})" if limit is not None else ""
    what = f"{rate:.1%} of {requests:,} requests in {v.window} failed{bound}"
    if v.status is Status.FAIL:
        return f"{v.name} FAIL: {what}"
    return what if v.name == v.kind else f"{v.name}: {what}"  # a name the drill gave says what was asked


def _first_abnormal_span(v: Verdict, evidence: RunEvidence) -> str:
    o = v.observed
    if v.status is not Status.PASS or not o.get("service"):
        return _generic(v)
    deviation = f" ({str(o['deviation']).split(' (', 1)[0]})" if o.get("deviation") else ""
    return f"it showed first in {o['service']}/{o.get('name')}{deviation}"


def _fault_landed(v: Verdict, evidence: RunEvidence) -> str | None:
    return None if v.status is Status.PASS else f"the fault did not land as planned: {_generic(v).split(': ', 1)[-1]}"


_CLAUSES: dict[str, Callable[[Verdict, RunEvidence], str | None]] = {
    "fast_failure": _fast_failure,
    "slo": _slo,
    "error_rate": _error_rate,
    "first_abnormal_span": _first_abnormal_span,
    "fault_landed": _fault_landed,
}


# --- numbers ---------------------------------------------------------------------------------------------------

_BOUND = re.compile(r"^\s*<=?\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)\s*$")


def _float(value: object) -> float | None:
    """``value`` as a float when it is a number (not a bool, not NaN), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def _number(value: object) -> bool:
    return _float(value) is not None


def _bound(expected: object) -> float | None:
    """The upper bound of an expected figure such as ``"<= 0.15"`` (None for anything else)."""
    match = _BOUND.match(expected) if isinstance(expected, str) else None
    return float(match.group(1)) if match else None


def _over_bound(value: object, expected: object) -> bool:
    limit, number = _bound(expected), _float(value)
    return number is not None and limit is not None and number > limit


def _ms(value: object) -> str:
    """A duration in ms as a reader says it: ``573 ms``, ``1.2 s``, ``30 s``."""
    ms = _float(value)
    if ms is None:
        return "an unknown time"
    if abs(ms) < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    return f"{seconds:.1f} s" if abs(seconds) < 10 else f"{seconds:.0f} s"
