"""Each role of a P/D topology with its own engine (``topology.prefill_engine`` / ``decode_engine``): the config
refuses bad fields where they are written, the plan launches each worker with its role's engine and TP/PP links,
and the worker's cost model computes at its own TP (nothing is started; no wall clock)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pd_harness import ADMIN, plan_of

from drill.errors import SpecError
from drill.report.build import _gpus
from drill.stack.config import load_stack_config, parse_stack_config
from drill.stack.inference.cost_model import BatchShape
from drill.stack.replica.api_server import Replica
from drill.sweeps.pd_figures import model_pd

_SPLIT = {
    "prefill": 1,
    "decode": 2,
    "prefill_engine": {"tensor_parallel_size": 4},
    "decode_engine": {"tensor_parallel_size": 2, "pipeline_parallel_size": 1},
}


def test_the_plan_launches_each_worker_with_its_roles_engine_and_tp_links(tmp_path: Path) -> None:
    plan = plan_of({"engine": {"pipeline_parallel_size": 2, "max_num_seqs": 64}, "topology": _SPLIT}, tmp_path)
    engines = [launch.config.engine for launch in plan.replica_launches]
    assert [(e.tensor_parallel_size, e.pipeline_parallel_size) for e in engines] == [(4, 2), (2, 1), (2, 1)]
    assert all(e.max_num_seqs == 64 for e in engines)  # what a role does not set is the stack's engine
    peers = [sorted((p.kind, p.rank) for p in launch.peers) for launch in plan.replica_launches]
    assert peers == [[("pp", 1), ("tp", 1), ("tp", 2), ("tp", 3)], [("tp", 1)], [("tp", 1)]]
    links = [[ln.name for ln in entry.links if ln.kind == "tp"] for entry in plan.state.replicas]
    assert links == [
        ["pd-replica-0-tp1", "pd-replica-0-tp2", "pd-replica-0-tp3"],
        ["pd-replica-1-tp1"],
        ["pd-replica-2-tp1"],
    ]
    every = [plan.router_launch.port, *(s.port for s in plan.replica_launches), *(p.listen for p in plan.proxies)]
    assert len(every) == len(set(every))


def test_a_prefill_worker_at_tp4_prefills_faster_than_at_tp1_and_pays_tp_communication(tmp_path: Path) -> None:
    prompt = BatchShape.prefill([4096])
    wide = Replica(plan_of({"topology": _SPLIT}, tmp_path / "wide").replica_launches[0]).cost_model
    narrow = Replica(
        plan_of({"topology": {"prefill": 1, "decode": 2}}, tmp_path / "narrow").replica_launches[0]
    ).cost_model
    assert (wide.tp, narrow.tp) == (4, 1)
    fast, slow = wide.step_cost(prompt), narrow.step_cost(prompt)
    assert fast.compute_s < slow.compute_s / 3  # four GPUs' FLOPs on one prompt
    assert fast.comm_s > 0 == slow.comm_s  # the all-reduces over its TP links
    assert fast.total_s < slow.total_s / 2
    decode = Replica(plan_of({"topology": _SPLIT}, tmp_path / "d").replica_launches[1]).cost_model
    assert (decode.tp, decode.pp) == (2, 1)


def test_kv_bytes_per_token_stay_the_models_whatever_a_roles_tp(tmp_path: Path) -> None:
    plan = plan_of({"topology": _SPLIT}, tmp_path)
    prefill, decode = (launch.config for launch in plan.replica_launches[:2])
    assert prefill.model_preset.kv_bytes_per_token == decode.model_preset.kv_bytes_per_token


def test_without_role_engines_every_config_is_launched_as_before(tmp_path: Path) -> None:
    for config in ({}, {"topology": {"prefill": 1, "decode": 1}}):
        parsed = parse_stack_config(config)
        plan = plan_of(config, tmp_path / str(len(config)))
        assert all(launch.config == parsed for launch in plan.replica_launches)
        assert all(parsed.replica_config(i) is parsed for i in range(parsed.replicas))


def test_a_role_engine_applied_twice_is_the_same_engine() -> None:
    config = parse_stack_config({"topology": _SPLIT})
    once = config.replica_config(0)
    assert once.replica_config(0) == once and once.engine.tensor_parallel_size == 4


@pytest.mark.parametrize(
    ("role_engine", "path", "message"),
    [
        (
            "{tensor_parallel_sze: 4}",
            "topology.prefill_engine.tensor_parallel_sze",
            "did you mean 'tensor_parallel_size'",
        ),
        ("{tensor_parallel_size: 0}", "topology.prefill_engine.tensor_parallel_size", "greater than or equal to 1"),
        ("{scheduling_policy: prio}", "topology.prefill_engine.scheduling_policy", "did you mean 'priority'"),
        ("{max_num_seqs: 100000}", "topology", "prefill_engine over engine is not a valid engine"),
    ],
)
def test_a_bad_role_engine_is_refused_where_it_is_written(
    tmp_path: Path, role_engine: str, path: str, message: str
) -> None:
    source = tmp_path / "stack.yaml"
    source.write_text(f"topology:\n  prefill: 1\n  decode: 1\n  prefill_engine: {role_engine}\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_stack_config(source)
    diagnostic = caught.value.diagnostics[0]
    assert ".".join(map(str, diagnostic.path)) == path
    assert diagnostic.position.line == (4 if path != "topology" else 2)  # the key, or the topology mapping
    assert message in diagnostic.message + " " + (diagnostic.hint or "")
    assert f"stack.yaml:{diagnostic.position.line}:" in caught.value.render()


def test_the_stacks_gpus_count_each_roles_own_tp_and_pp() -> None:
    config = parse_stack_config({"topology": _SPLIT})
    assert config.gpus == 1 * 4 + 2 * 2
    assert parse_stack_config({"engine": {"tensor_parallel_size": 2}}).gpus == 2 * 2
    evidence = SimpleNamespace(resolved={"target_params": config.model_dump(mode="json")})
    assert _gpus(evidence)[0] == 8  # type: ignore[arg-type]


def test_the_pd_ratio_model_prefills_at_the_prefill_workers_tp_and_decodes_at_the_decode_workers() -> None:
    split = parse_stack_config({"topology": _SPLIT})
    plain = parse_stack_config({"topology": {"prefill": 1, "decode": 2, "decode_engine": {"tensor_parallel_size": 2}}})
    wide, narrow = model_pd(split, 2.0, 2048, 128), model_pd(plain, 2.0, 2048, 128)
    assert wide.prefill_s < narrow.prefill_s / 2 and wide.prefill_load < narrow.prefill_load / 2
    assert wide.decode_step_s == narrow.decode_step_s


def test_a_workers_admin_state_says_its_own_tp_and_pp(tmp_path: Path) -> None:
    launches = plan_of({"topology": _SPLIT}, tmp_path).replica_launches

    async def state(index: int) -> dict:
        return Replica(launches[index]).admin.snapshot()["engine"]

    prefill, decode = asyncio.run(state(0)), asyncio.run(state(1))
    assert (prefill["tensor_parallel_size"], prefill["pipeline_parallel_size"]) == (4, 1)
    assert (decode["tensor_parallel_size"], decode["pipeline_parallel_size"]) == (2, 1)


def test_roles_with_different_block_sizes_are_refused_at_the_topology() -> None:
    with pytest.raises(SpecError) as caught:
        parse_stack_config({"topology": {"decode_engine": {"block_size": 32}}})
    diagnostic = caught.value.diagnostics[0]
    assert diagnostic.path == ("topology",) and "same block_size" in diagnostic.message
    assert parse_stack_config({"topology": {"prefill_engine": {"block_size": 32}, "decode_engine": {"block_size": 32}}})


@pytest.mark.anyio
async def test_each_workers_spans_and_state_say_its_own_tp(pd_pair) -> None:
    exporter = InMemorySpanExporter()
    engines = {"prefill_engine": {"tensor_parallel_size": 4}, "decode_engine": {"tensor_parallel_size": 2}}
    async with pd_pair(span_processor=SimpleSpanProcessor(exporter), engines=engines) as pair:
        response = await pair.prefill_then_decode("req-tp")
        assert response.status_code == 200, response.text
        state = (await pair.http.get(f"{pair.prefill.server.url}/admin/state", headers=ADMIN)).json()
    assert state["engine"]["tensor_parallel_size"] == 4
    spans = exporter.get_finished_spans()
    tp = {(s.resource.attributes["drill.role"], s.resource.attributes["drill.tensor_parallel_size"]) for s in spans}
    assert tp == {("prefill", 4), ("decode", 2)}  # every span of each worker says its own TP
    transfers = [s for s in spans if s.name == "kv_transfer"]
    assert {(s.resource.attributes["drill.role"], s.attributes["drill.kv.role"]) for s in transfers} == {
        ("prefill", "prefill"),
        ("decode", "decode"),
    }  # one span on each side, each under its own worker's resource
    assert all(s.attributes["drill.kv.bytes"] == 4 * 131_072 for s in transfers)  # the model's, whatever the TP


def test_durations_of_the_engine_and_of_a_role_engine_merge() -> None:
    config = parse_stack_config(
        {
            "engine": {"weight_load_time": "0s", "max_queue_wait": "2s"},
            "topology": {"decode_engine": {"max_queue_wait": "500ms"}},
        }
    )
    prefill, decode = config.engine_of(0), config.engine_of(1)
    assert (prefill.weight_load_time, prefill.max_queue_wait) == (0.0, 2.0)
    assert (decode.weight_load_time, decode.max_queue_wait) == (0.0, 0.5)
