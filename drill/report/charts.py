"""The report's charts: matplotlib figures rendered as small, deterministic, accessible SVG strings.

Each chart function takes what the report already has (a :class:`~drill.rundir.evidence.RunEvidence`, or a span table)
and returns the SVG markup, ready to inline into HTML, or ``None`` when the run has nothing to draw.

- Deterministic: the same run directory gives byte-identical SVG. The SVG backend's ids are hashed with a fixed
  salt (``svg.hashsalt``), no date or creator metadata is written, and every id is prefixed with the chart's own
  id, so several charts inlined into one page never share an id.
- Small: text stays text (``svg.fonttype: none``), paths are simplified, and every series is binned to at most
  :data:`MAX_POINTS` points, so a drill of 20k requests charts in well under a second per chart.
- Accessible: each SVG has ``role="img"``, a ``<title>`` and a ``<desc>``; axes carry labels with units; series
  are told apart by line style or hatching as well as by colour, and the colours are the Okabe-Ito palette, which
  stays distinct under the common colour-vision deficiencies.

matplotlib is imported on first use (it takes a few hundred ms) and only its object-oriented API is used — a
:class:`matplotlib.figure.Figure` saved straight to SVG — so no backend is selected, no pyplot state is kept and
no window can open.
"""

from __future__ import annotations

import io
import math
import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import numpy as np

from drill.report.quantities import quantity_series
from drill.rundir.records import ErrorClass, RequestRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

    from drill.rundir.evidence import PhaseWindow, RunEvidence
    from drill.traces.table import SpanTable

__all__ = [
    "MAX_POINTS",
    "PALETTE",
    "errors_over_time",
    "goodput_curve",
    "latency_distributions",
    "latency_over_time",
    "pick_baseline_trace",
    "queue_and_kv",
    "trace_waterfall",
]

#: The most points one series of a chart draws; denser data is binned first.
MAX_POINTS = 2000
#: The most time bins of a chart over time (each bin aggregates the requests in it).
_MAX_BINS = 300
#: Requests per bin a chart over time aims for, so a bin's p95 means something.
_PER_BIN = 20
#: The most steps one phase's distribution draws.
_ECDF_POINTS = 400
#: The most spans one trace's waterfall draws.
MAX_WATERFALL_SPANS = 80

#: Okabe & Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/), in the order series get them.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
_BLUE, _ORANGE, _GREEN, _PURPLE, _SKY, _VERMILLION, _YELLOW, _BLACK = PALETTE
_FAULT_SHADE = "#D55E00"
_PHASE_STYLE = {
    "warmup": ("#7F7F7F", ":"),
    "baseline": (_BLUE, "-"),
    "fault": (_VERMILLION, "--"),
    "recovery": (_GREEN, "-."),
    "replay": (_PURPLE, ":"),
}
_ERROR_COLOURS = {
    ErrorClass.REFUSED: _ORANGE,
    ErrorClass.TIMEOUT: _VERMILLION,
    ErrorClass.SERVER_ERROR: _PURPLE,
    ErrorClass.CLIENT_ERROR: _SKY,
    ErrorClass.CONNECTION_RESET: _BLACK,
    ErrorClass.CONNECTION_ERROR: "#7F7F7F",
    ErrorClass.MID_STREAM_ERROR: _YELLOW,
    ErrorClass.CLIENT_DROP: "#B07AA1",
    ErrorClass.CANCELLED: "#BAB0AC",
}

_OUTCOME_COLOURS = {"ok": _GREEN, **{c.value: colour for c, colour in _ERROR_COLOURS.items()}}

#: How the SLO lines of a distribution differ from each other (colour and dashes, for greyscale too).
_SLO_STYLES: tuple[tuple[str, Any], ...] = (
    (_BLACK, ":"),
    ("#555555", (0, (6, 2))),
    (_BLACK, (0, (1, 1, 4, 1))),
    ("#555555", (0, (3, 1, 1, 1))),
)
#: Line hatches only: a dotted hatch makes a pattern tile of tens of kB in SVG.
_OUTCOME_HATCHES = {"ok": None, ErrorClass.REFUSED.value: "//"}

_RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "llm-drill",
    # Names drawn in a chart (span, service, pool names) come from the evidence: literal text, never TeX or
    # mathtext (a "$" in a span name would be parsed as math and could stop the chart from drawing).
    "text.parse_math": False,
    "text.usetex": False,
    "svg.fonttype": "none",
    "path.simplify": True,
    "path.simplify_threshold": 0.5,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.color": "#DDDDDD",
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "figure.dpi": 72,
    "hatch.linewidth": 0.8,
}
#: Metadata the SVG backend would otherwise fill with today's date and matplotlib's version.
_NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}


# --- public charts -----------------------------------------------------------------------------------------------


def latency_over_time(evidence: RunEvidence) -> str | None:
    """TTFT (p50, p95) and E2E (p95) of successful requests per time bin, one panel per pool, with the fault window
    shaded, the phases marked and the pool's TTFT/E2E SLO lines. None without a successful request's latency."""
    origin = _origin(evidence)
    panels = [p for p in (_pool_latency(evidence, pool, origin) for pool in _pools(evidence.requests)) if p.series]
    if not panels:
        return None
    grid = _TimeGrid.over([s.x for p in panels for s in p.series], sum(len(s.x) for p in panels for s in p.series))
    with _style():
        fig, axes = _stacked(len(panels))
        for i, (ax, panel) in enumerate(zip(axes, panels)):
            _mark_run(ax, evidence, origin, f"{i}", names=i == 0)
            _draw_latency_panel(ax, panel, grid, f"{i}")
        axes[-1].set_xlabel("time since the run started (s)")
        fig.suptitle("Latency over time, per pool")
        return _svg(
            fig,
            "latency-over-time",
            "Latency over time, per pool",
            f"Per {grid.width:g} s bin: TTFT p50 and p95 and E2E p95 of successful requests, in ms, for "
            f"pool{'s' if len(panels) > 1 else ''} {', '.join(p.pool for p in panels)}; "
            "the fault window is shaded and each pool's SLO is a dotted line.",
        )


