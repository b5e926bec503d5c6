"""The harness-made proxies of an ``openai`` target: addresses, validation, the plan, what faults get (no I/O)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from drill.api import Capability, TargetContext
from drill.cli.main import cli
from drill.spec.loader import load_drill
from drill.targets.openai import OpenAITarget, OpenAITargetParams
from drill.targets.proxies import HarnessProxyPlan, parse_address, plan_proxies

SCENARIO = {
    "arrival": {"process": "poisson", "rate": 2},
    "pools": [
        {"name": "chat", "input_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 2}}
    ],
}
SLOW = {"name": "slow", "kind": "slow_replica", "start": "0s", "duration": "1s", "params": {"latency_ms": 100}}


def _drill_file(tmp_path: Path, config: dict, faults: list | None = None) -> Path:
    drill = {"name": "proxies", "target": {"kind": "openai", "config": config}, "scenario": SCENARIO}
    drill |= {"phases": {"baseline": "1s", "fault": "1s", "recovery": "1s"}, "faults": faults or []}
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    return path


def _validate(tmp_path: Path, config: dict, faults: list | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["validate", str(_drill_file(tmp_path, config, faults))])
    return result.exit_code, result.output


def _target(config: dict, run_id: str = "20261201T000000Z-abc123", run_dir: str = "/runs/x") -> OpenAITarget:
    return OpenAITarget(OpenAITargetParams.model_validate(config), TargetContext(run_id, run_dir))


# -- addresses -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:8080", ("127.0.0.1", 8080)), ("localhost:1", ("localhost", 1)), ("[::1]:9000", ("::1", 9000))],
)
def test_an_upstream_is_host_and_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("http://127.0.0.1:8080", "no scheme"),
        ("127.0.0.1:8080/v1", "no scheme, no path"),
        ("127.0.0.1", "expected host:port"),
        (":8080", "expected host:port"),
        ("127.0.0.1:http", "expected host:port"),
        ("127.0.0.1:0", "out of range"),
        ("127.0.0.1:70000", "out of range"),
    ],
)
def test_a_bad_upstream_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        parse_address(text)


def test_a_listen_address_may_leave_the_port_to_the_server() -> None:
    assert parse_address("127.0.0.1:0", port_zero=True) == ("127.0.0.1", 0)


# -- validation: located errors, exit 2 ------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "where", "message"),
    [
        (
            {"replicas": [{"name": "a", "upstream": "http://127.0.0.1:8080"}]},
            "target.config.replicas[0].upstream",
            "expected host:port (no scheme, no path)",
        ),
        (
            {"url": "http://127.0.0.1:1", "replicas": [{"name": "a", "upstream": "127.0.0.1:2", "url": "http://x:3"}]},
            "target.config.replicas[0].upstream",
            "give 'url' or 'upstream', not both",
        ),
        ({"url": "http://127.0.0.1:1", "replicas": [{"name": "a"}]}, "target.config.replicas[0].url", "or 'upstream'"),
        (
            {"url": "http://127.0.0.1:1", "replicas": [{"name": "a", "url": "http://127.0.0.1:2", "listen": "h:1"}]},
            "target.config.replicas[0].listen",
            "it needs 'upstream'",
        ),
        (
            {"replicas": [{"name": "a", "upstream": "127.0.0.1:2", "proxy": "mine"}]},
            "target.config.replicas[0].proxy",
            "the harness makes the proxy",
        ),
        (
            {"replicas": [{"name": "a b", "upstream": "127.0.0.1:2"}]},
            "target.config.replicas[0].name",
            "part of the proxy's name",
        ),
        (
            {"replicas": [{"name": "a", "upstream": "127.0.0.1:2"}, {"name": "b", "upstream": "127.0.0.1:3"}]},
            "target.config.url",
            "(2 replicas); without 'url' the drill talks to the proxy in front of a single replica",
        ),
        ({"replicas": []}, "target.config.url", "(0 replicas)"),
        ({"replicas": [{"name": "a", "url": "http://127.0.0.1:2"}]}, "target.config.url", "a replica with its own"),
        (
            {
                "url": "http://127.0.0.1:1",
                "replicas": [{"name": "a", "upstream": "127.0.0.1:2"}, {"name": "a", "upstream": "127.0.0.1:3"}],
            },
            "target.config.replicas",
            "replica names must be unique",
        ),
        (
            {
                "url": "http://127.0.0.1:1",
                "replicas": [
                    {"name": "a", "upstream": "127.0.0.1:2"},
                    {"name": "b", "url": "http://h:3", "proxy": "b"},
                ],
            },
            "target.config.toxiproxy_url",
            "hand-made 'proxy' need the server it is on",
        ),
    ],
)
def test_url_and_upstream_rules_are_located_errors_with_exit_2(
    tmp_path: Path, config: dict, where: str, message: str
) -> None:
    code, output = _validate(tmp_path, config)
    assert code == 2, output
    line = next((ln for ln in output.splitlines() if f"error: {where}:" in ln), None)
    assert line is not None, output
    assert re.match(r"^.*drill\.yaml:\d+:\d+: error: ", line) and message in line, line


def test_one_upstream_replica_and_no_url_is_a_valid_single_server_target(tmp_path: Path) -> None:
    code, output = _validate(tmp_path, {"replicas": [{"name": "llama-0", "upstream": "127.0.0.1:8080"}]}, [SLOW])
    assert code == 0, output


def test_slow_replica_needs_a_proxy_which_upstream_replicas_get_from_the_harness(tmp_path: Path) -> None:
    attached = {"url": "http://127.0.0.1:1", "replicas": [{"name": "a", "url": "http://127.0.0.1:2"}]}
    code, output = _validate(tmp_path, attached, [SLOW])
    assert code == 2 and "toxiproxy.replica" in output, output
    proxied = {"url": "http://127.0.0.1:1", "replicas": [{"name": "a", "upstream": "127.0.0.1:2"}]}
    assert _validate(tmp_path, proxied, [SLOW])[0] == 0


def test_a_non_loopback_upstream_or_listen_host_needs_allow_host(tmp_path: Path) -> None:
    from drill.errors import UnsafeTargetError
    from drill.runner.safety import check_hosts

    for key, value in (("upstream", "10.1.2.3:8000"), ("listen", "10.1.2.3:0")):
        replica = {"name": "a", "upstream": "127.0.0.1:8000", key: value}
        loaded = load_drill(str(_drill_file(tmp_path, {"replicas": [replica]})))
        with pytest.raises(UnsafeTargetError, match=rf"replicas\[0\]\.{key}"):
            check_hosts(loaded)
        check_hosts(loaded, ["10.1.2.3"])


# -- the plan ----------------------------------------------------------------------------------------


def test_the_plan_names_one_proxy_per_upstream_replica_and_the_harness_server() -> None:
    plan = plan_proxies(
        "20261201T000000Z-ABC123",
        "/runs/x",
        [("r0", "127.0.0.1:8001", None), ("r1", "127.0.0.1:8002", "127.0.0.1:9")],
        None,
    )
    assert [(p.name, p.listen, p.upstream) for p in plan.proxies] == [
        ("drill-20261201t000000z-abc123-r0", "127.0.0.1:0", "127.0.0.1:8001"),
        ("drill-20261201t000000z-abc123-r1", "127.0.0.1:9", "127.0.0.1:8002"),
    ]
    assert plan.server is not None and plan.server.port == 0
    assert plan.server.state_file == "/runs/x/toxiproxy/server.json"
    reserved = plan.reserve()
    assert reserved.server is not None and 0 < reserved.server.port < 65536
    assert reserved.url == f"http://127.0.0.1:{reserved.server.port}"
    assert reserved.reserve() == reserved  # a reserved plan keeps its port


def test_with_a_toxiproxy_url_the_plan_starts_no_server() -> None:
    plan = plan_proxies("r", "/runs/x", [("a", "127.0.0.1:1", None)], "http://127.0.0.1:8474/")
    assert plan.server is None and plan.reserve() == plan and plan.url == "http://127.0.0.1:8474"


def test_the_teardown_data_is_the_reserved_plan_as_json_and_reads_back() -> None:
    target = _target({"replicas": [{"name": "llama-0", "upstream": "127.0.0.1:8080"}]})
    data = target.teardown_data()
    assert data is not None
    plan = HarnessProxyPlan.model_validate(json.loads(json.dumps(data)))
    assert plan.server is not None and plan.server.port > 0
    assert target.teardown_data() == data  # reserved once: the journal and the run agree
    assert _target({"url": "http://127.0.0.1:1"}).teardown_data() is None  # attached only: nothing to tear down


def test_a_single_server_target_sends_its_load_to_the_proxy_and_scrapes_the_server_itself() -> None:
    target = _target({"replicas": [{"name": "llama-0", "upstream": "127.0.0.1:8080", "listen": "127.0.0.1:18080"}]})
    target.teardown_data()
    info = target.planned_info()
    assert info.base_url == "http://127.0.0.1:18080"
    (replica,) = info.replicas
    assert replica.url == "http://127.0.0.1:18080" and replica.direct_url == "http://127.0.0.1:8080"
    assert replica.proxy == "drill-20261201t000000z-abc123-llama-0"
    assert info.metrics_urls == {"target": "http://127.0.0.1:8080/metrics"}
    assert info.toxiproxy_url is not None and info.toxiproxy_url.startswith("http://127.0.0.1:")
    assert Capability.TOXIPROXY_REPLICA in info.capabilities


def test_behind_a_router_the_plan_prints_where_the_router_should_point() -> None:
    config = {
        "url": "http://127.0.0.1:8000",
        "toxiproxy_url": "http://127.0.0.1:8474",
        "replicas": [
            {"name": "vllm-0", "upstream": "127.0.0.1:8001", "listen": "127.0.0.1:18001"},
            {"name": "vllm-1", "upstream": "127.0.0.1:8002"},
        ],
    }
    target = _target(config)
    lines = target.describe_plan()
    assert "replica vllm-0: point the router at 127.0.0.1:18001 (a Toxiproxy proxy -> 127.0.0.1:8001)" in lines
    assert (
        "replica vllm-1: point the router at 127.0.0.1:(port assigned at start) (a Toxiproxy proxy -> 127.0.0.1:8002)"
        in lines
    )
    assert any("on http://127.0.0.1:8474" in line for line in lines)
    info = target.planned_info()
    assert info.base_url == "http://127.0.0.1:8000" and info.toxiproxy_url == "http://127.0.0.1:8474"
    assert [r.proxy for r in info.replicas] == [
        "drill-20261201t000000z-abc123-vllm-0",
        "drill-20261201t000000z-abc123-vllm-1",
    ]


def test_drill_plan_shows_the_proxies_and_starts_nothing(tmp_path: Path) -> None:
    path = _drill_file(tmp_path, {"replicas": [{"name": "llama-0", "upstream": "127.0.0.1:8080"}]}, [SLOW])
    result = CliRunner().invoke(cli, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    assert "no router: the drill talks to the proxy" in result.output
    assert "on a Toxiproxy server the harness starts" in result.output
    assert "replica llama-0: the drill talks to 127.0.0.1:(port assigned at start)" in result.output
    assert not (tmp_path / "toxiproxy").exists()


def test_removing_from_the_journal_fails_loudly_only_where_the_proxies_may_still_be(tmp_path: Path) -> None:
    from drill.errors import ToxiproxyError
    from drill.targets.proxies import remove_planned

    own = plan_proxies("r", str(tmp_path), [("a", "127.0.0.1:1", None)], None).reserve()
    remove_planned(own)  # its own server is not running: the proxies went with it, nothing to do
    given = plan_proxies("r", str(tmp_path), [("a", "127.0.0.1:1", None)], own.url)  # nobody listens there
    with pytest.raises(ToxiproxyError, match="cannot reach Toxiproxy"):
        remove_planned(given)  # the user's server may still hold them: drill cleanup reports it and can retry
