"""What the verdicts ask of the people who own the stack, and what the drill did not test.

:func:`action_items` maps each verdict that is not a PASS to concrete actions: a FAIL by its check kind (the
mitigations the runbooks and the serving literature give for that failure), an INCONCLUSIVE to what would make
the evidence sufficient, an ERROR to fixing the check. :func:`coverage_gaps` lists the inputs, capacity,
permissions and dependencies the run did not exercise, from its own records and resolved drill.
"""

from __future__ import annotations

from collections import Counter

from drill import registry
from drill.api import Status, Verdict
from drill.report.model import ActionItem, CoverageGap
from drill.rundir.evidence import RunEvidence

__all__ = ["FAIL_ACTIONS", "action_items", "coverage_gaps"]

#: check kind -> what to do when it FAILs (the runbooks' mitigations, in the order to try them).
FAIL_ACTIONS: dict[str, tuple[str, ...]] = {
    "fast_failure": (
        "Bound admission on the engine: vLLM `--max-num-queued-reqs N` (the embedded stack's "
        "`engine.max_num_queued_reqs`), sized as target TTFT × sustainable request rate; or "
        "`--max-num-queued-tokens` for a prefill backlog.",
        "Put a concurrency limit at the gateway that answers 429/503 with `Retry-After` instead of queueing.",
        "Make clients honour `Retry-After` with jittered backoff and a retry budget.",
    ),
    "slo": (
        "Find where the time goes: the first abnormal span of the fault window and its chain.",
        "Isolate the interactive pool: priority scheduling (`scheduling_policy: priority`) or a separate pool "
        "of replicas for batch traffic.",
        "Add capacity or shed load before the SLO breaks: more replicas, or admission control that refuses early.",
    ),
    "error_rate": (
        "Read the dominant error class in the impact table and its first failed request in the timeline.",
        "For connection errors and resets: health checks that eject a failing replica from the router quickly.",
        "For timeouts: per-request deadlines that cancel abandoned work on the engine (abort on disconnect).",
    ),
    "fault_landed": (
        "The drill tested nothing: make the fault land (the target's capability, the fault's method or selector) "
        "and run it again before reading any other verdict.",
    ),
    "first_abnormal_span": (
        "The fault showed somewhere other than the runbook expects: check the chain of the first abnormal span, "
        "then correct either the runbook's expectation or the instrumentation that hides the real place.",
    ),
    "recovery_replay": (
        "Requests that still fail after recovery point at state the fault left behind (a backlog, a stuck "
        "replica, a cache, an open circuit): find and drain it.",
        "A control that regressed, or a deterministic output that changed, is a regression after recovery: "
        "compare its trace with its baseline trace.",
    ),
    "recovery_time": (
        "Drain the backlog faster after the trigger is gone: deadlines that drop requests whose clients left, "
        "a bounded queue, load shedding while latency is out of band.",
        "Check retries: clients or the router retrying into the recovering stack keep it overloaded.",
    ),
    "retry_budget": (
        "Cap retries with a budget (e.g. retries at most 10% of requests, a token bucket per client).",
        "Retry at one layer only, with jittered exponential backoff, honouring `Retry-After`.",
    ),
    "duplicate_side_effects": (
        "Send an idempotency key end to end and deduplicate on it where the side effect happens.",
        "Do not retry a non-idempotent request after its side effect may have happened (e.g. after the first "
        "streamed byte), or make the retry replay the stored result.",
    ),
}
_GENERIC_FAIL = (
    "Read the verdict's evidence (trace, request and journal ids) and its runbook section; fix "
    "the cause, then re-run the drill with the fix as the only change.",
)


def action_items(verdicts: list[Verdict]) -> tuple[ActionItem, ...]:
    items = []
    for v in verdicts:
        if v.status is Status.FAIL:
            items += [ActionItem(v.name, v.status.value, a) for a in FAIL_ACTIONS.get(v.kind, _GENERIC_FAIL)]
        elif v.status is Status.INCONCLUSIVE:
            items.append(
                ActionItem(
                    v.name,
                    v.status.value,
                    "Make the evidence sufficient, then re-run: "
                    f"{v.message} (e.g. longer phases or a larger --time-scale, tracing on).",
                )
            )
        elif v.status is Status.ERROR:
            items.append(ActionItem(v.name, v.status.value, f"Fix the check or its input: {v.message}."))
    return tuple(items)


# --- what the drill did not cover --------------------------------------------------------------------------

_ENDPOINTS = ("chat", "completions")


def coverage_gaps(evidence: RunEvidence) -> tuple[CoverageGap, ...]:
    gaps = _input_gaps(evidence) + _capacity_gaps(evidence) + _fault_gaps(evidence)
    gaps += _permission_gaps(evidence) + _dependency_gaps(evidence)
    return tuple(gaps)


