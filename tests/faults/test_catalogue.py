"""The catalogue: every built-in fault is installed through its entry point, documents itself (params with
units and defaults, methods with needs and realism, revert semantics, a drill-ready YAML example that
validates), and its method decides what it needs from a target."""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

import faults
from drill import registry
from drill.api import Capability, Fault, Realism
from drill.cli.main import cli
from drill.spec.models import FaultSpec
from tests.faults.test_contract_docker import CASES as DOCKER_CASES
from tests.faults.test_contract_local import CASES as LOCAL_CASES
from tests.stack.pd.test_pd_stack import CASES as PD_CASES
from tests.stack.pd.test_pd_stack import CRASH_KINDS as PD_CRASH_KINDS

#: The faults llm-drill itself ships: its own distribution's ``drill.faults`` entry points (pyproject.toml), read
#: the way the registry reads them, so a new built-in fault is tested here as soon as it is registered.
BUILT_IN = sorted(
    ep.name for ep in entry_points(group="drill.faults") if ep.dist is not None and ep.dist.name == "llm-drill"
)
FAULT_MODULES = sorted(p.stem for p in (Path(faults.__file__).parent).glob("*.py") if not p.stem.startswith("_"))


def _example(fault_cls) -> list[dict]:
    doc = textwrap.dedent(fault_cls.__doc__.split(".. code-block:: yaml", 1)[1])
    return yaml.safe_load(textwrap.dedent(doc))["faults"]


def test_every_fault_class_of_the_library_has_an_entry_point() -> None:
    """The list above cannot miss a fault: each concrete Fault class in faults/ is registered under its kind."""
    classes = {
        cls.kind: f"{module.__name__}:{name}"
        for module in (importlib.import_module(f"faults.{stem}") for stem in FAULT_MODULES)
        for name, cls in vars(module).items()
        if inspect.isclass(cls) and issubclass(cls, Fault) and cls.__module__ == module.__name__
        if not inspect.isabstract(cls) and not name.startswith("_")  # a private base class is no fault
    }
    assert len(BUILT_IN) >= 10 and sorted(classes) == BUILT_IN
    assert {kind: registry.faults.info(kind).value for kind in BUILT_IN} == classes


def test_every_built_in_fault_keeps_the_contract_kit_somewhere() -> None:
    """Each built-in fault has a contract case: on the local stack, on Docker, or its own (the queue flood's
    needs the real load driver)."""
    own = set(re.findall(r'FaultCase\(\s*"(\w+)"', (Path(__file__).parent / "test_queue_flood.py").read_text()))
    on_pd = {kind.split("-")[0] for kind in PD_CASES} | set(PD_CRASH_KINDS)  # the KV faults need a P/D stack
    on_kubernetes = (Path(__file__).parents[1] / "kubernetes" / "test_kubernetes_fault_contract.py").read_text()
    on_kube = set(re.findall(r'"(\w+)"', re.search(r"CONTRACT_KINDS = \[(.*)\]", on_kubernetes)[1]))
    covered = {case[0] for case in [*LOCAL_CASES.values(), *DOCKER_CASES.values()]} | own | on_pd | on_kube
    assert own == {"queue_flood"} and set(BUILT_IN) <= covered, sorted(set(BUILT_IN) - covered)


def test_every_built_in_fault_is_installed_and_none_is_still_planned() -> None:
    assert set(BUILT_IN) <= set(registry.faults.kinds())
    for kind in BUILT_IN:
        assert registry.faults.info(kind).value.startswith("faults."), kind
        assert registry.planned("drill.faults", kind) is None


@pytest.mark.parametrize("kind", BUILT_IN)
def test_the_docstring_example_is_a_valid_drill_fault(kind: str) -> None:
    fault_cls = registry.faults.get(kind)
    entries = _example(fault_cls)
    assert entries
    for entry in entries:
        spec = FaultSpec.model_validate(entry)
        assert spec.kind == kind
        params = fault_cls.Params.model_validate(spec.params)
        fault = fault_cls(params)
        assert fault.needs_for(params) and fault.realism_for(params) in set(Realism)


@pytest.mark.parametrize("kind", BUILT_IN)
def test_describe_documents_params_methods_realism_and_revert(kind: str) -> None:
    fault_cls = registry.faults.get(kind)
    result = CliRunner().invoke(cli, ["faults", "describe", kind])
    assert result.exit_code == 0, result.output
    out = result.output
    for name in fault_cls.Params.model_fields:
        assert re.search(rf"^  {name}: .+ \((default .+|required)\)", out, re.M), name
    assert "Revert:" in out and fault_cls.revert_semantics[:30] in out and "code-block:: yaml" in out
    for mechanism in fault_cls.mechanisms:
        assert f"  {mechanism.name} — " in out and mechanism.realism.value in out
    if not fault_cls.mechanisms:
        assert f"Realism: {fault_cls.realism.value}" in out


def test_list_shows_every_fault_with_its_realism_per_method() -> None:
    result = CliRunner().invoke(cli, ["faults", "list"])
    assert result.exit_code == 0
    for kind in BUILT_IN:
        assert re.search(rf"^{kind} +\S", result.output, re.M), kind
    assert "nvidia_smi: real hardware only, not verified" in result.output
    assert "clock_cap: simulated" in result.output


