"""--set overrides, --time-scale, the loopback safety check, and `drill plan` (a dry run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from drill import __version__
from drill.cli.main import cli
from drill.errors import SpecError, UnsafeTargetError
from drill.runner.safety import check_hosts, is_loopback
from drill.spec.loader import load_drill
from drill.spec.overrides import parse_override

REPO = Path(__file__).resolve().parents[2]
TOXIC = REPO / "tests/fixtures/drills/toxic.yaml"


def test_parse_override_reads_values_as_yaml() -> None:
    assert parse_override("faults[0].params.latency_ms=50") == (("faults", 0, "params", "latency_ms"), 50)
    assert parse_override("phases.fault=30s") == (("phases", "fault"), "30s")
    assert parse_override("target.config.replicas=[]") == (("target", "config", "replicas"), [])
    with pytest.raises(ValueError):
        parse_override("no-equals-sign")
    with pytest.raises(ValueError):
        parse_override("bad..path=1")


def test_set_overrides_any_field_and_bad_values_are_located_at_the_command_line() -> None:
    loaded = load_drill(TOXIC, overrides=["faults[0].params.latency_ms=75", "phases.recovery=45s", "seed=9"])
    assert loaded.fault_params[0].latency_ms == 75 and loaded.drill.phases.recovery == 45.0 and loaded.drill.seed == 9
    with pytest.raises(SpecError) as info:
        load_drill(TOXIC, overrides=["phases.fault=ten", "faults[3].start=1s"])
    rendered = info.value.render()
    assert "<--set>:1:" in rendered and "phases.fault" in rendered
    assert "<--set>:2:1: error: --set faults[3].start=1s: faults has no item [3]" in rendered


def test_time_scale_shrinks_the_timeline_but_not_latency_bounds() -> None:
    loaded = load_drill(TOXIC, time_scale=0.1)
    drill = loaded.drill
    assert drill.phases.baseline == pytest.approx(2.0) and drill.phases.fault == pytest.approx(6.0)
    assert drill.faults[0].start == pytest.approx(1.0) and drill.faults[0].duration == pytest.approx(3.0)
    assert drill.stop_conditions[0].for_ == pytest.approx(1.0)
    assert loaded.scenario.pools[0].slo == {"ttft_p95": 1.0}  # an SLO is not a schedule
    assert loaded.scenario.pools[0].timeout == 60.0


def test_loopback_only_unless_allowed() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.5.0.1")
    assert not is_loopback("10.0.0.1") and not is_loopback("vllm.prod.example.com")
    loaded = load_drill(TOXIC, overrides=["target.config.url=http://vllm.prod.example.com:8000"])
    with pytest.raises(UnsafeTargetError) as info:
        check_hosts(loaded)
    assert info.value.exit_code == 2 and "--allow-host vllm.prod.example.com" in str(info.value)
    check_hosts(loaded, ["vllm.prod.example.com"])
    allowed = load_drill(
        TOXIC,
        overrides=["target.config.url=http://vllm.prod.example.com:8000", "allowed_hosts=[vllm.prod.example.com]"],
    )
    check_hosts(allowed)


def test_run_refuses_a_non_loopback_target_before_creating_anything(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["run", str(TOXIC), "--out", str(tmp_path / "out"), "--set", "target.config.url=http://10.1.2.3:8000"]
    )
    assert result.exit_code == 2 and "10.1.2.3" in result.output
    assert not (tmp_path / "out").exists()


def test_plan_prints_the_timeline_and_what_each_fault_touches_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["plan", str(TOXIC), "--time-scale", "0.5"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "warmup      0s – 2.5s" in out and "baseline    2.5s – 12.5s" in out and "fault       12.5s – 42.5s" in out
    assert "fault slow (test_toxic_latency, real mechanism here): 17.5s – 32.5s" in out
    assert "latency_ms = 200" in out and "attach to http://127.0.0.1:18000" in out
    assert "stop condition: error rate above 0.5 for 5s" in out
    assert "nothing was started" in out
    assert list(tmp_path.iterdir()) == []


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"drill {__version__}"


def test_a_bare_drill_name_resolves_in_drills_and_the_main_drill_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """`drill plan drills/unbounded-queue.yaml` prints the timeline and its checks, every part built; starts nothing."""
    monkeypatch.chdir(REPO)
    before = set(REPO.glob("reports/**/*"))
    for name in ("drills/unbounded-queue.yaml", "unbounded-queue.yaml", "unbounded-queue"):
        result = CliRunner().invoke(cli, ["plan", name])
        assert result.exit_code == 0, result.output
        assert "fault       80s – 337s" in result.output and "fault flood (queue_flood" in result.output
        assert "cannot run yet" not in result.output and "check: fast_failure (fast_failure)" in result.output
        assert "nothing was started" in result.output
    assert set(REPO.glob("reports/**/*")) == before


def test_run_dirs_are_never_reused(tmp_path: Path) -> None:
    from drill.rundir.directory import create_run_dir

    first = create_run_dir(tmp_path, "d", now=0)
    second = create_run_dir(tmp_path, "d", now=0)
    assert first.path != second.path and first.path.name.startswith("19700101T000000Z-")
    first.write_json("verdicts.json", {})
    with pytest.raises(FileExistsError):
        first.write_json("verdicts.json", {})
