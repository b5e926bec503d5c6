"""``recovery_replay``: after recovery, the requests that failed pass again and the controls did not regress.

Reads ``replay.jsonl`` (written by :mod:`drill.load.replay` in the replay phase),
``failing_samples.jsonl`` (the originals' bytes and outcomes), ``requests.jsonl``
(the controls' baseline records: payload and output digests, latencies) and the
journal (did the replay phase run). A replay proves something only if it sent the
same bytes: every replayed line's ``payload_digest`` must equal its original's
(the failing sample's for ``original``, the baseline record's for ``control``);
one that does not is a FAIL, never a pass.

- **Originals**: each must now succeed within its pool's SLO (every bound of
  ``evidence.slo_by_pool``, applied per request as goodput does; a pool without an
  SLO needs success only). ``min_success`` of them (99%) must pass.
- **Controls** (baseline successes replayed ``repetitions`` times): each send must
  succeed with TTFT and E2E within ``latency_factor`` x the pool's baseline
  ``band_percentile`` + ``latency_slack`` (from the send: the baseline records'
  values less their schedule lag; the rules' "baseline p99 x 1.5", with 50 ms for
  the scheduler's jitter on a busy host); ``min_success`` of the controls must pass. A deterministic request
  (temperature 0) must give the baseline's text byte for byte (its sha256), on every
  repetition. For the others, differences from the baseline (output text, token
  count) count only above the noise floor that the replays' own disagreement
  shows — Diffy's rule: raw > noise, ``|raw - noise| / (raw + noise)`` > 20% and
  ``|raw - noise| / total`` > 0.03% (opendiffy ``JoinedDifferences.scala``).

The replay starts once recovery is observed (:mod:`drill.runner.recovery_gate`: queue depth and error rate back
in the baseline band), within a bounded wait; the verdict's notes say when and why. When the wait gave up, originals
that still fail make the verdict INCONCLUSIVE, not FAIL: a stack that had not recovered cannot show a fix.

INCONCLUSIVE, never PASS: the replay phase did not run (``max_duration`` ended the
run first, or it was turned off), the drill had no failing samples, no original was
replayed, or no control was (so "no regression" cannot be said).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.checks.judging import meets_slo
from drill.rundir.evidence import RunEvidence
from drill.rundir.records import ErrorClass, RequestRecord
from drill.rundir.replay_results import ReplayResult, ReplayResults
from drill.stats import percentile
from drill.units import Duration

__all__ = ["RecoveryReplayCheck", "RecoveryReplayParams", "above_noise"]


def above_noise(raw: int, noise: int, total: int, relative_pct: float = 20.0, absolute_pct: float = 0.03) -> bool:
    """Diffy's rule: a difference counts only when it exceeds the noise by both thresholds (percent)."""
    if total <= 0 or raw <= noise:
        return False
    relative = abs(raw - noise) / (raw + noise) * 100.0
    absolute = abs(raw - noise) / total * 100.0
    return relative > relative_pct and absolute > absolute_pct


class RecoveryReplayParams(CheckParams):
    min_success: float = Field(0.99, ge=0, le=1)  # share of originals (and of controls) that must pass
    latency_factor: float = Field(1.5, gt=0)  # controls: latency at most this x the baseline band
    latency_slack: Duration = 0.05  # ... plus this (s): scheduler jitter on tiny latencies
    band_percentile: float = Field(99.0, gt=0, le=100)
    min_baseline: int = Field(5, ge=1)  # baseline successes a pool needs for a latency band
    noise_relative: float = Field(20.0, ge=0)  # percent (Diffy threshold.relative)
    noise_absolute: float = Field(0.03, ge=0)  # percent (Diffy threshold.absolute)
    # deterministic (temperature 0) controls whose answer may differ from the baseline's: 0 for a batch-invariant
    # server (the embedded stack); vLLM is not one unless VLLM_BATCH_INVARIANT=1 on a GPU that supports it, and a
    # greedy answer there can change with the batch (or prefix-cache hit) it was computed in (docs/checks.md)
    max_output_mismatches: int = Field(0, ge=0)


@dataclass
class _ReplayFindings:
    """What the judging found, with the evidence for each finding."""

    not_identical: list[ReplayResult]
    originals_failed: list[ReplayResult]
    originals_ok: list[ReplayResult]
    reproduced: int
    controls_failed: list[ReplayResult]
    control_ids: set[str]
    controls_passed: int
    mismatches: list[ReplayResult]  # deterministic outputs that differ from the baseline
    noisy: dict[str, tuple[int, int, int]]  # field -> (raw, noise, total) for non-deterministic controls
    regressions: list[str]  # fields above the noise floor
    notes: list[str]

    @property
    def changed_controls(self) -> int:
        """Deterministic controls with at least one send whose answer differs from the baseline's."""
        return len({r.original_request_id for r in self.mismatches})