def test_the_fault_catalogue_page_has_a_row_for_every_built_in_fault() -> None:
    """docs/faults.md is where a user picks a fault: a fault missing from its table is not in the catalogue."""
    page = (Path(__file__).parents[2] / "docs" / "faults.md").read_text()
    rows = {
        kind
        for line in page.splitlines()
        if line.startswith("| `")
        for kind in re.findall(r"`(\w+)`", line.split("|")[1])
    }
    assert set(BUILT_IN) <= rows, sorted(set(BUILT_IN) - rows)


#: Issue 19's P/D faults act on the reference stack's KV side channel: each says how it maps onto a real deployment.
PD_FAULTS = (
    "kv_transfer_delay",
    "kv_transfer_stall",
    "kv_transfer_fail",
    "kv_block_corrupt",
    "prefill_crash",
    "decode_crash",
)


@pytest.mark.parametrize("kind", PD_FAULTS)
def test_a_pd_fault_says_how_it_maps_onto_a_real_deployment(kind: str) -> None:
    result = CliRunner().invoke(cli, ["faults", "describe", kind])
    assert result.exit_code == 0, result.output
    assert re.search(
        r"^On a real deployment\b.*\b(replica_crash|partition|slow_replica|output_correctness)\b",
        result.output,
        re.M | re.S,
    ), result.output


@pytest.mark.parametrize(
    ("kind", "params", "needs", "realism"),
    [
        ("slow_replica", {"latency_ms": 100}, {Capability.TOXIPROXY_REPLICA}, Realism.REAL),
        ("slow_replica", {"method": "docker_cpu", "cpus": 0.5}, {Capability.DOCKER}, Realism.REAL),
        ("slow_replica", {"method": "clock_cap", "clock_fraction": 0.5}, {Capability.STACK_ADMIN}, Realism.SIMULATED),
        ("gpu_oom", {"gib": 10}, {Capability.STACK_ADMIN}, Realism.SIMULATED),
        ("gpu_oom", {"gib": 10, "method": "cuda_hog"}, {Capability.NVIDIA_GPU}, Realism.HARDWARE_UNVERIFIED),
        (
            "nccl_degradation",
            {"latency_ms": 1, "link_kinds": ["tp", "pp"]},
            {Capability.TOXIPROXY_TP_LINK, Capability.TOXIPROXY_PP_LINK},
            Realism.REAL,
        ),
        (
            "nccl_degradation",
            {"method": "transport_downgrade"},
            {Capability.NVIDIA_GPU, Capability.DOCKER},
            Realism.HARDWARE_UNVERIFIED,
        ),
        ("replica_crash", {}, {Capability.PROCESS, Capability.SUPERVISOR}, Realism.REAL),
        ("replica_crash", {"expect_restart": False}, {Capability.PROCESS}, Realism.REAL),
        ("replica_crash", {"method": "docker"}, {Capability.DOCKER}, Realism.REAL),
        ("queue_flood", {}, {Capability.LOAD_CONTROL}, Realism.REAL),
    ],
)
def test_the_method_decides_needs_and_realism(kind, params, needs, realism) -> None:
    fault_cls = registry.faults.get(kind)
    parsed = fault_cls.Params.model_validate(params)
    assert fault_cls(parsed).needs_for(parsed) == needs
    assert fault_cls(parsed).realism_for(parsed) is realism


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("slow_replica", {"cpus": 0.5}, "cpus belong(s) to method docker_cpu"),
        ("slow_replica", {}, "method toxiproxy needs latency_ms"),
        ("gpu_clock_cap", {"method": "nvidia_smi"}, "needs gpu_indices"),
        ("nccl_degradation", {"method": "netem", "latency_ms": 1}, "needs interface"),
        ("nccl_degradation", {"loss_pct": 1, "latency_ms": 1}, "loss_pct belongs to method netem"),
        ("queue_flood", {"rate_multiplier": 1}, "greater than 1"),
        ("gpu_oom", {}, "Field required"),
        ("partition", {"mode": "sideways"}, "'blackhole' or 'refuse'"),
    ],
)
def test_params_that_do_not_fit_the_method_are_refused_with_the_reason(kind, params, message) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        registry.faults.get(kind).Params.model_validate(params)


def test_a_drill_whose_fault_needs_what_the_target_lacks_is_refused_before_anything_runs(tmp_path) -> None:
    drill = tmp_path / "d.yaml"
    drill.write_text(
        yaml.safe_dump(
            {
                "name": "needs",
                "target": {"kind": "embedded", "config": {"replicas": 1}},
                "scenario": {
                    "arrival": {"process": "poisson", "rate": 1},
                    "pools": [
                        {
                            "name": "chat",
                            "input_tokens": {"dist": "fixed", "value": 10},
                            "output_tokens": {"dist": "fixed", "value": 5},
                        }
                    ],
                },
                "faults": [{"kind": "slow_replica", "params": {"method": "docker_cpu", "cpus": 0.5}}],
            }
        )
    )
    result = CliRunner().invoke(cli, ["validate", str(drill)])
    assert result.exit_code == 2
    assert "fault 'slow_replica' needs docker; target 'embedded' as configured provides" in result.output
