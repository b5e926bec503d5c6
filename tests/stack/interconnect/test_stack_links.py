"""Acceptance: link toxics on a running stack slow decode by the amount the link model predicts.

* 2 replicas with TP=2 behind Toxiproxy: 5 ms on one TP link raises that replica's TPOT by the
  prediction (±30 %) while the other replica is unchanged; removing it restores the TPOT.
* A PP=2 replica: its step includes the inter-stage transfer and the pipeline bubble, and a
  degraded stage link adds the predicted slowdown.
"""

from __future__ import annotations

import pytest

from drill.api import LinkKind
from drill.backends.toxiproxy import Stream, ToxiproxyClient
from drill.stack.config import parse_stack_config
from drill.stack.inference.cost_model import BatchShape, CostModel
from drill.stack.interconnect.link_model import LinkToxic, predict_step_increase
from tests.stack.stack_probes import tpot_s

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TP_STACK = {
    "replicas": 2,
    "engine": {"tensor_parallel_size": 2, "weight_load_time": "200ms"},
    "router": {"health_check_interval": "200ms"},
}
PP_STACK = {
    "replicas": 1,
    "engine": {"pipeline_parallel_size": 2, "weight_load_time": "200ms"},
    "links": {"replica_proxies": False},
}


def _cost_model(config: dict) -> CostModel:
    stack = parse_stack_config(config)
    return CostModel(
        stack.model_preset, stack.gpu_preset, stack.engine.tensor_parallel_size, stack.engine.pipeline_parallel_size
    )


def test_tp_link_latency_slows_only_that_replica_by_the_prediction(stack_factory) -> None:
    state = stack_factory(TP_STACK)
    faulted, other = state.replicas
    link = faulted.links[0]
    assert link.kind == "tp" and link.proxy
    plan = _cost_model(TP_STACK).exchange_plan(1)  # one decoding sequence: one token per step
    predicted = predict_step_increase(
        plan, LinkToxic(LinkKind.TP, latency_ms=5), byte_scale=parse_stack_config(TP_STACK).links.byte_scale
    )
    assert predicted == pytest.approx(2 * 32 * 0.005)  # llama-3-8b: 2 all-reduces x 32 layers

    token = state.admin_token
    before = {r.name: tpot_s(r, token) for r in (faulted, other)}
    with ToxiproxyClient(state.toxiproxy_url) as toxiproxy:
        toxiproxy.add_toxic(link.proxy, "latency", {"latency": 5}, stream=Stream.DOWNSTREAM)
        try:
            during = {faulted.name: tpot_s(faulted, token, tokens=6), other.name: tpot_s(other, token)}
        finally:
            toxiproxy.delete_toxic(link.proxy, "latency_downstream")
    after = tpot_s(faulted, token)

    print(f"TPOT before {before}, during {during}, after {after:.4f}s; predicted +{predicted:.3f}s")
    assert during[faulted.name] - before[faulted.name] == pytest.approx(predicted, rel=0.3)
    assert abs(during[other.name] - before[other.name]) < 0.1 * predicted
    assert abs(after - before[faulted.name]) < 0.1 * predicted


def test_pp_step_has_transfer_and_bubble_and_a_slow_stage_link_adds_the_prediction(stack_factory) -> None:
    state = stack_factory(PP_STACK)
    (replica,) = state.replicas
    (link,) = replica.links
    assert link.kind == "pp" and link.proxy
    model = _cost_model(PP_STACK)
    step = model.step_cost(BatchShape.decode(1, 8))
    assert step.total_s >= 2 * step.stage_s + model.p2p_seconds(model.exchange_plan(1).pp_bytes_per_transfer)

    before = tpot_s(replica, state.admin_token, tokens=12)
    assert before == pytest.approx(step.total_s, rel=0.35)  # the bubble is in it: 2 stage times, not 1

    plan = model.exchange_plan(1)
    toxic = LinkToxic(LinkKind.PP, latency_ms=30, streams=frozenset({Stream.UPSTREAM}))
    predicted = predict_step_increase(plan, toxic, byte_scale=parse_stack_config(PP_STACK).links.byte_scale, pp=2)
    assert predicted == pytest.approx(0.030)
    with ToxiproxyClient(state.toxiproxy_url) as toxiproxy:
        toxiproxy.add_toxic(link.proxy, "latency", {"latency": 30}, stream=Stream.UPSTREAM)
        try:
            during = tpot_s(replica, state.admin_token, tokens=12)
        finally:
            toxiproxy.reset()
    print(
        f"PP TPOT before {before:.4f}s (model {step.total_s:.4f}s), during {during:.4f}s; predicted +{predicted:.3f}s"
    )
    assert during - before == pytest.approx(predicted, rel=0.3)
