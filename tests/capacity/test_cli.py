"""``drill capacity``'s bad input: a located error, exit 2, and nothing started (no run directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
SCENARIO = str(REPO / "scenarios" / "chat-azure-conv.yaml")


def _run(tmp_path: Path, *args: str):
    result = CliRunner().invoke(cli, ["capacity", *args, "--out", str(tmp_path / "reports")])
    return result, result.output


def _nothing_started(tmp_path: Path) -> bool:
    return not (tmp_path / "reports").exists()


def test_unknown_scenario_key_is_located(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(SCENARIO).read_text().replace("max_in_flight: 1000", "max_in_flight: 1000\nmax_inflight: 3"))
    result, out = _run(tmp_path, str(bad))
    assert result.exit_code == 2, out
    line = next(i for i, text in enumerate(bad.read_text().splitlines(), 1) if text.startswith("max_inflight"))
    assert f"bad.yaml:{line}:" in out and "max_inflight" in out
    assert _nothing_started(tmp_path)


@pytest.mark.parametrize(
    ("rates", "item"),
    [("2,abc,8", "item 2"), ("0", "item 1"), ("4,-1", "item 2"), ("", "item 1"), ("3,nan", "item 2")],
)
def test_bad_rates_name_the_item(tmp_path: Path, rates: str, item: str):
    result, out = _run(tmp_path, SCENARIO, "--rates", rates)
    assert result.exit_code == 2, out
    assert "--rates" in out and item in out
    assert _nothing_started(tmp_path)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--headroom", "n-2"], "--headroom"),
        (["--headroom", "150%"], "--headroom"),
        (["--target", "http://127.0.0.1:9", "--headroom", "n-1"], "needs the embedded target"),
        (["--target", "nowhere.yaml"], "--target"),
        (["--target", "http://10.1.2.3:8000"], "10.1.2.3"),
        (["--attainment", "median"], "--attainment"),
        (["--tolerance", "2"], "--tolerance"),
        (["--repetitions", "0"], "--repetitions"),
        (["--gpu-hour-price", "-1"], "--gpu-hour-price"),
    ],
)
def test_bad_options_exit_2_before_anything_starts(tmp_path: Path, args: list[str], needle: str):
    result, out = _run(tmp_path, SCENARIO, *args)
    assert result.exit_code == 2, out
    assert needle in out
    assert _nothing_started(tmp_path)


def test_a_scenario_without_slo_is_refused(tmp_path: Path):
    text = Path(SCENARIO).read_text()
    bare = tmp_path / "no-slo.yaml"
    bare.write_text(text[: text.index("    slo:")])
    result, out = _run(tmp_path, str(bare))
    assert result.exit_code == 2, out
    assert "no pool has an SLO" in out
    assert _nothing_started(tmp_path)


def test_a_drill_target_with_a_bad_override_is_located(tmp_path: Path):
    drill = tmp_path / "d.yaml"
    drill.write_text((REPO / "drills" / "replica-crash.yaml").read_text().replace("gpu: h100", "gpu: h1000"))
    result, out = _run(tmp_path, SCENARIO, "--target", str(drill))
    assert result.exit_code == 2, out
    assert "d.yaml:" in out and "h1000" in out
    assert _nothing_started(tmp_path)
