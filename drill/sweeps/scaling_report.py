"""``scaling.md`` and ``scaling.html``: the sweep's report, from its run directory alone.

What it shows (templates ``drill/report/templates/scaling.md.j2`` and ``scaling.html.j2``): the sweep's verdicts;
each variant's one change and run directory; per link state the figures of :mod:`drill.sweeps.scaling` and the
speedup over the first value; the findings — where the gain shrinks or reverses, i.e. where communication
overhead cancels the gain of parallelism; and, for the embedded stack, each variant's modelled decode step split
into memory, compute, communication and overhead beside the measured per-step cost of the degraded link. The chart
(:mod:`drill.sweeps.scaling_chart`) is inlined into the HTML and written as ``scaling.svg`` for the Markdown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drill.api import Verdict
from drill.report.render import load_verdicts, template_environment
from drill.rundir.evidence import RunEvidence
from drill.rundir.files import write_in_run_dir
from drill.sweeps.pd_figures import PdRatioTable, PdVariant, is_pd_sweep, measure_pd_sweep
from drill.sweeps.pd_ratio import winner
from drill.sweeps.scaling import STATES, ScalingTable, VariantFigures, measure_sweep, read_sweep_record
from drill.sweeps.scaling_chart import scaling_chart
from drill.sweeps.tp_scaling import degraded_effect

__all__ = ["ScalingView", "StepSplit", "findings", "write_scaling_reports"]


@dataclass(frozen=True)
class StepSplit:
    """One variant's per-step time: the cost model's parts and what the degraded link added, measured (ms)."""

    label: str
    predicted_step_ms: float
    memory_ms: float
    compute_ms: float
    comm_ms: float
    overhead_ms: float
    predicted_link_ms: float | None
    measured_link_ms: float | None  # degraded TPOT p50 - healthy TPOT p50
    break_even_ms: float | None  # the healthy gain over the reference: the per-step link time that cancels it


@dataclass(frozen=True)
class ScalingView:
    """What the templates print."""

    drill: dict
    run_id: str
    time_scale: float | None
    table: ScalingTable
    verdicts: list[Verdict]
    findings: list[str]
    splits: list[StepSplit]
    chart_svg: str | None
    pd: PdRatioTable | None = None  # a sweep of prefill:decode splits (drill.sweeps.pd_figures)

    def speedup(self, state: str, variant: VariantFigures) -> float | None:
        return self.table.speedup(state, variant)

    @property
    def states(self) -> tuple[str, ...]:
        return STATES


def write_scaling_reports(run_dir: Path) -> list[Path]:
    """Render ``scaling.md`` (with ``scaling.svg``) and ``scaling.html`` into ``run_dir``; returns their paths."""
    run_dir = Path(run_dir)
    view = scaling_view(run_dir)
    written = []
    if view.chart_svg is not None:
        write_in_run_dir(run_dir, "scaling.svg", (view.chart_svg + "\n").encode("utf-8"))
    for name in ("scaling.md", "scaling.html"):
        text = template_environment(name.endswith(".html")).get_template(f"{name}.j2").render(v=view)
        written.append(write_in_run_dir(run_dir, name, text.encode("utf-8")))
    return written


def scaling_view(run_dir: Path) -> ScalingView:
    table = measure_sweep(run_dir)
    resolved = RunEvidence(run_dir).resolved
    record = read_sweep_record(run_dir) or {}
    drill = resolved.get("drill") or {}
    if is_pd_sweep(run_dir):
        return _pd_view(run_dir, table, drill, resolved.get("time_scale"))
    return ScalingView(
        drill={key: drill.get(key) for key in ("name", "title", "seed", "hypothesis")}
        | {"faults": drill.get("faults") or []},
        run_id=run_dir.name,
        time_scale=resolved.get("time_scale"),
        table=table,
        verdicts=load_verdicts(run_dir),
        findings=findings(table) + [f"{v['label']}: not measured ({v['status']})" for v in _unmeasured(record, table)],
        splits=_splits(table),
        chart_svg=scaling_chart(table),
    )


def _pd_view(run_dir: Path, table: ScalingTable, drill: dict, time_scale: float | None) -> ScalingView:
    """A sweep of P/D splits: its own findings and table instead of the link states, TP speedups and chart."""
    pd = measure_pd_sweep(run_dir)
    return ScalingView(
        drill={key: drill.get(key) for key in ("name", "title", "seed", "hypothesis")} | {"faults": []},
        run_id=run_dir.name,
        time_scale=time_scale,
        table=table,
        verdicts=load_verdicts(run_dir),
        findings=pd_findings(pd),
        splits=[],
        chart_svg=None,
        pd=pd,
    )


def pd_findings(pd: PdRatioTable) -> list[str]:
    """The winner on goodput (ties within 10 % to the SLO headroom), each split's bottleneck, the prediction."""
    if not pd.variants:
        return ["no split was measured"]
    best, clear = winner(pd, 0.1)
    lines = [
        f"{best.split} serves this length mix best: goodput {best.goodput_rps or 0:g} req/s in SLO of "
        f"{best.offered_rps or 0:g} offered"
        + ("" if clear else " (tied on goodput within 10 %; the most SLO headroom decided)")
    ]
    for v in pd.variants:
        if v.model is not None:
            m = v.model
            lines.append(
                f"{v.split}: modelled prefill load {m.prefill_load:g}, decode load {m.decode_load:g} — the "
                f"{m.bottleneck} side is the bottleneck"
                + (" and cannot keep up (its queue grows)" if m.peak_load > 1 else "")
                + f"; TTFT p50 {v.ttft_p50_ms or 0:.0f} ms, of which {v.waiting_ms or 0:.0f} ms waiting"
                + _span_words(v)
            )
    predicted = pd.predicted
    if predicted is not None:
        agree = "as" if predicted.split == best.split else "unlike"
        lines.append(f"The cost model predicts {predicted.split} (the least-loaded busier side), {agree} measured")
    return lines + list(pd.notes)