def errors_over_time(evidence: RunEvidence) -> str | None:
    """Attempts per second stacked by outcome (ok and each error class) and the error and refusal rates (%),
    per time bin, with the fault window shaded. None without a client record."""
    records = evidence.requests
    if not records:
        return None
    origin = _origin(evidence)
    x = np.fromiter((r.intended_ts - origin for r in records), dtype=float, count=len(records))
    grid = _TimeGrid.over([x], len(x))
    bins = grid.index(x)
    outcome = [r.error.value if r.error is not None else ("ok" if r.ok else "http_error") for r in records]
    with _style():
        fig, (rate_ax, share_ax) = _stacked(2)
        for i, ax in enumerate((rate_ax, share_ax)):
            _mark_run(ax, evidence, origin, f"{i}", names=i == 0)
        _draw_outcomes(rate_ax, grid, bins, outcome)
        _draw_error_rates(share_ax, grid, bins, outcome)
        share_ax.set_xlabel("time since the run started (s)")
        fig.suptitle("Errors and refusals over time")
        return _svg(
            fig,
            "errors-over-time",
            "Errors and refusals over time",
            f"Per {grid.width:g} s bin: attempts per second by outcome, and the share of attempts that "
            "failed and that were refused (HTTP 429/503), in percent; the fault window is shaded.",
        )


def queue_and_kv(evidence: RunEvidence) -> str | None:
    """Queue depth (and running requests) and KV-cache use over time, from the target's scraped metrics, with the
    fault window shaded. None when the target exports neither queue depth nor KV-cache use."""
    queue, running, kv = (_quantity(evidence, name) for name in ("queue_depth", "running", "kv_cache_usage"))
    if not queue and not kv:
        return None
    origin = _origin(evidence)
    panels: list[Callable[[Axes], None]] = []
    if queue or running:
        panels.append(lambda ax: _draw_queue(ax, origin, queue, running))
    if kv:
        panels.append(lambda ax: _draw_kv(ax, origin, kv))
    with _style():
        fig, axes = _stacked(len(panels))
        for i, (ax, draw) in enumerate(zip(axes, panels)):
            _mark_run(ax, evidence, origin, f"{i}", names=i == 0)
            draw(ax)
            _legend_right(ax)
        axes[-1].set_xlabel("time since the run started (s)")
        fig.suptitle("Queue depth and KV-cache use")
        return _svg(
            fig,
            "queue-and-kv",
            "Queue depth and KV-cache use over time",
            "Requests waiting and running in the target's scheduler, and the share of KV-cache blocks in "
            "use (%), from the scraped metrics (the highest value in each bin); the fault window is shaded.",
        )


def latency_distributions(evidence: RunEvidence) -> str | None:
    """Empirical CDFs of TTFT and TPOT of successful requests, one line per phase (log x when the values span a
    wide range), with the pools' TTFT/TPOT SLOs. None without a TTFT or TPOT value in any phase."""
    groups = _phase_groups(evidence)
    ttft = [(name, np.array([v for r in rs if (v := r.ttft_ms) is not None], dtype=float)) for name, rs in groups]
    tpot = [(name, np.array([v for r in rs if (v := r.tpot_ms) is not None], dtype=float)) for name, rs in groups]
    if not any(len(v) for _, v in ttft + tpot):
        return None
    with _style():
        # lazy: matplotlib takes ~3 s to import; only a report that draws a chart loads it
        from matplotlib.figure import Figure

        fig = Figure(figsize=(8.0, 3.4), layout="constrained")
        axes = fig.subplots(1, 2)
        for ax, metric, label, values in ((axes[0], "ttft", "TTFT", ttft), (axes[1], "tpot", "TPOT", tpot)):
            _draw_ecdfs(ax, values, _slo_lines(evidence, metric), metric)
            ax.set_title(f"{label} by phase")
            ax.set_xlabel(f"{label} (ms)")
        axes[0].set_ylabel("share of requests at or below")
        fig.suptitle("Latency distributions by phase")
        return _svg(
            fig,
            "latency-distributions",
            "TTFT and TPOT distributions by phase",
            "Empirical cumulative distributions of time to first token and time per output token (ms) of "
            f"successful requests in each phase ({', '.join(name for name, _ in groups)}); the dotted "
            "vertical lines are the pools' SLOs.",
        )


