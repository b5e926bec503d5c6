"""CONTRIBUTING.md's fault example is a fault the registry would load, and its drill snippet validates."""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from drill import registry
from drill.api import Capability, Fault, FaultParams
from drill.errors import PluginError

REPO = Path(__file__).resolve().parents[1]
TEXT = (REPO / "CONTRIBUTING.md").read_text()
GUIDE = TEXT[TEXT.index("## Writing a fault") :]


def _example() -> ModuleType:
    code = re.search(r"```python\n(.*?)```", GUIDE, re.S)
    assert code, "the fault guide has no Python example"
    module = ModuleType("contributing_example")
    exec(compile(code.group(1), "CONTRIBUTING.md", "exec"), module.__dict__)
    return module


def test_the_example_fault_passes_the_registrys_verification() -> None:
    fault = _example().SlowAnswers
    assert issubclass(fault, Fault) and issubclass(fault.Params, FaultParams)
    entry = EntryPoint(name=fault.kind, value="contributing_example:SlowAnswers", group="drill.faults")
    registry._verify("drill.faults", "fault", entry, fault)
    assert fault.needs == frozenset({Capability.TOXIPROXY_REPLICA})


def test_the_verification_the_guide_describes_refuses_a_wrong_kind() -> None:
    fault = _example().SlowAnswers
    entry = EntryPoint(name="another_name", value="contributing_example:SlowAnswers", group="drill.faults")
    with pytest.raises(PluginError, match="its kind is 'slow_answers'"):
        registry._verify("drill.faults", "fault", entry, fault)


def test_the_drill_snippet_uses_the_examples_params() -> None:
    fault = _example().SlowAnswers
    snippet = re.findall(r"```yaml\n(.*?)```", GUIDE, re.S)[-1]
    (spec,) = yaml.safe_load(snippet)["faults"]
    assert spec["kind"] == fault.kind
    assert fault.Params.model_validate(spec["params"]).latency_ms == 400