class RecoveryReplayCheck(Check):
    """The failed requests pass after recovery, byte-identical, and the baseline controls did not regress."""

    kind = "recovery_replay"
    Params = RecoveryReplayParams
    params: RecoveryReplayParams
    reads = ("journal.jsonl", "requests.jsonl", "failing_samples.jsonl", "replay.jsonl")

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        replay = evidence.replay
        if not replay.ran:
            why = f" (the run was stopped by {replay.stopped_by})" if replay.stopped_by else ""
            return self.verdict(Status.INCONCLUSIVE, f"the replay phase did not run{why}", window="replay")
        if not replay.samples:
            return self.verdict(
                Status.INCONCLUSIVE,
                "no failing samples: the drill had no failed request to replay",
                observed={"failing_samples": 0},
                units={"failing_samples": "requests"},
                window="replay",
            )
        tally = self._tally(evidence, replay)
        return self._judge(replay, tally)

    # --- judging ------------------------------------------------------------------------------------

    def _tally(self, evidence: RunEvidence, replay: ReplayResults) -> _ReplayFindings:
        p: RecoveryReplayParams = self.params
        samples = {s.request_id: s for s in replay.samples}
        records = {r.request_id: r for r in evidence.requests}
        tally = _ReplayFindings([], [], [], 0, [], set(), 0, [], {}, [], [])
        for result in replay.originals:
            original = samples.get(result.original_request_id)
            if original is None or result.payload_digest != original.payload_digest:
                tally.not_identical.append(result)
                continue
            tally.reproduced += result.reproduced
            if meets_slo(_as_record(result), evidence.slo_by_pool.get(result.pool) or {}):
                tally.originals_ok.append(result)
            else:
                tally.originals_failed.append(result)
        bands = _latency_bands(evidence, p)
        by_control: dict[str, list[ReplayResult]] = defaultdict(list)
        for result in replay.controls:
            baseline = records.get(result.original_request_id)
            if (
                baseline is None
                or not baseline.ok
                or not baseline.output_digest
                or result.payload_digest != baseline.payload_digest
            ):
                tally.not_identical.append(result)
                continue
            by_control[result.original_request_id].append(result)
        for request_id, sends in by_control.items():
            self._judge_control(records[request_id], sends, bands, tally)
        self._noise_floor(records, by_control, tally)
        lag = _send_lag_s(replay.results)
        if lag is not None and lag > 1.0:
            tally.notes.append(
                f"replayed requests were sent up to {lag:.1f}s (p95) after their planned times: "
                "the replay's concurrency cap held them back from the planned rate"
            )
        if 0 < tally.changed_controls <= p.max_output_mismatches:
            tally.notes.append(
                f"{tally.changed_controls} deterministic control(s) answered other than in the baseline, within "
                f"max_output_mismatches {p.max_output_mismatches}"
            )
        start_note = _start_note(replay.recovery)
        if start_note:
            tally.notes.append(start_note)
        missing = sorted({r.pool for r in replay.controls} - set(bands))
        if missing:
            tally.notes.append(
                f"no latency band for pool(s) {', '.join(missing)} (fewer than {p.min_baseline} "
                "baseline successes): control latency not judged"
            )
        return tally

    def _judge_control(
        self,
        baseline: RequestRecord,
        sends: list[ReplayResult],
        bands: dict[str, dict[str, float]],
        tally: _ReplayFindings,
    ) -> None:
        tally.control_ids.add(baseline.request_id)
        band = bands.get(baseline.pool, {})
        failed = [s for s in sends if not s.ok or any(_over(s, metric, bound) for metric, bound in band.items())]
        tally.controls_failed.extend(failed)
        tally.controls_passed += not failed
        if sends[0].deterministic:
            tally.mismatches.extend(s for s in sends if s.ok and s.output_digest != baseline.output_digest)

    def _noise_floor(
        self, records: dict[str, RequestRecord], by_control: dict[str, list[ReplayResult]], tally: _ReplayFindings
    ) -> None:
        """Raw differences (first replay vs baseline) against noise (first vs second replay), per field."""
        p: RecoveryReplayParams = self.params
        pairs = []
        for request_id, sends in by_control.items():
            ok = sorted((s for s in sends if s.ok), key=lambda s: s.repetition)
            if len(ok) >= 2 and not ok[0].deterministic:
                pairs.append((records[request_id], ok[0], ok[1]))
        for name, value in (
            ("output", lambda x: x.output_digest),
            ("completion_tokens", lambda x: x.completion_tokens),
        ):
            raw = sum(value(first) != value(base) for base, first, _ in pairs)
            noise = sum(value(first) != value(second) for _, first, second in pairs)
            tally.noisy[name] = (raw, noise, len(pairs))
            if above_noise(raw, noise, len(pairs), p.noise_relative, p.noise_absolute):
                tally.regressions.append(f"{name}: {raw}/{len(pairs)} differ from the baseline, noise {noise}")

    def _judge(self, replay: ReplayResults, t: _ReplayFindings) -> Verdict:
        p: RecoveryReplayParams = self.params
        passed = len(t.originals_ok)
        originals = passed + len(t.originals_failed)
        observed, expected, units = self._figures(replay, t, originals)
        common: dict[str, Any] = dict(
            observed=observed, expected=expected, units=units, window="replay", notes=tuple(t.notes)
        )
        problems = []
        if t.not_identical:
            problems.append(
                f"{len(t.not_identical)} replay(s) did not send the original bytes (payload digest "
                "differs or no such original): a replay of new requests proves nothing"
            )
        if originals and passed < p.min_success * originals:
            problems.append(
                f"{len(t.originals_failed)} of {originals} original(s) still fail or miss the SLO "
                f"({t.reproduced} reproduced the original error)"
            )
        controls = len(t.control_ids)
        if controls and t.controls_passed < p.min_success * controls:
            problems.append(
                f"{controls - t.controls_passed} of {controls} control(s) regressed "
                f"(failed, or slower than {p.latency_factor:g}x the baseline p{p.band_percentile:g})"
            )
        if t.changed_controls > p.max_output_mismatches:
            problems.append(
                f"{t.changed_controls} deterministic control(s) answered other than in the baseline "
                f"({len(t.mismatches)} send(s); at most {p.max_output_mismatches} allowed: a server that is not "
                "batch-invariant, vLLM by default, can change a greedy answer with the batch it was computed in)"
            )
        problems.extend(f"non-deterministic controls above the noise floor: {r}" for r in t.regressions)
        if problems and replay.started_unrecovered and not t.not_identical:
            return self.verdict(
                Status.INCONCLUSIVE,
                "; ".join(problems) + " — but the replay started before recovery was observed: failures on a stack "
                "that had not recovered say nothing about the fix",
                evidence=_refs(t),
                **common,
            )
        if problems:
            return self.verdict(Status.FAIL, "; ".join(problems), evidence=_refs(t), **common)
        if not originals:
            return self.verdict(
                Status.INCONCLUSIVE, f"no original was replayed ({len(replay.samples)} failing sample(s))", **common
            )
        if not controls:
            return self.verdict(
                Status.INCONCLUSIVE,
                f"{passed}/{originals} original(s) pass, but no control was replayed: no regression cannot be shown",
                **common,
            )
        return self.verdict(
            Status.PASS,
            f"{passed}/{originals} original(s) now pass within the SLO; "
            f"{t.controls_passed}/{controls} control(s) unchanged",
            evidence=_refs(t, passing=True),
            **common,
        )

    def _figures(self, replay: ReplayResults, t: _ReplayFindings, originals: int) -> tuple[dict, dict, dict]:
        p: RecoveryReplayParams = self.params
        observed: dict[str, Any] = {
            "failing_samples": len(replay.samples),
            "failed_requests": len({s.logical_id for s in replay.samples}),  # distinct logical requests
            "originals_replayed": originals,
            "originals_passed": len(t.originals_ok),
            "reproduced_failures": t.reproduced,
            "controls_replayed": len(t.control_ids),
            "control_sends": sum(1 for r in replay.controls),
            "controls_passed": t.controls_passed,
            "output_mismatches": len(t.mismatches),  # sends
            "controls_with_other_output": t.changed_controls,
            "not_identical": len(t.not_identical),
        }
        for name, (raw, noise, total) in t.noisy.items():
            if total:
                observed[f"nondeterministic.{name}"] = {"raw": raw, "noise": noise, "total": total}
        expected = {
            "originals_passed": f">= {p.min_success:g} x originals_replayed, each within its pool's SLO",
            "controls_passed": f">= {p.min_success:g} x controls_replayed, latency <= {p.latency_factor:g} x "
            f"baseline p{p.band_percentile:g} + {p.latency_slack * 1000:g}ms",
            "controls_with_other_output": f"<= {p.max_output_mismatches} (temperature 0: byte-equal to the baseline)",
            "not_identical": "0 (replayed payload_digest == original's)",
            "nondeterministic": f"raw <= noise, or |raw-noise|/(raw+noise) <= {p.noise_relative:g}% or "
            f"|raw-noise|/total <= {p.noise_absolute:g}%",
        }
        units = {k: "requests" for k in observed if not k.startswith("nondeterministic")}
        units.update({k: "requests (raw, noise, total)" for k in observed if k.startswith("nondeterministic")})
        return observed, expected, units