def trace_waterfall(table: SpanTable, trace_id: str, baseline_trace_id: str | None = None) -> str | None:
    """One affected trace's spans as bars by start and duration (ms from the trace's start), indented by depth,
    labelled service · name, error spans hatched and marked — above a baseline trace of the same shape on the same
    time scale. None when the table has no span of ``trace_id``."""
    affected = _waterfall_rows(table, trace_id)
    if affected is None:
        return None
    baseline = _waterfall_rows(table, baseline_trace_id) if baseline_trace_id else None
    shown = [("affected", affected)] + ([("baseline", baseline)] if baseline is not None else [])
    colours = _service_colours(sorted({s for _, rows in shown for s in rows.services}))
    span_ms = max(max(float(rows.end_ms.max()) for _, rows in shown), 1e-3)
    with _style():
        fig, pairs = _waterfall_axes([len(rows) for _, rows in shown])
        for (role, rows), (label_ax, bar_ax) in zip(shown, pairs):
            _draw_waterfall(label_ax, bar_ax, rows, colours, span_ms)
            bar_ax.set_title(f"{role} trace {rows.trace_id} ({rows.total_ms:.1f} ms, {rows.count} spans)", loc="left")
        pairs[-1][1].set_xlabel("time since the trace started (ms)")
        _waterfall_legend(fig, colours, any(rows.error.any() for _, rows in shown))
        note = "" if baseline is not None else " (no baseline trace of the same shape)"
        fig.suptitle(f"Affected trace beside a baseline trace{note}")
        return _svg(
            fig,
            f"trace-{trace_id[:16]}",
            "Trace waterfall: affected trace beside a baseline trace",
            f"Spans of trace {trace_id}"
            + (f" and of baseline trace {baseline_trace_id}" if baseline else note)
            + ", as bars from their start for their duration (ms); hatched bars are spans with error status.",
        )


def pick_baseline_trace(table: SpanTable, trace_id: str, baseline_mask: np.ndarray | None = None) -> str | None:
    """A baseline trace shaped like ``trace_id``: among the traces with a span in ``baseline_mask`` (a bool per row of
    ``table``; None: every other trace), those with the same multiset of (service, name) pairs, else the same set of
    pairs, else the same root (service, name) and the most pairs in common; of these the one of median duration
    (ties: the smallest trace id). None when no trace qualifies."""
    shapes = _TraceShapes(table)
    target = shapes.code_of(trace_id)
    if target is None:
        return None
    mask = np.ones(len(table), dtype=bool) if baseline_mask is None else np.asarray(baseline_mask, dtype=bool)
    candidates = sorted(set(np.unique(table.trace_code[mask]).tolist()) - {target})
    for tier in (shapes.same_multiset, shapes.same_set, shapes.same_root_closest):
        chosen = tier(target, candidates)
        if chosen:
            return shapes.median_trace(chosen)
    return None


# --- rendering ---------------------------------------------------------------------------------------------------


@contextmanager
def _style() -> Iterator[None]:
    """matplotlib's settings for the charts, for the duration of the block only (the caller's are restored)."""
    # lazy: matplotlib takes ~3 s to import; only a report that draws a chart loads it
    import matplotlib as mpl
    from cycler import cycler

    with mpl.rc_context({**_RC, "axes.prop_cycle": cycler(color=PALETTE)}):
        yield


def _stacked(panels: int) -> tuple[Figure, list[Axes]]:
    # lazy: matplotlib takes ~3 s to import; only a report that draws a chart loads it
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 0.6 + 2.3 * panels), layout="constrained")
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    return fig, list(axes)


def _svg(fig: Figure, chart_id: str, title: str, description: str) -> str:
    """The figure as inline-ready SVG: no XML prolog, ids scoped to ``chart_id``, a ``<title>`` and ``<desc>``."""
    # lazy: matplotlib takes ~3 s to import; only a report that draws a chart loads it
    import matplotlib as mpl

    _stagger_phase_names(fig)
    buffer = io.StringIO()
    with mpl.rc_context({"svg.id": chart_id}):
        fig.savefig(buffer, format="svg", metadata=_NO_METADATA)
    raw = buffer.getvalue()
    svg = _round_paths(_scope_ids(raw[raw.index("<svg") :], chart_id))
    head_end = svg.index(">") + 1
    head = svg[: head_end - 1] + f' role="img" aria-labelledby="{chart_id}-title {chart_id}-desc">'
    label = (
        f'\n <title id="{chart_id}-title">{escape(title)}</title>'
        f'\n <desc id="{chart_id}-desc">{escape(description)}</desc>'
    )
    return head + label + svg[head_end:]


_PATH_DATA = re.compile(r'\bd="([^"]*)"')
_LONG_NUMBER = re.compile(r"-?\d+\.\d{3,}")


def _round_paths(svg: str) -> str:
    """Path coordinates to 0.01 pt (the backend writes six decimals) on one line: a third of the bytes, same image."""

    def short(match: re.Match[str]) -> str:
        return f"{float(match.group()):.2f}".rstrip("0").rstrip(".")

    return _PATH_DATA.sub(lambda m: 'd="' + " ".join(_LONG_NUMBER.sub(short, m.group(1)).split()) + '"', svg)


_ID_USE = re.compile(r'(\bid="|url\(#|href="#)([^")]+)')


def _scope_ids(svg: str, chart_id: str) -> str:
    """Prefix every id (and every reference to one) with ``chart_id``; the root's id is ``chart_id`` itself."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg)) - {chart_id}
    return _ID_USE.sub(lambda m: m.group(1) + (f"{chart_id}-{m.group(2)}" if m.group(2) in ids else m.group(2)), svg)


def _log_scale(ax: Axes, which: str) -> None:
    """A log ``which`` axis ("x" or "y") whose ticks read as plain numbers (100, 1000), not powers of ten."""
    # lazy: matplotlib takes ~3 s to import; only a report that draws a chart loads it
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if which == "x":
        ax.set_xscale("log")
    else:
        ax.set_yscale("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _legend_right(ax: Axes) -> None:
    """The axes' legend outside it, on the right (constrained layout makes room), so it never hides data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


