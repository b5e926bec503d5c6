"""CONTRIBUTING.md's examples: the fault is a fault the registry would load and its drill snippet validates; the
check is registered the way a plugin author would register it, keeps the check contract kit, and judges runs
through `drill judge` with the params of its drill snippet."""

from __future__ import annotations

import json
import os
import re
from importlib.metadata import EntryPoint
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from click.testing import CliRunner

from drill import registry
from drill.api import Capability, Check, CheckParams, Fault, FaultParams, Status
from drill.cli.main import cli
from drill.errors import PluginError
from drill.testing import CheckCase, ContractViolation, run_check_contract
from tests.checks.rundir_kit import RunKit

REPO = Path(__file__).resolve().parents[1]
TEXT = (REPO / "CONTRIBUTING.md").read_text()
GUIDE = TEXT[TEXT.index("## Writing a fault") : TEXT.index("## Writing a check")]
CHECK_GUIDE = TEXT[TEXT.index("## Writing a check") :]


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


# --- the check example ------------------------------------------------------------------------------


@pytest.fixture
def tail_ttft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> type[Check]:
    """The guide's check, saved as a module of its own and registered with DRILL_EXTRA_PLUGINS, as the guide says."""
    code = re.search(r"```python\n(.*?)```", CHECK_GUIDE, re.S)
    assert code, "the check guide has no Python example"
    (tmp_path / "contributing_check.py").write_text(code.group(1))
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = "drill.checks:tail_ttft=contributing_check:TailTtft"
    assert plugin.partition("=")[2].replace("contributing_check", "my_module") in CHECK_GUIDE
    monkeypatch.setenv("DRILL_EXTRA_PLUGINS", os.environ["DRILL_EXTRA_PLUGINS"] + ";" + plugin)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]]))
    return registry.checks.get("tail_ttft")


def _snippet() -> dict:
    (spec,) = yaml.safe_load(re.findall(r"```yaml\n(.*?)```", CHECK_GUIDE, re.S)[-1])["checks"]
    return spec


def _run(run_dir: Path, fault_ttft_ms: float, per_phase: int = 30) -> Path:
    """A run with ``per_phase`` answered requests a phase: TTFT 100-129 ms at baseline, ``fault_ttft_ms`` + 0-29 in
    the fault; resolved.json names the guide's check with its snippet's params, as a run of that drill would."""
    kit = RunKit(run_dir)
    kit.phases(baseline=(0, 30), fault=(30, 60), recovery=(60, 90))
    for i in range(per_phase):
        kit.request(at=i, ttft_ms=100.0 + i)
        kit.request(at=30 + i, ttft_ms=fault_ttft_ms + i)
    path = kit.write()
    resolved = json.loads((path / "resolved.json").read_text())
    spec = _snippet()
    resolved["drill"] = {"name": "tail", "checks": [{"kind": spec["kind"], "name": spec["name"]}]}
    resolved["check_params"] = [spec["params"]]
    (path / "resolved.json").write_text(json.dumps(resolved))
    return path


def test_the_example_check_imports_only_the_sdk_and_keeps_the_contract(tail_ttft: type[Check], tmp_path: Path) -> None:
    assert issubclass(tail_ttft, Check) and issubclass(tail_ttft.Params, CheckParams)
    imports = re.findall(r"^(?:from|import) (\S+)", re.search(r"```python\n(.*?)```", CHECK_GUIDE, re.S).group(1), re.M)
    assert [m for m in imports if m.startswith("drill")] == ["drill.api"]
    runs = [(_run(tmp_path / "calm", 150), Status.PASS), (_run(tmp_path / "slow", 1000), Status.FAIL)]
    runs.append((_run(tmp_path / "thin", 150, per_phase=5), Status.INCONCLUSIVE))
    report = run_check_contract(CheckCase("tail_ttft", _snippet()["params"], runs=runs), tmp_path)
    assert report.clauses[-1] == "3 run(s) give the expected status, purely, serialisably"
    with pytest.raises(ContractViolation, match="the verdict is FAIL, expected PASS"):
        run_check_contract(CheckCase("tail_ttft", {"max_ratio": 3}, runs=[(runs[1][0], Status.PASS)]), tmp_path)


def test_drill_judge_judges_a_run_with_the_registered_example(tail_ttft: type[Check], tmp_path: Path) -> None:
    slow = _run(tmp_path / "slow", 1000)
    result = CliRunner().invoke(cli, ["judge", str(slow), "--json"])
    assert result.exit_code == 1, result.output
    (verdict,) = [v for v in json.loads(result.output)["checks"] if v["kind"] == "tail_ttft"]
    assert verdict["name"] == "tail-holds" and verdict["status"] == "FAIL", verdict
    assert verdict["observed"]["fault_p99_ttft_ms"] == 1029 and verdict["observed"]["baseline_p99_ttft_ms"] == 129
    assert verdict["evidence"] == [
        {"kind": "request_id", "value": "interactive-60-1", "note": "the slowest first token of the fault"}
    ]
    calm = CliRunner().invoke(cli, ["judge", str(_run(tmp_path / "calm", 150)), "--json"])
    assert [(v["kind"], v["status"]) for v in json.loads(calm.output)["checks"]] == [("tail_ttft", "PASS")]
    assert calm.exit_code == 0, calm.output
