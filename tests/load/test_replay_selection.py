"""What the recovery replay sends: seeded, deterministic choices of originals and controls, rebuilt bytes."""

from __future__ import annotations

import random

import pytest
from loadkit import scenario

from drill.load.output import OutputDigest
from drill.load.payload import PromptText, build_body, payload_digest
from drill.load.replay import ReplayItem, _sample, baseline_rate, choose_control_ids, control_items, original_items
from drill.load.schedule import build_schedule
from drill.rundir.records import RequestRecord
from drill.rundir.samples import FailingSample

T0 = 1_700_000_000.0


def _record(
    sc,
    planned,
    *,
    model: str = "m",
    ok: bool = True,
    attempt: int = 1,
    digest: str | None = None,
    output: str | None = "sha256:o",
) -> RequestRecord:
    pool = sc.pools[0]
    body = build_body(pool, model, planned.logical_id, planned.input_tokens, planned.output_tokens, PromptText(sc.seed))
    return RequestRecord(
        request_id=f"run-{planned.logical_id}-{attempt}",
        logical_id=planned.logical_id,
        pool=pool.name,
        attempt=attempt,
        intended_ts=T0 + planned.offset_s,
        sent_ts=T0 + planned.offset_s,
        schedule_lag_ms=0.0,
        status=200 if ok else 503,
        error=None if ok else "refused",
        ttft_ms=10.0,
        e2e_ms=50.0,
        planned_input_tokens=planned.input_tokens,
        planned_output_tokens=planned.output_tokens,
        trace_id="ab" * 16,
        idempotency_key=f"run-{planned.logical_id}",
        payload_digest=digest or payload_digest(body),
        output_digest=output if ok else None,
    )


def test_control_candidates_are_seeded_from_the_baseline_window() -> None:
    sc = scenario(20, seed=2)
    ids = choose_control_ids(sc, 10.0, sc.seed, (2.0, 6.0), 5)
    assert ids == choose_control_ids(sc, 10.0, sc.seed, (2.0, 6.0), 5) and len(ids) == 10
    planned = {r.logical_id: r.offset_s for r in build_schedule(sc, 10.0, sc.seed).requests}
    assert all(2.0 <= planned[i] < 6.0 for i in ids)
    assert ids != choose_control_ids(sc, 10.0, sc.seed, (2.0, 6.0), 5, sample_seed=99)
    assert choose_control_ids(sc, 10.0, sc.seed, (2.0, 6.0), 0) == []


def test_one_original_per_failed_logical_request_its_first_attempt() -> None:
    def sample(logical: str, attempt: int, at: float) -> FailingSample:
        return FailingSample(
            request_id=f"{logical}-{attempt}",
            logical_id=logical,
            pool="chat",
            attempt=attempt,
            trace_id="t",
            idempotency_key=logical,
            payload_digest=payload_digest(b"{}"),
            method="POST",
            endpoint="/v1/chat/completions",
            body_b64="e30=",
            intended_ts=at,
        )

    items = original_items([sample("a", 2, 1.5), sample("b", 1, 2.0), sample("a", 1, 1.0)])
    assert [(i.logical_id, i.original_request_id) for i in items] == [("a", "a-1"), ("b", "b-1")]
    assert all(i.intact and i.set == "original" for i in items)


def test_the_seeded_sample_does_not_depend_on_the_file_order() -> None:
    items = [f"chat-{i}" for i in range(50)]
    shuffled = items[:]
    random.Random(1).shuffle(shuffled)
    assert _sample(items, 7, "s") == _sample(shuffled, 7, "s") and len(_sample(items, 7, "s")) == 7
    assert _sample(items, 7, "s") != _sample(items, 7, "t")
    assert _sample(items[:3], 7, "s") == items[:3]


def test_control_bodies_are_rebuilt_and_checked_against_the_recorded_digest() -> None:
    sc = scenario(20, seed=4)
    planned = build_schedule(sc, 5.0, sc.seed).requests
    records = [
        _record(sc, planned[0]),
        _record(sc, planned[1], digest="sha256:other"),
        _record(sc, planned[2], ok=False),
        _record(sc, planned[3], output=None),
        _record(sc, planned[4], attempt=2),
        _record(sc, planned[40]),
    ]
    items = control_items(records, (T0, T0 + 1.5), sc, "m", sc.seed)
    assert [i.logical_id for i in items] == [planned[0].logical_id, planned[1].logical_id]
    assert [i.intact for i in items] == [True, False]  # the second's bytes are not what the run sent
    assert items[0].deterministic and items[0].headers["Idempotency-Key"] == records[0].idempotency_key
    other_model = control_items(records[:1], (T0, T0 + 1.5), sc, "another-model", sc.seed)
    assert not other_model[0].intact


def test_baseline_rate_counts_first_attempts_in_the_window() -> None:
    sc = scenario(20, seed=4)
    planned = build_schedule(sc, 5.0, sc.seed).requests
    records = [_record(sc, p) for p in planned] + [_record(sc, planned[0], attempt=2)]
    inside = sum(1 for p in planned if 1.0 <= p.offset_s < 3.0)
    assert baseline_rate(records, (T0 + 1.0, T0 + 3.0)) == inside / 2.0
    assert baseline_rate([], (T0, T0 + 1)) is None


def test_output_digest_is_the_generated_text_only() -> None:
    a, b = OutputDigest(), OutputDigest()
    a.feed_chunk(b'data: {"id":"x1","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n')
    a.feed_chunk(b'data: {"id":"x1","created":1,"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n')
    a.feed_chunk(b'data: {"id":"x1","created":2,"choices":[{"index":0,"delta":{"content":" world"}}]}')
    b.feed_body(b'{"id":"y","choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"}}]}')
    assert a.value() == b.value() == payload_digest(b"Hello world")
    c = OutputDigest()
    c.feed_chunk(b'data: {"choices":[{"index":0,"text":"Hello world"}]}')
    assert c.value() == a.value()
    torn = OutputDigest()
    torn.feed_chunk(b'data: {"choices":[{"index":0,"delta":{"content":"Hel')
    assert torn.value() is None and torn.unreadable == 1


def test_a_replay_item_at_temperature_above_zero_is_not_deterministic() -> None:
    item = ReplayItem(
        "control", "r", "l", "chat", "t", "k", "d", "POST", "/v1/chat/completions", {}, b'{"temperature":0.7}', True
    )
    assert not item.deterministic


def test_replay_phase_params_have_defaults_and_bounds() -> None:
    from pydantic import ValidationError

    from drill.spec.models import ReplayPhase

    phase = ReplayPhase()
    assert (phase.controls, phase.repetitions, phase.seed, phase.rate, phase.max_samples) == (20, 2, None, None, 200)
    assert ReplayPhase.model_validate({"controls": 0, "seed": 9, "rate": 2.5}).rate == 2.5
    for bad in ({"controls": -1}, {"repetitions": 1}, {"rate": 0}, {"max_samples": 0}, {"control": 3}):
        with pytest.raises(ValidationError):
            ReplayPhase.model_validate(bad)