def _latency_bands(evidence: RunEvidence, p: RecoveryReplayParams) -> dict[str, dict[str, float]]:
    """Per pool, the most a control may take (ms from its send): factor x the baseline's percentile."""
    by_pool: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in evidence.requests_in("baseline"):
        if record.ok:
            by_pool[record.pool].append(record)
    bands = {}
    for pool, records in by_pool.items():
        if len(records) < p.min_baseline:
            continue
        lag = [r.schedule_lag_ms or 0.0 for r in records]
        band = {}
        for metric in ("ttft_ms", "e2e_ms"):
            values = [v - d for r, d in zip(records, lag) if (v := getattr(r, metric)) is not None]
            base = percentile(values, p.band_percentile) if len(values) >= p.min_baseline else None
            if base is not None:
                band[metric] = p.latency_factor * base + p.latency_slack * 1000.0
        bands[pool] = band
    return bands


def _start_note(recovery: dict | None) -> str | None:
    """When the replay started and why, from the runner's wait for recovery."""
    if recovery is None:
        return None
    waited, reason = recovery.get("waited_s"), recovery.get("reason", "")
    after = f"{waited:.1f}s after the load stopped" if isinstance(waited, int | float) else "after the load stopped"
    if recovery.get("observed"):
        return f"the replay started {after}, once recovery was observed: {reason}"
    if recovery.get("queue_held"):
        return f"the replay started {after} without observed recovery (errors out of band): {reason}"
    return (
        f"the replay started {after} without observed recovery (gave up waiting after "
        f"{recovery.get('max_wait_s', '?')}s): {reason}"
    )


