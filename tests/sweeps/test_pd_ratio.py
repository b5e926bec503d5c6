"""The ``pd_ratio`` check, the P/D figures and their cost model, and the report's P/D section, on sweep directories
written by hand (``pd_kit``): no stack, no load. The real sweep of both length mixes is ``test_pd_ratio_sweep.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from drill.api import Status
from drill.rundir.evidence import RunEvidence
from drill.spec.loader import load_drill
from drill.stack.config import StackConfig
from drill.sweeps.pd_figures import PdTtftSpans, is_pd_sweep, measure_pd_sweep, model_pd
from drill.sweeps.pd_ratio import PdRatioCheck, PdRatioParams
from drill.sweeps.scaling_report import write_scaling_reports
from tests.sweeps.pd_kit import write_pd_sweep, write_spans

REPO = Path(__file__).resolve().parents[2]
N = 20  # requests per split: one every 0.5 s over the 10 s baseline, 2 req/s

#: A prefill-heavy picture: one prefill worker falls behind (TTFT grows until requests time out), two nearly keep
#: up (a third of the requests over the 2 s TTFT bound), three keep up.
PREFILL_BOUND = {
    (1, 3): [400.0 * (i + 1) for i in range(N - 5)] + [None] * 5,
    (2, 2): [900.0 if i % 3 else 2600.0 for i in range(N)],
    (3, 1): [600.0] * N,
}


def _judge(root: Path, **params: object):
    return PdRatioCheck(PdRatioParams(**params)).evaluate(RunEvidence(root))


def test_the_split_with_the_most_goodput_wins_and_the_message_says_which_side_is_the_bottleneck(
    tmp_path: Path,
) -> None:
    root = write_pd_sweep(tmp_path / "sweep", PREFILL_BOUND)
    verdict = _judge(root, best="3P:1D")
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.message.startswith("3P:1D wins: goodput 3P:1D 2, 2P:2D 1.3, 1P:3D 0.5 req/s in SLO at 2 req/s")
    assert "the prefill side is the bottleneck (prefill is compute-bound on the prompt" in verdict.message
    assert verdict.observed["winner"] == "3P:1D" and verdict.observed["1P:3D.goodput_rps"] == 0.5
    predicted = _judge(root)  # best: predicted — the cost model's split for these lengths and this rate
    assert predicted.status is Status.PASS and "expected 3P:1D (the cost model's prediction)" in predicted.message


def test_another_split_winning_is_a_failure_naming_both(tmp_path: Path) -> None:
    root = write_pd_sweep(tmp_path / "sweep", PREFILL_BOUND)
    verdict = _judge(root, best="1p:3d")
    assert verdict.status is Status.FAIL
    assert verdict.message.startswith("3P:1D wins") and verdict.message.endswith("expected 1P:3D")


def test_a_tie_on_goodput_goes_to_the_split_with_the_most_slo_headroom(tmp_path: Path) -> None:
    root = write_pd_sweep(tmp_path / "sweep", {(2, 2): [1500.0] * N, (3, 1): [700.0] * N, (1, 3): [None] * N})
    verdict = _judge(root, best="3P:1D")
    assert verdict.status is Status.PASS, verdict.message
    assert "tied on goodput within 10%; the most SLO headroom decided" in verdict.message
    clear = _judge(root, best="3P:1D", margin=0.0)  # no margin: equal goodput is still a tie
    assert clear.status is Status.PASS and "tied" in clear.message


def test_goodput_decides_before_headroom_unless_within_the_margin(tmp_path: Path) -> None:
    """3P:1D serves more requests within the SLO (17 of 20) but its three slow ones put its p95 over the bound;
    2P:2D serves 15 of 20, all close to the bound: goodput wins unless the margin makes them a tie."""
    splits: dict[tuple[int, int], list[float | None]] = {
        (3, 1): [600.0] * 17 + [2500.0] * 3,
        (2, 2): [1900.0] * 15 + [2100.0] * 5,
        (1, 3): [None] * N,
    }
    root = write_pd_sweep(tmp_path / "sweep", splits)
    table = measure_pd_sweep(root)
    ratio = {v.split: v.slo_ratio or 0 for v in table.variants}
    assert ratio["3P:1D"] > ratio["2P:2D"] > 1, ratio
    verdict = _judge(root, best="3P:1D")
    assert verdict.status is Status.PASS and "tied" not in verdict.message, verdict.message
    tied = _judge(root, best="3P:1D", margin=0.5)
    assert tied.status is Status.FAIL, tied.message
    assert tied.message.startswith("2P:2D wins (tied on goodput within 50%"), tied.message


@pytest.mark.parametrize(
    ("splits", "params", "why"),
    [
        ({(1, 3): [600.0] * N}, {}, "1 measured split(s): nothing to compare"),
        ({(1, 3): [600.0] * N, (3, 2): [600.0] * N}, {}, "do not share one total of workers (1P:3D, 3P:2D)"),
        ({(1, 3): [600.0] * N, (3, 1): [600.0] * N}, {"min_requests": 30}, "too few requests in pd-1p_3d's"),
        ({(1, 3): [None] * N, (3, 1): [5000.0] * N}, {}, "no split met the SLO at all"),
    ],
)
def test_thin_evidence_is_inconclusive(tmp_path: Path, splits: dict, params: dict, why: str) -> None:
    verdict = _judge(write_pd_sweep(tmp_path / "sweep", splits), **params)
    assert verdict.status is Status.INCONCLUSIVE and why in verdict.message, verdict.message


def test_predicted_needs_the_cost_model_and_outside_a_sweep_there_is_nothing_to_judge(tmp_path: Path) -> None:
    root = write_pd_sweep(tmp_path / "sweep", PREFILL_BOUND, kind="openai")
    assert not is_pd_sweep(root)
    verdict = _judge(root)
    assert verdict.status is Status.INCONCLUSIVE and "nothing to compare" in verdict.message
    (tmp_path / "run").mkdir()
    assert "not a sweep" in _judge(tmp_path / "run").message


def test_best_must_name_a_split_or_predicted() -> None:
    assert PdRatioParams(best=" 3p : 1d ").best == "3P:1D"
    for bad in ("3:1", "3P1D", "0P:4D", "fastest"):
        with pytest.raises(ValidationError, match="of the form <prefill>P:<decode>D|each side needs"):
            PdRatioParams(best=bad)


def _shipped_split(split: str, scenario: str) -> tuple[StackConfig, float]:
    loaded = load_drill(REPO / "drills/pd-ratio.yaml", overrides=(f"target.config.topology.ratio={split}",))
    assert isinstance(loaded.target_params, StackConfig)
    rate = load_drill(REPO / "drills/pd-ratio.yaml", overrides=(f"scenario={scenario}",)).scenario.pools[0]
    return loaded.target_params, rate.arrival.rate  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("scenario", "prompt", "output", "side", "winner"),
    [("pd-prefill-heavy", 1600, 8, "prefill", "3P:1D"), ("pd-decode-heavy", 64, 48, "decode", "1P:3D")],
)
def test_the_cost_model_makes_the_bottleneck_of_each_length_mix(
    scenario: str, prompt: int, output: int, side: str, winner: str
) -> None:
    """Prefill's load is its prompts' compute (it grows with the prompt, not the batch); decode's is the slots its
    requests hold (output x step, the step barely growing with the batch: memory-bound). The shipped drill's
    splits at each mix's rate and mean lengths: the mix's side is the bottleneck of every split, and the split
    that loads it least is the one the drill predicts."""
    models = {}
    for split in ("1P:3D", "2P:2D", "3P:1D"):
        config, rate = _shipped_split(split, scenario)
        models[split] = model_pd(config, rate, prompt, output)
    assert {m.bottleneck for m in models.values()} == {side}, models
    assert min(models, key=lambda s: models[s].peak_load) == winner, models
    assert max(m.peak_load for m in models.values()) > 1.5  # the worst split cannot keep up
    # compute-bound: a prefill worker's cost per request grows with the prompt's tokens (25x the prompt: ~25x)
    config = _shipped_split("1P:3D", scenario)[0]
    short, long = model_pd(config, 1.0, 64, output), model_pd(config, 1.0, 1600, output)
    assert 20 < long.prefill_busy_s / short.prefill_busy_s < 26, (short, long)
    assert models[winner].peak_load < 1  # the winner can
    # batched and memory-bound: the busiest decode worker's step (its batch full) within 10 % of a batch of one
    busiest = models["3P:1D"]
    alone = model_pd(_shipped_split("3P:1D", scenario)[0], 0.01, prompt, output)
    assert alone.decode_batch == 1 and busiest.decode_step_s < 1.1 * alone.decode_step_s, (busiest, alone)


def test_the_spans_say_where_the_ttft_went(tmp_path: Path) -> None:
    root = write_pd_sweep(tmp_path / "sweep", PREFILL_BOUND)
    entries = {e["value"]: e for e in json.loads((root / "sweep.json").read_text())["variants"]}
    write_spans(root, entries["1P:3D"], prefill_leg_ms=3000.0, decode_queue_ms=40.0)
    write_spans(root, entries["3P:1D"], prefill_leg_ms=450.0, decode_queue_ms=900.0)
    splits = {v.split: v.spans for v in measure_pd_sweep(root).variants}
    assert splits["2P:2D"] is None  # no spans: no measured split
    assert splits["1P:3D"] == PdTtftSpans(20, 3000.0, 2.0, 40.0)
    assert splits["3P:1D"] == PdTtftSpans(20, 450.0, 2.0, 900.0)
    write_scaling_reports(root)
    md = (root / "scaling.md").read_text()
    assert "(spans: prefill leg 3000 ms, decode queue 40 ms)" in md and "(spans: prefill leg 450 ms" in md


def test_the_report_shows_the_splits_side_by_side_and_names_the_winner(tmp_path: Path) -> None:
    root = write_pd_sweep(tmp_path / "sweep", PREFILL_BOUND)
    table = measure_pd_sweep(root)
    assert [v.split for v in table.variants] == ["1P:3D", "2P:2D", "3P:1D"] and table.predicted is not None
    assert table.find("1P:3D").failed == 5  # type: ignore[union-attr]
    write_scaling_reports(root)
    md = (root / "scaling.md").read_text()
    assert "- 3P:1D serves this length mix best: goodput 2 req/s in SLO of 2 offered" in md
    assert "## Prefill:decode splits" in md and "## Figures per variant and link state" not in md
    [row] = [line for line in md.splitlines() if line.startswith("| 1P:3D |")]
    assert row.endswith("| prefill |") and "| 20 | 5 | 0.5 |" in row
    assert "The cost model predicts 3P:1D (the least-loaded busier side), as measured" in md
    assert "<h2>3. Prefill:decode splits</h2>" in (root / "scaling.html").read_text()