# --- time axes -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TimeGrid:
    """Equal time bins from ``start`` (s since the run started) of ``width`` s each."""

    start: float
    width: float
    count: int

    @classmethod
    def over(cls, xs: Sequence[np.ndarray], samples: int) -> _TimeGrid:
        lo = min(float(x.min()) for x in xs if len(x))
        hi = max(float(x.max()) for x in xs if len(x))
        bins = min(_MAX_BINS, max(10, samples // _PER_BIN))
        width = _nice_ceil(max(hi - lo, 1.0) / bins)
        start = math.floor(lo / width) * width
        return cls(start, width, max(1, math.ceil((hi - start) / width + 1e-9)))

    @property
    def edges(self) -> np.ndarray:
        return self.start + self.width * np.arange(self.count + 1)

    @property
    def centres(self) -> np.ndarray:
        return self.start + self.width * (np.arange(self.count) + 0.5)

    def index(self, x: np.ndarray) -> np.ndarray:
        return np.clip(((x - self.start) // self.width).astype(np.int64), 0, self.count - 1)


def _nice_ceil(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least ``value``."""
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value * (1 - 1e-9))


def _origin(evidence: RunEvidence) -> float:
    """The run's time origin (UNIX s): its first phase's start, else its first request."""
    starts = [w.start_ts for w in evidence.phases.values()]
    if starts:
        return min(starts)
    return min((r.intended_ts for r in evidence.requests), default=0.0)


def _mark_run(ax: Axes, evidence: RunEvidence, origin: float, key: str, *, names: bool) -> None:
    """Shade the fault window and draw each phase's start (named on the top panel)."""
    window = evidence.fault_window
    if window is not None:
        ax.axvspan(
            window[0] - origin,
            window[1] - origin,
            color=_FAULT_SHADE,
            alpha=0.12,
            lw=0,
            label="fault window",
            gid=f"fault-window-{key}",
        )
    phases = sorted(evidence.phases.values(), key=lambda w: w.start_ts)
    for phase in phases:
        ax.axvline(phase.start_ts - origin, color="#555555", lw=0.7, ls=(0, (2, 2)), gid=f"phase-{phase.phase}-{key}")
    if names:
        for w in phases:
            name = ax.annotate(
                w.phase,
                xy=((w.start_ts + w.end_ts) / 2 - origin, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(0, _NAME_BASE_PT),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8,
                color="#333333",
                annotation_clip=False,
                gid=f"{_PHASE_NAME}-{w.phase}-{key}",
            )
            _PHASE_EXTENT[name] = (w.start_ts - origin, w.end_ts - origin)


#: The phase names over a chart's top panel: their gid prefix, the offset of the first row above the axes and the
#: height of a row (points; the charts draw at 72 dpi, so points are pixels), and the least gap between two names.
_PHASE_NAME = "phase-name"
_NAME_BASE_PT = 3.0
_NAME_ROW_PT = 11.0
_NAME_GAP_PX = 4.0
#: Each phase name's phase (s since the run started), to centre the name on the part of the phase the axis shows.
_PHASE_EXTENT: weakref.WeakKeyDictionary[Any, tuple[float, float]] = weakref.WeakKeyDictionary()


def _stagger_phase_names(fig: Figure) -> None:
    """Lay the phase names out in rows so that no two overlap: short adjacent phases (``cold_start``, ``warmup``)
    get names on rows above each other, and each panel's title moves above its top row.

    The names' extents are measured after the layout (``draw_without_rendering``), then each name goes on the
    lowest row where it clears every name already there (first fit over names sorted by their left edge, which
    needs the fewest rows for intervals)."""
    panels = [(ax, names) for ax in fig.axes if (names := _phase_names(ax))]
    if not panels:
        return
    for ax, names in panels:  # each name over the part of its phase the axis shows; none for a phase off the axis
        lo, hi = sorted(ax.get_xlim())
        for text in names:
            start, end = _PHASE_EXTENT.get(text, (text.xy[0], text.xy[0]))
            start, end = max(start, lo), min(end, hi)
            text.set_visible(bool(end > start or lo <= start == end <= hi))
            text.xy = ((start + end) / 2, 1.0)
    fig.draw_without_rendering()
    for ax, names in panels:
        shown = [text for text in names if text.get_visible()]
        boxes = sorted(((text.get_window_extent(), text) for text in shown), key=lambda pair: pair[0].x0)
        row_ends: list[float] = []  # the right edge (px) of the last name on each row
        for box, text in boxes:
            row = next((i for i, end in enumerate(row_ends) if box.x0 >= end + _NAME_GAP_PX), len(row_ends))
            if row == len(row_ends):
                row_ends.append(box.x1)
            else:
                row_ends[row] = box.x1
            text.xyann = (0.0, _NAME_BASE_PT + row * _NAME_ROW_PT)
        pad = _NAME_BASE_PT + len(row_ends) * _NAME_ROW_PT + 3.0
        for loc in ("left", "center", "right"):
            title = ax.get_title(loc=loc)
            if title:
                ax.set_title(title, loc=loc, pad=pad)


def _phase_names(ax: Axes) -> list[Any]:
    return [t for t in ax.texts if (t.get_gid() or "").startswith(_PHASE_NAME + "-")]


# --- latency over time -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Series:
    label: str
    x: np.ndarray  # s since the run started
    y: np.ndarray  # ms


@dataclass(frozen=True)
class _LatencyPanel:
    pool: str
    series: list[_Series]  # ttft, e2e (raw per-request values; binned when drawn)
    slo: dict[str, float]  # SLO key -> seconds
    requests: int


def _pools(records: Sequence[RequestRecord]) -> list[str]:
    return sorted({r.pool for r in records})


def _pool_latency(evidence: RunEvidence, pool: str, origin: float) -> _LatencyPanel:
    ok = [r for r in evidence.requests if r.pool == pool and r.ok]
    series = []
    for label, attr in (("TTFT", "ttft_ms"), ("E2E", "e2e_ms")):
        pairs = [(r.intended_ts - origin, v) for r in ok if (v := getattr(r, attr)) is not None]
        if pairs:
            xy = np.array(pairs, dtype=float)
            series.append(_Series(label, xy[:, 0], xy[:, 1]))
    return _LatencyPanel(pool, series, evidence.slo_by_pool.get(pool, {}), len(ok))


_LATENCY_LINES = {
    "TTFT": ((0.5, _BLUE, "-", 0.9, "TTFT p50"), (0.95, _BLUE, "-", 2.0, "TTFT p95")),
    "E2E": ((0.95, _ORANGE, "--", 1.6, "E2E p95"),),
}


def _draw_latency_panel(ax: Axes, panel: _LatencyPanel, grid: _TimeGrid, key: str) -> None:
    top = []
    for series in panel.series:
        lines = _LATENCY_LINES[series.label]
        quantiles = _binned_quantiles(grid.index(series.x), series.y, grid.count, [q for q, *_ in lines])
        for (_, colour, style, width, label), values in zip(lines, quantiles):
            gid = f"series-{panel.pool}-{label.replace(' ', '-').lower()}-{key}"
            ax.plot(grid.centres, values, color=colour, ls=style, lw=width, label=label, gid=gid)
            _mark_isolated(ax, grid.centres, values, colour, gid)
        top.append(float(np.nanmax(quantiles)))
    low = min(float(s.y.min()) for s in panel.series)
    for slo_key, seconds in sorted(panel.slo.items()):
        metric = slo_key.split("_")[0]
        if metric in ("ttft", "e2e"):
            ax.axhline(
                seconds * 1000,
                color=_BLUE if metric == "ttft" else _ORANGE,
                ls=":",
                lw=1.4,
                label=f"SLO {slo_key} = {seconds:g} s",
                gid=f"slo-{panel.pool}-{slo_key}-{key}",
            )
            top.append(seconds * 1000)
    if max(top) / max(low, 1e-3) > 30:
        _log_scale(ax, "y")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"pool {panel.pool} ({panel.requests} successful requests)", loc="left")
    _legend_right(ax)


def _mark_isolated(ax: Axes, x: np.ndarray, y: np.ndarray, colour: str, gid: str) -> None:
    """A dot for each value whose neighbouring bins are empty: a line through one point draws nothing."""
    present = ~np.isnan(y)
    before = np.concatenate(([False], present[:-1]))
    after = np.concatenate((present[1:], [False]))
    alone = present & ~before & ~after
    if alone.any():
        ax.plot(x[alone], y[alone], ls="none", marker="o", ms=3, color=colour, gid=f"{gid}-isolated")


def _binned_quantiles(bins: np.ndarray, values: np.ndarray, count: int, quantiles: Sequence[float]) -> np.ndarray:
    """Per bin, each quantile of the bin's values (linear interpolation); NaN for an empty bin. Shape (q, bins)."""
    order = np.lexsort((values, bins))
    ordered, per_bin = values[order], np.bincount(bins, minlength=count)
    offsets = np.concatenate(([0], np.cumsum(per_bin)[:-1]))
    out = np.full((len(quantiles), count), np.nan)
    filled = per_bin > 0
    for i, q in enumerate(quantiles):
        position = offsets[filled] + (per_bin[filled] - 1) * q
        below = np.floor(position).astype(np.int64)
        above = np.minimum(below + 1, offsets[filled] + per_bin[filled] - 1)
        fraction = position - below
        out[i, filled] = ordered[below] * (1 - fraction) + ordered[above] * fraction
    return out


# --- errors over time ------------------------------------------------------------------------------------------


def _draw_outcomes(ax: Axes, grid: _TimeGrid, bins: np.ndarray, outcome: list[str]) -> None:
    """Attempts per second by outcome, stacked: ok at the bottom, then each error class that occurred."""
    labels = np.array(outcome, dtype=object)
    classes = ["ok"] + [c.value for c in ErrorClass if (labels == c.value).any()]
    classes += ["http_error"] if (labels == "http_error").any() else []
    base = np.zeros(grid.count)
    for name in classes:
        rate = np.bincount(bins[labels == name], minlength=grid.count) / grid.width
        colour = _OUTCOME_COLOURS.get(name, "#7F7F7F")
        ax.stairs(
            base + rate,
            grid.edges,
            baseline=base,
            fill=True,
            color=colour,
            alpha=0.85,
            lw=0,
            hatch=_OUTCOME_HATCHES.get(name, "\\\\"),
            label=name.replace("_", " "),
            gid=f"outcome-{name}",
        )
        base = base + rate
    ax.set_ylabel("attempts per second")
    ax.set_title("Attempts by outcome", loc="left")
    _legend_right(ax)


def _draw_error_rates(ax: Axes, grid: _TimeGrid, bins: np.ndarray, outcome: list[str]) -> None:
    labels = np.array(outcome, dtype=object)
    attempts = np.bincount(bins, minlength=grid.count).astype(float)
    attempts[attempts == 0] = np.nan
    failed = np.bincount(bins[labels != "ok"], minlength=grid.count) / attempts * 100
    refused = np.bincount(bins[labels == ErrorClass.REFUSED.value], minlength=grid.count) / attempts * 100
    ax.plot(grid.centres, failed, color=_BLACK, lw=1.6, label="error rate (all classes)", gid="error-rate")
    ax.plot(grid.centres, refused, color=_ORANGE, lw=1.6, ls="--", label="refused (429/503)", gid="refusal-rate")
    _mark_isolated(ax, grid.centres, failed, _BLACK, "error-rate")
    _mark_isolated(ax, grid.centres, refused, _ORANGE, "refusal-rate")
    ax.set_ylim(0, 105)
    ax.set_ylabel("share of attempts (%)")
    ax.set_title("Error rate and refusals", loc="left")
    _legend_right(ax)


# --- queue and KV cache ----------------------------------------------------------------------------------------


#: A gauge's samples: (UNIX s, value), as :func:`drill.report.quantities.quantity_series` gives them.
_Samples = list[tuple[float, float]]


def _quantity(evidence: RunEvidence, name: str) -> _Samples | None:
    return quantity_series(evidence, name)


def _draw_queue(ax: Axes, origin: float, queue: _Samples | None, running: _Samples | None) -> None:
    gauges = [("waiting (queue depth)", queue, _VERMILLION, "-"), ("running", running, _BLUE, "--")]
    _draw_gauges(ax, origin, gauges, scale=1.0)
    ax.set_ylabel("requests")
    ax.set_title("Scheduler queue", loc="left")


def _draw_kv(ax: Axes, origin: float, kv: _Samples) -> None:
    _draw_gauges(ax, origin, [("KV-cache use", kv, _GREEN, "-")], scale=100.0)  # a share: 1 is 100 %
    ax.set_ylabel("KV-cache use (%)")
    ax.set_ylim(0, 105)
    ax.set_title("KV-cache use", loc="left")


def _draw_gauges(ax: Axes, origin: float, gauges: list[tuple[str, _Samples | None, str, str]], scale: float) -> None:
    """Step lines of gauge samples ``[(UNIX s, value)]`` (times ``scale``), each binned to its max per bin."""
    for label, samples, colour, style in gauges:
        if not samples:
            continue
        xy = np.array(sorted(samples), dtype=float)
        x, y = _max_binned(xy[:, 0] - origin, xy[:, 1] * scale)
        ax.plot(
            x,
            y,
            drawstyle="steps-post",
            color=colour,
            ls=style,
            lw=1.5,
            label=label,
            gid=f"gauge-{label.split()[0].lower()}",
        )


def _max_binned(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most :data:`MAX_POINTS` points: the highest value in each of equal time bins (peaks survive)."""
    if len(x) <= MAX_POINTS:
        return x, y
    edges = np.linspace(x[0], x[-1], MAX_POINTS + 1)
    bins = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, MAX_POINTS - 1)
    peak = np.full(MAX_POINTS, -np.inf)
    np.maximum.at(peak, bins, y)
    keep = np.isfinite(peak)
    return edges[:-1][keep], peak[keep]


# --- distributions ---------------------------------------------------------------------------------------------


def _phase_groups(evidence: RunEvidence) -> list[tuple[str, list[RequestRecord]]]:
    """Successful requests per phase, in run order; all of them as one group when the run has no phases."""
    phases: list[PhaseWindow] = sorted(evidence.phases.values(), key=lambda w: w.start_ts)
    ok = [r for r in evidence.requests if r.ok]
    if not phases:
        return [("all requests", ok)] if ok else []
    return [(w.phase, [r for r in ok if w.contains(r.intended_ts)]) for w in phases]


def _slo_lines(evidence: RunEvidence, metric: str) -> list[tuple[str, float]]:
    """(label, ms) per distinct SLO bound on ``metric``, naming the pools that share it."""
    bounds: dict[tuple[str, float], list[str]] = {}
    for pool, slo in sorted(evidence.slo_by_pool.items()):
        for key, seconds in slo.items():
            if key.split("_")[0] == metric:
                bounds.setdefault((key, seconds), []).append(pool)
    return [(f"SLO {key} = {s:g} s ({', '.join(pools)})", s * 1000) for (key, s), pools in sorted(bounds.items())]


def _draw_ecdfs(ax: Axes, groups: list[tuple[str, np.ndarray]], slo: list[tuple[str, float]], metric: str) -> None:
    present = [(name, values) for name, values in groups if len(values)]
    if not present:
        ax.text(0.5, 0.5, "no values", transform=ax.transAxes, ha="center", va="center", color="#555555")
        return
    for i, (name, values) in enumerate(present):
        colour, style = _PHASE_STYLE.get(name, (PALETTE[i % len(PALETTE)], "-"))
        x, y = _ecdf(values)
        ax.plot(
            x,
            y,
            drawstyle="steps-post",
            color=colour,
            ls=style,
            lw=1.6,
            label=f"{name} (n={len(values)})",
            gid=f"ecdf-{metric}-{name.replace(' ', '-')}",
        )
    for j, (label, ms) in enumerate(slo):
        slo_colour, slo_style = _SLO_STYLES[j % len(_SLO_STYLES)]
        ax.axvline(ms, color=slo_colour, ls=slo_style, lw=1.3, label=label, gid=f"slo-{metric}-{j}")
    ax.axhline(0.95, color="#999999", lw=0.6)
    lo = min(float(v.min()) for _, v in present)
    hi = max([float(v.max()) for _, v in present] + [ms for _, ms in slo])
    if lo > 0 and hi / lo > 20:
        _log_scale(ax, "x")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.2), ncols=2, borderaxespad=0.0)


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF's steps, at most :data:`_ECDF_POINTS` of them (evenly spaced in rank, first and last kept):
    a step of 1/400 is below what a chart's height shows, and each point costs the SVG about 15 bytes."""
    ordered = np.sort(values)
    n = len(ordered)
    ranks = np.arange(n) if n <= _ECDF_POINTS else np.unique(np.linspace(0, n - 1, _ECDF_POINTS).round().astype(int))
    # from 0 at the smallest value, so the first step (all of a one-request phase) is drawn too
    return np.concatenate((ordered[:1], ordered[ranks])), np.concatenate(([0.0], (ranks + 1) / n))


# --- trace waterfall -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WaterfallRows:
    """One trace's spans in tree order (parents before children, siblings by start)."""

    trace_id: str
    labels: list[str]  # service · name
    services: list[str]
    depth: np.ndarray
    start_ms: np.ndarray  # from the trace's first start
    end_ms: np.ndarray
    error: np.ndarray  # bool
    count: int  # spans in the trace (more than drawn when capped)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def total_ms(self) -> float:
        return float(self.end_ms.max()) if len(self.end_ms) else 0.0


def _waterfall_rows(table: SpanTable, trace_id: str | None) -> _WaterfallRows | None:
    if not trace_id or not len(table):
        return None
    rows = np.flatnonzero(table.trace_id == trace_id)
    if not len(rows):
        return None
    trace = table.take(rows)
    order, depth = _tree_order(trace)
    order, depth = order[:MAX_WATERFALL_SPANS], depth[:MAX_WATERFALL_SPANS]
    t0 = int(trace.start_ns.min())
    services = [trace.services[c] for c in trace.service[order]]
    labels = [_short(f"{s} · {trace.names[c]}", 46) for s, c in zip(services, trace.name[order])]
    return _WaterfallRows(
        trace_id,
        labels,
        services,
        depth,
        (trace.start_ns[order] - t0) / 1e6,
        (trace.end_ns[order] - t0) / 1e6,
        trace.status[order] == 2,
        len(trace),
    )


def _tree_order(trace: SpanTable) -> tuple[np.ndarray, np.ndarray]:
    """Rows depth-first from the roots (spans whose parent is not in the trace), siblings by start time."""
    parents = trace.parent_row
    by_start = np.lexsort((trace.span_id.astype(str), trace.start_ns))
    children: dict[int, list[int]] = {}
    for row in by_start.tolist():
        children.setdefault(int(parents[row]), []).append(row)
    order: list[int] = []
    depth: list[int] = []
    stack = [(row, 0) for row in reversed(children.get(-1, []))]
    while stack:
        row, level = stack.pop()
        order.append(row)
        depth.append(level)
        stack.extend((child, level + 1) for child in reversed(children.get(row, [])))
    reached = set(order)
    unreached = [row for row in by_start.tolist() if row not in reached]  # parent links in a cycle: shown flat
    return np.array(order + unreached, dtype=np.int64), np.array(depth + [0] * len(unreached), dtype=np.int64)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _service_colours(services: list[str]) -> dict[str, str]:
    colours = [c for c in PALETTE if c != _YELLOW]
    return {service: colours[i % len(colours)] for i, service in enumerate(services)}


def _waterfall_axes(heights: list[int]) -> tuple[Figure, list[tuple[Axes, Axes]]]:
    """Per trace a label column and a bar column (sharing y), stacked; the bar columns share the time axis."""
    # lazy: matplotlib takes ~3 s to import; only a report that draws a chart loads it
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 1.3 + 0.22 * sum(heights) + 0.5 * len(heights)), layout="constrained")
    grid = fig.add_gridspec(len(heights), 2, width_ratios=(1.0, 2.2), height_ratios=[max(h, 2) for h in heights])
    pairs: list[tuple[Axes, Axes]] = []
    for i in range(len(heights)):
        bar_ax = fig.add_subplot(grid[i, 1], sharex=pairs[0][1] if pairs else None)
        label_ax = fig.add_subplot(grid[i, 0], sharey=bar_ax)
        pairs.append((label_ax, bar_ax))
    return fig, pairs


def _draw_waterfall(
    label_ax: Axes, bar_ax: Axes, rows: _WaterfallRows, colours: dict[str, str], span_ms: float
) -> None:
    y = np.arange(len(rows))
    widths = np.maximum(rows.end_ms - rows.start_ms, span_ms / 500)
    bar_ax.barh(
        y,
        widths,
        left=rows.start_ms,
        height=0.7,
        color=[colours[s] for s in rows.services],
        edgecolor=[_BLACK if e else "none" for e in rows.error],
        linewidth=0.9,
        hatch=["xxx" if e else "" for e in rows.error],
        gid=f"spans-{rows.trace_id[:16]}",
    )
    for row, (end, duration, error) in enumerate(zip(rows.end_ms, rows.end_ms - rows.start_ms, rows.error)):
        bar_ax.text(
            end + span_ms * 0.008,
            row,
            f"{duration:.1f} ms" + ("  ✕ error" if error else ""),
            va="center",
            fontsize=7,
            color=_VERMILLION if error else "#333333",
        )
    bar_ax.set_ylim(len(rows) - 0.4, -0.6)
    bar_ax.set_xlim(0, span_ms * 1.18)
    bar_ax.set_yticks([])
    bar_ax.grid(axis="y", visible=False)
    for row, (label, level) in enumerate(zip(rows.labels, rows.depth.tolist())):
        label_ax.text(
            0.02 + 0.05 * level,
            row,
            label,
            va="center",
            ha="left",
            fontsize=7.5,
            transform=label_ax.get_yaxis_transform(),
        )
    label_ax.set_axis_off()
    if rows.count > len(rows):
        bar_ax.text(0, len(rows) - 0.2, f"{rows.count - len(rows)} more spans not shown", fontsize=7, va="top")


def _waterfall_legend(fig: Figure, colours: dict[str, str], errors: bool) -> None:
    # lazy: matplotlib takes ~3 s to import; only a report that draws a chart loads it
    from matplotlib.patches import Patch

    handles = [Patch(color=colour, label=service) for service, colour in colours.items()]
    if errors:
        handles.append(Patch(facecolor="white", edgecolor=_BLACK, hatch="xxx", label="error span"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5))


class _TraceShapes:
    """Each trace's shape — the sorted (service, name) codes of its spans — for finding look-alike traces."""

    def __init__(self, table: SpanTable) -> None:
        self.table = table
        width = max(len(table.names), 1)
        keys = table.service.astype(np.int64) * width + table.name.astype(np.int64)
        codes = table.trace_code
        order = np.lexsort((keys, codes))
        sorted_codes = codes[order]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_codes)) + 1)) if len(order) else np.array([], int)
        traces = sorted_codes[starts].tolist()
        self._keys = dict(zip(traces, np.split(keys[order], starts[1:])))
        if len(order):
            lasting = np.maximum.reduceat(table.end_ns[order], starts) - np.minimum.reduceat(
                table.start_ns[order], starts
            )
        else:
            lasting = np.array([], dtype=np.int64)
        self._duration = dict(zip(traces, lasting.tolist()))
        roots = np.flatnonzero(~table.has_parent)
        roots = roots[np.argsort(-table.start_ns[roots], kind="stable")]  # the earliest root of a trace wins
        self._root = dict(zip(codes[roots].tolist(), keys[roots].tolist()))

    def code_of(self, trace_id: str) -> int | None:
        found = np.flatnonzero(self.table.trace_id == trace_id)
        return int(self.table.trace_code[found[0]]) if len(found) else None

    def same_multiset(self, target: int, candidates: list[int]) -> list[int]:
        shape = self._keys[target].tobytes()
        return [c for c in candidates if self._keys[c].tobytes() == shape]

    def same_set(self, target: int, candidates: list[int]) -> list[int]:
        shape = set(self._keys[target].tolist())
        return [c for c in candidates if set(self._keys[c].tolist()) == shape]

    def same_root_closest(self, target: int, candidates: list[int]) -> list[int]:
        root = self._root.get(target)
        shape = set(self._keys[target].tolist())
        scored = [
            (len(shape & set(self._keys[c].tolist())), c)
            for c in candidates
            if root is not None and self._root.get(c) == root
        ]
        best = max((score for score, _ in scored), default=0)
        return [c for score, c in scored if score == best and best > 0]

    def median_trace(self, codes: list[int]) -> str:
        ids = self.table.trace_ids
        ranked = sorted(codes, key=lambda c: (self._duration[c], ids[c]))
        return ids[ranked[(len(ranked) - 1) // 2]]


# --- capacity ----------------------------------------------------------------------------------------------------


def goodput_curve(
    curves: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    knees: Sequence[tuple[str, float]],
    naive: float | None,
) -> str | None:
    """Goodput (requests/s that met every SLO of their pool) against the offered arrival rate: one line with markers
    per ``(label, offered, goodput)`` series, the ideal ``goodput = offered`` dashed, each measured knee as a solid
    vertical line and the naive single-request estimate as a dotted one. None without a point."""
    series = [(label, np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for label, x, y in curves if len(x)]
    if not series:
        return None
    top = max(float(s[1].max()) for s in series)
    right = max(top, *(k for _, k in knees), naive or 0.0) * 1.08
    markers = ("o", "s", "^", "D", "v", "P")
    styles = ("-", "--", "-.", ":")
    with _style():
        # lazy: matplotlib takes ~3 s to import; only a report that draws a chart loads it
        from matplotlib.figure import Figure

        fig = Figure(figsize=(8.0, 3.8), layout="constrained")
        ax = fig.subplots()
        ax.plot(
            [0, right], [0, right], color="#999999", linestyle=(0, (4, 3)), linewidth=0.8, label="goodput = offered"
        )
        for i, (label, x, y) in enumerate(series):
            order = np.argsort(x, kind="stable")
            ax.plot(
                x[order],
                y[order],
                marker=markers[i % len(markers)],
                markersize=4,
                linestyle=styles[i % len(styles)],
                color=PALETTE[i % len(PALETTE)],
                label=label,
                gid=f"goodput-{i}",
            )
        for i, (label, knee) in enumerate(knees):
            ax.axvline(knee, color=(_BLACK, _VERMILLION)[i % 2], linewidth=1.2, label=f"{label} {knee:.3g}/s")
        if naive is not None:
            ax.axvline(naive, color=_PURPLE, linestyle=":", linewidth=1.4, label=f"naive estimate {naive:.3g}/s")
        ax.set_xlim(0, right)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("offered arrival rate (requests/s)")
        ax.set_ylabel("goodput (requests/s within SLO)")
        _legend_right(ax)
        fig.suptitle("Goodput against offered rate")
        return _svg(
            fig,
            "goodput-curve",
            "Goodput against offered arrival rate",
            "Requests per second that met every SLO of their pool, against the offered arrival rate, per "
            f"series ({', '.join(label for label, _, _ in series)}); vertical lines mark the measured knee"
            + ("s" if len(knees) > 1 else "")
            + (" and the naive single-request estimate" if naive is not None else "")
            + "; the dashed diagonal is goodput equal to the offered rate.",
        )
