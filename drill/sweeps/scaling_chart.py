"""The TP-scaling chart: TPOT, per-request decode speed and speedup against the sweep's values, healthy vs degraded.

Three panels side by side over the sweep's values (TP=1, 2, 4): TPOT p50 (with p95 as a thin line), one
request's decode speed (output tokens/s, ``1000 / TPOT p50``) and the speedup over the first value with the
break-even line at 1x; healthy links solid blue circles, degraded links dashed vermilion squares, so the states
stay apart in greyscale too. Rendered as :mod:`drill.report.charts` renders its charts (its style context and SVG
writer: deterministic, text as text, a title and a description).
"""

from __future__ import annotations

from drill.report.charts import PALETTE, _style, _svg
from drill.sweeps.scaling import STATES, ScalingTable

__all__ = ["scaling_chart"]

_STYLE = {"healthy": (PALETTE[0], "-", "o"), "degraded": (PALETTE[5], "--", "s")}
_NAMES = {"healthy": "healthy links", "degraded": "degraded links"}


def scaling_chart(table: ScalingTable) -> str | None:
    """The chart as inline SVG, or None when fewer than two variants have a TPOT."""
    measured = [v for v in table.variants if v.healthy.tpot_p50_ms is not None]
    if len(measured) < 2:
        return None
    # lazy: matplotlib takes ~3 s to import; only a sweep that draws its chart loads it
    from matplotlib.figure import Figure

    labels = [str(v.value) for v in measured]
    xs = list(range(len(measured)))
    with _style():
        fig = Figure(figsize=(9.0, 3.0), layout="constrained")
        tpot, speed, gain = fig.subplots(1, 3)
        for state in STATES:
            colour, dash, marker = _STYLE[state]
            line = {"color": colour, "linestyle": dash, "marker": marker, "label": _NAMES[state]}
            tpot.plot(xs, [v.state(state).tpot_p50_ms for v in measured], **line)
            tpot.plot(xs, [v.state(state).tpot_p95_ms for v in measured], color=colour, linestyle=dash, linewidth=0.6)
            speed.plot(xs, [v.state(state).stream_tokens_per_s for v in measured], **line)
            gain.plot(xs, [table.speedup(state, v) for v in measured], **line)
        gain.axhline(1.0, color="#555555", linestyle=":", linewidth=0.8)
        for ax, title, unit in (
            (tpot, "TPOT p50 (thin: p95)", "ms"),
            (speed, "decode speed of one request", "output tokens/s"),
            (gain, f"speedup over {table.variable.rsplit('.', 1)[-1]}={labels[0]}", "x (TPOT ratio)"),
        ):
            ax.set_xticks(xs, labels)
            ax.set_xlabel(table.variable.rsplit(".", 1)[-1])
            ax.set_ylabel(unit)
            ax.set_title(title)
            ax.set_ylim(bottom=0)
        gain.legend(loc="best")
        description = "; ".join(
            f"{v.label}: TPOT p50 {v.healthy.tpot_p50_ms} ms healthy, {v.degraded.tpot_p50_ms} ms degraded"
            for v in measured
        )
        return _svg(fig, "scaling", f"TPOT and speedup against {table.variable}", description)