def _send_lag_s(results: tuple[ReplayResult, ...]) -> float | None:
    """p95 of how late the replays were sent after their planned times (s)."""
    lags = [r.sent_ts - r.planned_ts for r in results if r.planned_ts is not None]
    return percentile(lags, 95) if lags else None


def _over(result: ReplayResult, metric: str, bound_ms: float) -> bool:
    value = getattr(result, metric)
    return value is not None and value > bound_ms


def _as_record(result: ReplayResult) -> RequestRecord:
    """A replay as a client record (times from its send), for the per-request SLO test."""
    try:
        error = None if result.error is None else ErrorClass(result.error)
    except ValueError:
        error = ErrorClass.SERVER_ERROR  # an error class this version does not know is still a failure
    return RequestRecord(
        request_id=result.request_id,
        logical_id=result.logical_id,
        pool=result.pool,
        attempt=1,
        intended_ts=result.sent_ts,
        sent_ts=result.sent_ts,
        schedule_lag_ms=0.0,
        status=result.status,
        error=error,
        ttft_ms=result.ttft_ms,
        e2e_ms=result.e2e_ms,
        completion_tokens=result.completion_tokens,
    )


def _refs(t: _ReplayFindings, passing: bool = False) -> list[EvidenceRef]:
    """Replay ids, original request ids and trace ids of each finding, the most telling first."""
    refs: list[EvidenceRef] = []
    groups = [
        ("not the original bytes", t.not_identical),
        ("original still fails", t.originals_failed),
        ("deterministic output differs", t.mismatches),
        ("control regressed", t.controls_failed),
    ]
    for note, results in groups:
        for r in results:
            refs.extend(_ref_triple(r, note))
    if passing and not refs:
        for r in t.originals_ok[:10]:
            refs.extend(_ref_triple(r, "original passes now"))
    return refs


def _ref_triple(r: ReplayResult, note: str) -> list[EvidenceRef]:
    detail = f"{note}: {r.error or r.status}" if r.error else note
    return [
        EvidenceRef(EvidenceKind.REPLAY, r.request_id, detail),
        EvidenceRef(EvidenceKind.REQUEST, r.original_request_id, f"original of {r.request_id}"),
        EvidenceRef(EvidenceKind.TRACE, r.trace_id, f"replay trace (original {r.original_trace_id})"),
    ]
