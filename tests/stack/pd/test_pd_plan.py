"""The P/D topology in the stack config and the plan it makes (nothing is started)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pd_harness import plan_of

from drill.errors import SpecError
from drill.stack.config import parse_stack_config
from drill.stack.topology import KvFailurePolicy
from drill.targets.embedded import EmbeddedStack


def test_without_a_topology_the_stack_is_aggregated_as_before(tmp_path: Path) -> None:
    plan = plan_of({}, tmp_path)
    assert [s.role for s in plan.replica_launches] == [None, None]
    assert all(not s.kv_listen and not s.kv_peers for s in plan.replica_launches)
    assert not any(p.name.startswith("pd-kv") for p in plan.proxies)


def test_prefill_workers_come_first_and_each_pair_has_its_proxied_kv_link(tmp_path: Path) -> None:
    plan = plan_of({"topology": {"prefill": 2, "decode": 2}}, tmp_path)
    assert [s.role for s in plan.replica_launches] == ["prefill", "prefill", "decode", "decode"]
    kv = {p.name: p for p in plan.proxies if p.name.startswith("pd-kv")}
    assert sorted(kv) == ["pd-kv-p0-d2", "pd-kv-p0-d3", "pd-kv-p1-d2", "pd-kv-p1-d3"]
    prefill, decode = plan.replica_launches[0], plan.replica_launches[2]
    assert kv["pd-kv-p0-d2"].upstream == prefill.kv_listen and decode.kv_peers["replica-0"] == kv["pd-kv-p0-d2"].listen
    entries = plan.state.replicas
    assert [ln.name for ln in entries[0].links] == ["pd-kv-p0-d2", "pd-kv-p0-d3"]
    assert [(ln.name, ln.rank) for ln in entries[3].links] == [("pd-kv-p0-d3", 0), ("pd-kv-p1-d3", 1)]
    assert [u.role for u in plan.router_launch.replicas] == ["prefill", "prefill", "decode", "decode"]
    every = [plan.router_launch.port, *(s.port for s in plan.replica_launches), *(p.listen for p in plan.proxies)]
    assert len(every) == len(set(every))


def test_without_kv_proxies_the_decode_worker_dials_the_prefill_worker_itself(tmp_path: Path) -> None:
    plan = plan_of({"topology": {"prefill": 1, "decode": 1, "kv_transfer": {"proxies": False}}}, tmp_path)
    assert plan.replica_launches[1].kv_peers == {"replica-0": plan.replica_launches[0].kv_listen}
    assert all(ln.proxy is None for ln in plan.state.replicas[1].links)


def test_the_kv_transfer_options_parse_as_documented() -> None:
    config = parse_stack_config(
        {"topology": {"decode": 3, "kv_transfer": {"lease": None, "failure_policy": "recompute"}}}
    )
    assert config.replicas == 4 and config.topology is not None
    assert config.topology.kv_transfer.lease is None
    assert config.topology.kv_transfer.failure_policy is KvFailurePolicy.RECOMPUTE
    assert parse_stack_config({"topology": {"kv_transfer": {"lease": "250ms"}}}).topology.kv_transfer.lease == 0.25


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"replicas": 3, "topology": {"prefill": 1, "decode": 1}}, "either replicas or topology"),
        ({"topology": {"prefill": 0}}, "greater than or equal to 1"),
        ({"topology": {"kv_transfer": {"failure_policy": "retry"}}}, "'fail' or 'recompute'"),
        ({"topology": {"kv_transfer": {"lease": "0s"}}}, "greater than 0"),
        ({"topology": {"ratio": "2P2D"}}, "topology.ratio: ratio '2P2D' is not of the form <prefill>P:<decode>D"),
        ({"topology": {"ratio": "0P:4D"}}, "topology.ratio: ratio '0P:4D': each side needs 1 to 32 workers"),
        ({"topology": {"ratio": 4}}, "topology.ratio: expected a ratio of the form <prefill>P:<decode>D"),
        ({"topology": {"ratio": "1P:3D", "decode": 2}}, "ratio '1P:3D' says decode: 3 but decode: 2 is given too"),
        ({"replicas": 3, "topology": {"ratio": "2P:2D"}}, "either replicas or topology"),
    ],
)
def test_a_bad_topology_is_a_located_error(config: dict, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_stack_config(config)
    assert message in str(caught.value.diagnostics) or message in caught.value.render()


def test_a_ratio_says_both_counts_in_one_value() -> None:
    config = parse_stack_config({"topology": {"ratio": "3p:1d", "prefill": 3}})
    assert config.replicas == 4 and config.topology is not None
    assert (config.topology.prefill, config.topology.decode, config.topology.split) == (3, 1, "3P:1D")
    assert "ratio" not in config.model_dump()["topology"]  # read into the counts: a dump parses back the same
    assert parse_stack_config(config.model_dump(mode="json")) == config


def test_a_bad_ratio_in_a_stack_file_is_located_at_its_value(tmp_path: Path) -> None:
    from drill.stack.config import load_stack_config

    path = tmp_path / "stack.yaml"
    path.write_text("model: llama-3-8b\ntopology:\n  ratio: 1:3\n")
    with pytest.raises(SpecError) as caught:
        load_stack_config(path)
    expected = "topology.ratio: expected a ratio of the form <prefill>P:<decode>D such as 1P:3D, got the number 63 "
    assert f"{path}:3:10: error: {expected}" in caught.value.render()


def test_the_target_offers_kv_link_proxies_and_lists_roles_before_it_starts() -> None:
    from drill.api import Capability, LinkKind, TargetContext

    config = parse_stack_config({"topology": {"prefill": 1, "decode": 2}})
    assert Capability.TOXIPROXY_KV_LINK in EmbeddedStack.static_capabilities(config)
    assert Capability.TOXIPROXY_KV_LINK not in EmbeddedStack.static_capabilities(parse_stack_config({}))
    planned = EmbeddedStack(config, TargetContext(run_id="r", run_dir="/nonexistent")).planned_info()
    assert [r.role for r in planned.replicas] == ["prefill", "decode", "decode"]
    assert [(ln.kind, ln.rank) for ln in planned.replicas[0].links] == [(LinkKind.KV, 1), (LinkKind.KV, 2)]
    assert [ln.proxy for ln in planned.replicas[2].links] == ["<stack>-kv-p0-d2"]
