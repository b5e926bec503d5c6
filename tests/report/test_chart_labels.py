"""The phase names over a chart over time never overlap each other or the panel's title, however narrow the phases:
the bounding boxes of the drawn texts, measured from matplotlib after the layout, are disjoint."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from drill.report import charts
from tests.checks.rundir_kit import RunKit

#: Short phases side by side, as a run's first seconds are (a 1 s cold start, a 2 s warm-up), then long ones.
NARROW = {"cold_start": (0, 1), "warmup": (1, 3), "baseline": (3, 63), "fault": (63, 64.5), "recovery": (64.5, 130)}


def _run(tmp_path: Path, phases: dict[str, tuple[float, float]], until: float | None = None) -> RunKit:
    """The phases, a short fault window in the one named fault, 400 requests of two pools spread over the run (or
    up to ``until`` s)."""
    kit = RunKit(tmp_path / "run")
    kit.phases(**phases)
    kit.pool("interactive", slo={"ttft_p95": 1.0})
    kit.pool("batch", slo={"e2e_p95": 10.0})
    kit.fault("flood", injected=63.2, reverted=64.2)
    end = until or max(e for _, e in phases.values())
    for i in range(400):
        at = end * i / 400
        kit.request(at, pool="batch" if i % 3 == 0 else "interactive", ttft_ms=80 + i % 50, e2e_ms=900 + i % 400)
    return kit


def _figures_of(chart: Callable[[Any], str | None], evidence: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The matplotlib figures ``chart`` saves (caught at the one place every chart turns into SVG)."""
    caught: list[Any] = []
    real = charts._svg

    def keep(fig: Any, *args: Any) -> str:
        svg = real(fig, *args)
        caught.append(fig)
        return svg

    monkeypatch.setattr(charts, "_svg", keep)
    assert chart(evidence) is not None
    return caught


def _top_texts(fig: Any, names: set[str]) -> list[Any]:
    """Every drawn text of the figure that names a phase, and every axes title."""
    from matplotlib.text import Text

    titles = {ax.get_title(loc=loc) for ax in fig.axes for loc in ("left", "center", "right")} - {""}
    return [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text() and (t.get_text() in names or t.get_text() in titles)
    ]


@pytest.mark.parametrize("chart", [charts.latency_over_time, charts.errors_over_time], ids=lambda c: c.__name__)
def test_phase_names_never_overlap_on_narrow_adjacent_phases(tmp_path: Path, chart, monkeypatch) -> None:
    evidence = _run(tmp_path, NARROW).evidence()
    (fig,) = _figures_of(chart, evidence, monkeypatch)
    fig.draw_without_rendering()  # the layout as saved
    texts = _top_texts(fig, set(NARROW))
    named = sorted(t.get_text() for t in texts if t.get_text() in NARROW)
    assert named == sorted(NARROW), "every phase is named once over the top panel"
    boxes = [(t.get_text(), t.get_window_extent()) for t in texts]
    overlaps = [(a, b) for (a, box_a), (b, box_b) in combinations(boxes, 2) if box_a.overlaps(box_b)]
    assert overlaps == [], overlaps


def test_phases_wide_enough_keep_their_names_on_one_row(tmp_path: Path, monkeypatch) -> None:
    wide = {"warmup": (0, 30), "baseline": (30, 60), "fault": (60, 90), "recovery": (90, 120)}
    (fig,) = _figures_of(charts.latency_over_time, _run(tmp_path, wide).evidence(), monkeypatch)
    fig.draw_without_rendering()
    rows = {round(t.get_window_extent().y0) for t in _top_texts(fig, set(wide)) if t.get_text() in wide}
    assert len(rows) == 1, rows


def test_a_phase_partly_off_the_axis_is_named_over_the_part_shown(tmp_path: Path, monkeypatch) -> None:
    """Recovery runs 100-400 s but the requests stop at 130 s, where the time axis ends: its name sits over the
    part the axis shows, inside the axes (centred on the whole phase it would be off the chart)."""
    phases = {"baseline": (0, 60), "fault": (60, 100), "recovery": (100, 400)}
    (fig,) = _figures_of(charts.latency_over_time, _run(tmp_path, phases, until=130).evidence(), monkeypatch)
    fig.draw_without_rendering()
    shown = {t.get_text(): t for t in _top_texts(fig, set(phases))}
    assert set(phases) <= set(shown)
    axes = fig.axes[0].get_window_extent()
    box = shown["recovery"].get_window_extent()
    assert axes.x0 <= box.x0 and box.x1 <= axes.x1, (box, axes)
