"""``unbounded-queue`` on real vLLM: its defaults against ``--max-num-queued-reqs``, through ``drill compare``.

One comparison (two runs of about 50 s, on two servers that differ in that one flag) feeds every test here. The
harness reads vLLM's own forms: a streamed refusal arriving as HTTP 200 and an SSE error event, no
``Retry-After``, and the queue phase as an attribute of ``llm_request``.
"""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from drill.rundir.evidence import RunEvidence
from drill.serving_metrics import QUANTITIES, resolve
from drill.stack.replica.metrics import ADMISSION_REASONS
from tests.vllm import catalogue
from tests.vllm.conftest import ServerPool
from tests.vllm.drills import DrillRun, compare_drill
from tests.vllm.servers import DEFAULT
from tests.vllm_metric_labels import PD_ONLY, VLLM_EXPORTS, label_values, sample_labels

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

QUEUED = "vllm-queued"
QUEUE_CAP = ("--max-num-queued-reqs", "4")


@pytest.fixture(scope="module")
def queue_runs(vllm_servers: ServerPool, vllm_otlp_port: int, tmp_path_factory) -> tuple[DrillRun, DrillRun]:
    # the first file of this folder (conftest.py's FILE_ORDER): vllm-0 is fresh, no replica drill has SIGKILLed it yet
    servers = vllm_servers.get_many({DEFAULT: (), QUEUED: QUEUE_CAP}, isolated=True)
    drill = catalogue.unbounded_queue(servers[DEFAULT].url, vllm_otlp_port)
    change = f"target.config.url={servers[QUEUED].url}"
    baseline, candidate, folder = compare_drill(drill, change, tmp_path_factory.mktemp("unbounded-queue"))
    print(f"\nunbounded-queue on vLLM ({baseline.wall_s:.0f} s for both): defaults {baseline.statuses()}")
    print(f"with --max-num-queued-reqs 4: {candidate.statuses()}\ncomparison: {folder}")
    return baseline, candidate


def _fault_outcomes(run: DrillRun) -> Counter[str]:
    """How the fault phase's attempts ended: ok, or the error class the load driver gave."""
    records = RunEvidence(run.run_dir, {}).requests_in("fault")
    return Counter("ok" if r.ok else r.error.value if r.error else "?" for r in records)


def test_with_vllm_s_defaults_the_flood_waits_and_fast_failure_fails(queue_runs) -> None:
    baseline, _ = queue_runs
    assert baseline.status("fault_landed") == "PASS"
    assert baseline.status("not-broken") == "PASS", baseline.verdicts["not-broken"]
    verdict = baseline.verdicts["fast_failure"]
    print(f"defaults, fault phase: {dict(_fault_outcomes(baseline))}; fast_failure: {verdict['message']}")
    assert verdict["status"] == "FAIL", verdict
    observed = verdict["observed"]
    assert observed["refused"] == 0, verdict  # nothing refused: an unbounded waiting queue
    assert observed["timeout"] + observed["left_to_wait"] > 0.5 * observed["not_on_time"], verdict


def test_after_the_flood_the_failed_requests_pass_again_and_the_temperature_0_controls_are_byte_identical(
    queue_runs,
) -> None:
    baseline, _ = queue_runs
    verdict = baseline.verdicts["recovery_replay"]
    print(f"defaults, recovery_replay: {verdict['status']} {verdict['message']}")
    observed = verdict["observed"]
    assert observed["originals_passed"] == observed["originals_replayed"] > 0, verdict
    # byte for byte: a control's text on every repetition has the baseline's sha256 (temperature 0), but for the
    # few greedy answers vLLM (not batch-invariant) computes otherwise in another batch: at most 2 of 8
    assert observed["controls_replayed"] > 0 and observed["not_identical"] == 0
    assert observed["controls_with_other_output"] <= 2, verdict
    assert verdict["status"] == "PASS", verdict


def test_with_max_num_queued_reqs_the_excess_is_refused_fast_and_fast_failure_passes(queue_runs) -> None:
    _, candidate = queue_runs
    outcomes = _fault_outcomes(candidate)
    verdict = candidate.verdicts["fast_failure"]
    print(f"--max-num-queued-reqs 4, fault phase: {dict(outcomes)}; fast_failure: {verdict['message']}")
    assert candidate.status("not-broken") == "PASS", candidate.verdicts["not-broken"]
    assert outcomes["refused"] >= 10 and outcomes["timeout"] == 0, outcomes
    if verdict["status"] == "INCONCLUSIVE":  # the generator, starved beside vLLM's engine, sent late (once 1.7 s):
        # judged from the sends the window passes, and the verdict says the lateness was the harness's
        assert verdict["message"].startswith("the load generator sent late, not the target"), verdict
        budget = float(verdict["expected"]["refusal_ttf_p99_ms"].removeprefix("<= "))
        assert verdict["observed"]["from_send.refusal_ttf_p99_ms"] <= budget, verdict
    else:
        assert verdict["status"] == "PASS", verdict
    assert verdict["observed"]["refusals_with_retry_after"] == 0  # vLLM sends no Retry-After


def test_every_refusal_counts_as_one_whichever_form_vllm_gives_it(queue_runs) -> None:
    _, candidate = queue_runs
    verdict = candidate.verdicts["fast_failure"]
    assert verdict["observed"]["other_error"] == 0, verdict
    assert _fault_outcomes(candidate)["mid_stream_error"] == 0


def test_every_metric_name_and_label_the_metric_map_reads_is_on_vllm_s_own_metrics(
    queue_runs, vllm_servers: ServerPool
) -> None:
    """Captured from the two servers the comparison ran on (so the capped one has refused, and its counter of
    refusals has samples): each name the map reads, with exactly the labels the stack exports it with too."""
    servers = vllm_servers.get_many({DEFAULT: (), QUEUED: QUEUE_CAP}, isolated=True)
    texts = {name: httpx.get(f"{s.url}/metrics", timeout=30, trust_env=False).text for name, s in servers.items()}
    labels: dict[str, set[str]] = {}
    for text in texts.values():
        for sample, names in sample_labels(text).items():
            labels.setdefault(sample, set()).update(names)
    missing = {
        name: (expected, labels.get(name)) for name, expected in VLLM_EXPORTS.items() if labels.get(name) != expected
    }
    assert not missing, missing
    assert all(resolve(labels, quantity) is not None for quantity in QUANTITIES if quantity not in PD_ONLY)
    assert all(resolve(labels, quantity) is None for quantity in PD_ONLY)  # an aggregated vLLM: no KV connector
    reasons = label_values(texts[QUEUED], "vllm:admission_rejections_total", "reason")
    assert "max_num_queued_reqs" in reasons and reasons <= set(ADMISSION_REASONS), reasons


def test_first_abnormal_span_names_vllm_s_queue_phase_on_the_flood(queue_runs) -> None:
    baseline, _ = queue_runs
    assert baseline.status("first_abnormal_span") == "PASS", baseline.verdicts["first_abnormal_span"]
