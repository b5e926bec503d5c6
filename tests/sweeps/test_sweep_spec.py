"""The ``sweep:`` block: one variable, 2-8 distinct values, each variant a valid drill; located errors, exit 2.

``drill validate`` in-process (Click's runner) on drill files written here; :func:`resolve_sweep` on the catalogue's
tp-scaling drill. No stack, no processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.main import cli
from drill.spec.loader import load_drill
from drill.sweeps.resolve import resolve_sweep

REPO = Path(__file__).resolve().parents[2]
VARIABLE = "target.config.engine.tensor_parallel_size"

DRILL = """\
schema: drill/v1
name: sweep-spec
target:
  kind: embedded
  config: {{engine: {{tensor_parallel_size: 2}}, links: {{tp_proxies: true}}}}
scenario:
  arrival: {{process: poisson, rate: 2}}
  pools:
    - {{name: chat, input_tokens: {{dist: fixed, value: 10}}, output_tokens: {{dist: fixed, value: 5}}}}
phases: {{baseline: 5s, fault: 5s, recovery: 0s}}
faults:
  - {{name: link, kind: nccl_degradation, params: {{latency_ms: 1}}}}
sweep:
{sweep}
"""


def _validate(tmp_path: Path, sweep: str) -> tuple[int, str, Path]:
    path = tmp_path / "sweep.yaml"
    path.write_text(DRILL.format(sweep=sweep))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    return result.exit_code, result.output, path


@pytest.mark.parametrize(
    ("sweep", "line_col", "message"),
    [
        (
            f"  variable: {VARIABLE}\n  values: [2]",
            "15:11",
            "a sweep needs 2 to 8 values (one variant each), got 1",
        ),
        (
            f"  variable: {VARIABLE}\n  values: [1, 2, 3, 4, 5, 6, 7, 8, 9]",
            "15:11",
            "2 to 8 values (one variant each), got 9",
        ),
        (f"  variable: {VARIABLE}\n  values: [2, 4, 2]", "15:11", "value 2 is listed twice (items 0 and 2)"),
        (
            f"  variable: [{VARIABLE}, router.policy]\n  values: [2, 4]",
            "14:13",
            "sweep.variable: expected text",
        ),
        ("  variable: target config\n  values: [2, 4]", "14:13", "is not one key path; a sweep varies exactly one"),
        ("  variable: seed\n  values: [1, 2]", "14:13", "a sweep cannot vary 'seed'"),
        ("  variable: sweep.values\n  values: [1, 2]", "14:13", "a sweep cannot vary 'sweep.values'"),
        (f"  variables: {VARIABLE}\n  values: [2, 4]", "14:3", "sweep.variables: unknown key"),
    ],
    ids=["one-value", "nine-values", "duplicate", "two-variables", "not-a-key-path", "the-seed", "itself", "typo"],
)
def test_a_bad_sweep_block_is_a_located_error_and_exit_2(
    tmp_path: Path, sweep: str, line_col: str, message: str
) -> None:
    code, output, path = _validate(tmp_path, sweep)
    assert code == 2, output
    assert f"{path}:{line_col}: error: " in output, output
    assert message in output, output
    assert "Traceback" not in output


def test_a_variant_that_is_not_a_valid_drill_is_located_at_its_value(tmp_path: Path) -> None:
    code, output, path = _validate(tmp_path, f"  variable: {VARIABLE}\n  values: [2, four]\n")
    assert code == 2, output
    assert f"{path}:15:15: error: sweep.values[1]: the variant {VARIABLE}='four': expected an integer" in output
    assert "1 error; nothing was run." in output


def test_a_variant_whose_target_cannot_take_a_fault_names_the_way_out(tmp_path: Path) -> None:
    code, output, path = _validate(tmp_path, f"  variable: {VARIABLE}\n  values: [1, 2]\n")
    assert code == 2, output
    assert f"{path}:15:12: error: sweep.values[0]: the variant {VARIABLE}=1: fault 'nccl_degradation' needs " in output
    assert "hint: set sweep.skip_unsupported_faults: true to run that variant without the fault" in output
    code, output, _ = _validate(tmp_path, f"  variable: {VARIABLE}\n  values: [1, 2]\n  skip_unsupported_faults: true")
    assert code == 0, output


def test_the_variants_of_tp_scaling_change_exactly_the_one_variable() -> None:
    plan = resolve_sweep(load_drill(REPO / "drills/tp-scaling.yaml", overrides=["otlp.port=0"], time_scale=0.5))
    assert [v.label for v in plan.variants] == ["tp-1", "tp-2", "tp-4"]
    assert [kind for kind, _, _ in plan.sweep_checks] == ["tp_scaling"]
    base = plan.base.drill.model_dump(exclude={"sweep", "faults", "checks", "target"})
    for variant, tp in zip(plan.variants, (1, 2, 4)):
        drill = variant.loaded.drill
        assert variant.loaded.overrides == ("otlp.port=0", f"{VARIABLE}={tp}", "sweep=null")
        assert variant.assignment == f"{VARIABLE}={tp}"
        assert variant.loaded.target_params.engine.tensor_parallel_size == tp
        assert drill.sweep is None and variant.loaded.time_scale == 0.5
        assert drill.model_dump(exclude={"sweep", "faults", "checks", "target"}) == base  # seed, phases, scenario
        assert variant.loaded.scenario == plan.base.scenario
        assert [c.kind for c in drill.checks] == ["error_rate"]  # tp_scaling judges the sweep, not a variant
        assert len(drill.faults) == (0 if tp == 1 else 1)
    [why] = plan.variants[0].skipped_faults
    assert why.startswith("tp-links: fault 'nccl_degradation' needs toxiproxy.tp_link")
    assert plan.variants[1].skipped_faults == ()


def test_drill_plan_lists_the_variants_and_the_fault_a_variant_runs_without() -> None:
    result = CliRunner().invoke(cli, ["plan", str(REPO / "drills/tp-scaling.yaml")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].startswith(f"sweep: {VARIABLE} — one run per value")
    assert lines[2:4] == [
        f"  variant tp-1: --set {VARIABLE}=1",
        "    runs without tp-links: fault 'nccl_degradation' needs toxiproxy.tp_link; target 'embedded' as configured "
        "provides: load.control, process, router.admin, stack.admin, supervisor",
    ]
    assert f"  variant tp-4: --set {VARIABLE}=4" in lines and "nothing was started (dry run)." in lines