def _span_words(v: PdVariant) -> str:
    """`` (spans: prefill leg 1500 ms, decode queue 67 ms)``: where the TTFT went, measured."""
    if v.spans is None or v.spans.prefill_leg_ms is None or v.spans.decode_queue_ms is None:
        return ""
    return f" (spans: prefill leg {v.spans.prefill_leg_ms:.0f} ms, decode queue {v.spans.decode_queue_ms:.0f} ms)"


def findings(table: ScalingTable) -> list[str]:
    """Per variant over the reference: the speedup in each state, and whether the gain shrinks or reverses."""
    ref = table.reference
    if ref is None:
        return ["no variant was measured"]
    lines = []
    cancelled = []
    for v in table.variants[1:]:
        healthy, degraded = table.speedup("healthy", v), table.speedup("degraded", v)
        if healthy is None or degraded is None:
            lines.append(f"{v.label}: no TPOT in a state, no speedup to compare")
            continue
        effect = degraded_effect(healthy, degraded)
        lines.append(
            f"{v.label} over {ref.label}: {healthy:.2f}x on healthy links, {degraded:.2f}x on degraded links — the "
            f"gain {effect}" + (" (communication overhead cancels the parallel gain)" if effect == "reverses" else "")
        )
        if effect == "reverses":
            cancelled.append(v.label)
    lines += _healthy_returns(table)
    if cancelled:
        lines.append(
            f"Where parallelism stops paying: on degraded links from {cancelled[0]} on ({', '.join(cancelled)} "
            f"slower than {ref.label}); on healthy links "
            + ("it still pays at every value measured" if _pays_everywhere(table) else "see the speedups above")
        )
    return lines


def _healthy_returns(table: ScalingTable) -> list[str]:
    """Diminishing returns on healthy links: the gain each step of the sweep adds over the previous one."""
    measured = [v for v in table.variants if v.healthy.tpot_p50_ms]
    lines = []
    for prev, cur in zip(measured, measured[1:]):
        assert prev.healthy.tpot_p50_ms and cur.healthy.tpot_p50_ms
        step = prev.healthy.tpot_p50_ms / cur.healthy.tpot_p50_ms
        lines.append(f"healthy links, {prev.label} -> {cur.label}: {step:.2f}x")
    return lines


def _pays_everywhere(table: ScalingTable) -> bool:
    return all((table.speedup("healthy", v) or 0) > 1 for v in table.variants[1:])


def _splits(table: ScalingTable) -> list[StepSplit]:
    ref = table.reference
    splits = []
    for v in table.variants:
        p = v.prediction
        if p is None:
            continue
        healthy, degraded = v.healthy.tpot_p50_ms, v.degraded.tpot_p50_ms
        measured = round(degraded - healthy, 2) if healthy and degraded and p.link_increase_ms else None
        reference = ref.healthy.tpot_p50_ms if ref is not None and ref is not v else None
        gain = reference - healthy if reference and healthy else None
        splits.append(
            StepSplit(
                v.label,
                p.step_ms,
                p.memory_ms,
                p.compute_ms,
                p.comm_ms,
                p.overhead_ms,
                p.link_increase_ms,
                measured,
                round(gain, 2) if gain is not None else None,
            )
        )
    return splits


def _unmeasured(record: dict, table: ScalingTable) -> list[dict]:
    measured = {v.label for v in table.variants}
    return [v for v in record.get("variants") or [] if v.get("label") not in measured]