def _input_gaps(evidence: RunEvidence) -> list[CoverageGap]:
    records = evidence.requests
    pools = sorted(
        {p.get("name") for p in (evidence.resolved.get("scenario") or {}).get("pools") or () if p.get("name")}
    )
    used = sorted({r.endpoint for r in records})
    gaps = [
        CoverageGap(
            "inputs",
            f"only the scenario's pools were sent: {', '.join(pools) or 'none'}; other "
            "tenants, priorities and traffic mixes are untested",
        )
    ]
    missing = [e for e in _ENDPOINTS if e not in used]
    if missing:
        gaps.append(
            CoverageGap(
                "inputs",
                f"endpoints not called: {', '.join(missing)} (called: "
                f"{', '.join(used) or 'none'}); embeddings, tools and other routes too",
            )
        )
    streams = sorted({"streaming" if r.stream else "non-streaming" for r in records})
    if len(streams) == 1:
        gaps.append(CoverageGap("inputs", f"only {streams[0]} requests were sent"))
    gaps += _length_gaps(evidence)
    return gaps


def _length_gaps(evidence: RunEvidence) -> list[CoverageGap]:
    lengths = [n for r in evidence.requests if (n := r.prompt_tokens or r.planned_input_tokens)]
    outputs = [n for r in evidence.requests if (n := r.completion_tokens or r.planned_output_tokens)]
    if not lengths:
        return [CoverageGap("inputs", "prompt lengths unknown: no record carries a token count")]
    engine = (evidence.resolved.get("target_params") or {}).get("engine") or {}
    limit = engine.get("max_model_len") if isinstance(engine, dict) else None
    text = f"prompts of {min(lengths)}–{max(lengths)} tokens"
    if outputs:
        text += f" and outputs of {min(outputs)}–{max(outputs)} tokens"
    text += " were sent"
    if isinstance(limit, int) and max(lengths) < limit:
        text += f"; longer prompts up to and over the context limit ({limit} tokens) are untested"
    return [CoverageGap("inputs", text)]


def _capacity_gaps(evidence: RunEvidence) -> list[CoverageGap]:
    per_second = Counter(int(r.intended_ts) for r in evidence.requests if r.attempt == 1)
    params = evidence.resolved.get("target_params") or {}
    replicas = params.get("replicas")
    count = len(replicas) if isinstance(replicas, list) else replicas
    peak = max(per_second.values()) if per_second else 0
    text = f"peak offered load {peak} requests/s (1 s bins of intended starts)"
    if count is not None:
        text += f" on {count} replica(s)"
    return [
        CoverageGap(
            "capacity",
            text + "; higher rates, other replica counts, autoscaling and cold starts under load are untested",
        )
    ]


def _fault_gaps(evidence: RunEvidence) -> list[CoverageGap]:
    used = sorted({str(f.get("kind")) for f in (evidence.resolved.get("drill") or {}).get("faults") or ()})
    others = [k for k in sorted(registry.faults.kinds()) if k not in used]
    text = f"faults injected: {', '.join(used) or 'none'}"
    if others:
        text += f"; not in this drill: {', '.join(others)}"
    return [CoverageGap("faults", text + "; two faults at once are untested unless the drill schedules them")]


def _permission_gaps(evidence: RunEvidence) -> list[CoverageGap]:
    authed = any(
        k.lower() in ("authorization", "x-api-key", "api-key") for s in evidence.replay.samples for k in s.headers
    )
    text = (
        "requests carried credentials, but expired, revoked or wrong credentials and per-tenant quotas are untested"
        if authed
        else "no request carried credentials: authentication, authorization, quotas and rate limits per key are "
        "untested"
    )
    return [CoverageGap("permissions", text + "; the harness ran with its own OS permissions")]


def _dependency_gaps(evidence: RunEvidence) -> list[CoverageGap]:
    drill = evidence.resolved.get("drill") or {}
    kind = (drill.get("target") or {}).get("kind")
    hosts = drill.get("allowed_hosts") or []
    if kind == "embedded":
        text = (
            "the target was the embedded reference stack (simulated GPUs, loopback network): real GPUs, "
            "drivers, NCCL, model storage, tokenizer downloads and the production network are untested"
        )
    else:
        text = (
            "only the attached stack was exercised: its upstream dependencies (model storage, auth service, "
            "DNS, load balancers in front of it) were not faulted"
        )
    where = f"hosts touched beyond loopback: {', '.join(sorted(hosts))}" if hosts else "loopback only"
    return [CoverageGap("external dependencies", f"{text} ({where})")]
