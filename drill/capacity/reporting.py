"""``capacity.md`` and ``capacity.html``: a capacity run's report, rendered from its ``capacity.json`` alone.

A report is a view of the run directory: :func:`write_capacity_reports` can render it again any time
(``drill report RUN_DIR`` does for a capacity run). The templates are ``drill/report/templates/capacity.*.j2``;
the goodput curve is :func:`drill.report.charts.goodput_curve` (deterministic SVG, inline in the HTML). The same
``capacity.json`` renders byte-identical Markdown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drill.errors import InputError
from drill.report.charts import goodput_curve
from drill.report.render import template_environment
from drill.rundir.files import read_json, write_in_run_dir

__all__ = ["CAPACITY_FILES", "capacity_view", "render_capacity", "write_capacity_reports"]

CAPACITY_FILES = ("capacity.md", "capacity.html")


def num(value: Any, digits: int = 3) -> str:
    """A figure for the report: ``-`` when absent, else ``digits`` significant digits."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"
    return str(value)


def ms(value: Any) -> str:
    return "-" if value is None else f"{value:.0f}"


def pct(value: Any) -> str:
    return "-" if value is None else f"{value * 100:+.0f}%"


@dataclass(frozen=True)
class _Row:
    """One pool at one point, as the tables show it."""

    sweep: str
    index: int
    rate: str
    repetition: int
    arrivals: str
    pool: str
    holds: str
    goodput: str
    good_share: str
    ttft: str
    queue: str
    prefill: str
    tpot: str
    binding: str
    directory: str


def capacity_view(doc: dict[str, Any]) -> dict[str, Any]:
    """What the templates print, every figure already formatted (so Markdown and HTML say the same)."""
    sweeps = doc.get("sweeps") or []
    full = next((s for s in sweeps if s["name"] == "full"), None)
    return {
        "doc": doc,
        "title": f"Capacity: {doc['inputs']['scenario'].get('name', '?')} on {doc['inputs']['target']['label']}",
        "headline": _headline(doc, full),
        "sweeps": [_sweep_view(s) for s in sweeps],
        "rows": [row for s in sweeps for row in _rows(s)],
        "chart": _chart(doc),
        "inputs": _inputs(doc),
        "notes": _notes(doc),
    }


def _headline(doc: dict[str, Any], full: dict[str, Any] | None) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    if full is None:
        return [("knee", "no sweep was measured")]
    knee = full["knee"]
    lines.append(("knee", _estimate_text(knee)))
    lines.append(("measured bracket", _knee_text(full)))
    binding = full.get("binding")
    if binding:
        lines.append(
            (
                "binding constraint",
                f"pool {binding['pool']}: {binding['key']} broke first at {num(knee['upper'])}/s "
                f"(observed {_observed(binding)} against {num(binding['bound_ms'])} ms)",
            )
        )
    lines.extend(_naive_lines(doc))
    lines.extend(_headroom_lines(doc))
    cost = doc.get("cost")
    if cost:
        per = cost.get("per_successful_request")
        lines.append(
            (
                "cost per successful request",
                (f"{per:.6f} at the knee" if per is not None else "- (no goodput at the knee, or GPUs unknown)")
                + f" ({num(cost['gpus'])} GPU(s) at {num(cost['gpu_hour_price'])}/GPU-hour, goodput "
                f"{num(cost['goodput_at_knee'])}/s)",
            )
        )
    return lines


def _estimate_text(knee: dict[str, Any]) -> str:
    estimate = knee.get("estimate", knee.get("knee"))
    if estimate is None:
        return "not found (see the measured bracket)"
    estimates = knee.get("estimates") or []
    if knee.get("ci_low") is not None:
        ci = f"repetitions' crossings 95% CI {num(knee['ci_low'])} to {num(knee['ci_high'])}/s (n={len(estimates)})"
    else:
        ci = f"{len(estimates)} repetition(s): no interval"
    return f"{num(estimate)}/s (where the worst repetition's binding SLO crosses its bound, inside the bracket; {ci})"


def _knee_text(sweep: dict[str, Any]) -> str:
    knee = sweep["knee"]
    if knee.get("knee") is None:
        return f"not bracketed: {sweep['reason']}"
    upper = f", {num(knee['upper'])}/s failed" if knee.get("upper") is not None else ""
    bracket = "" if knee.get("bracketed") else " (not narrowed to the tolerance)"
    return f"{num(knee['knee'])}/s held at every repetition{upper}{bracket}"


def _observed(slo: dict[str, Any]) -> str:
    return "failed requests at the percentile" if slo.get("observed_ms") is None else f"{ms(slo['observed_ms'])} ms"


def _naive_lines(doc: dict[str, Any]) -> list[tuple[str, str]]:
    naive = doc.get("naive")
    if not naive:
        return []
    comparison = doc.get("comparison")
    text = (
        f"{num(naive['rate'])}/s = {naive['replicas']} replica(s) × {num(naive['peak_tokens_per_s'])} tokens/s "
        f"÷ {num(naive['mean_output_tokens'])} tokens ({naive['requests']} request(s) one at a time)"
    )
    lines = [("naive estimate", text)]
    if comparison:
        lines.append(
            (
                "naive estimate's error",
                f"{pct(comparison['error'])} (naive ÷ knee = {num(comparison['ratio'])})",
            )
        )
    return lines


def _headroom_lines(doc: dict[str, Any]) -> list[tuple[str, str]]:
    headroom = doc.get("headroom") or {}
    lines = []
    if doc["inputs"]["headroom"]["n_minus_1"]:
        n1 = next((s for s in doc.get("sweeps") or [] if s["name"] == "n-1"), None)
        share = headroom.get("n_minus_1_share")
        text = _knee_text(n1) if n1 else "not measured"
        lines.append(("knee with one replica down", text + (f" ({share:.0%} of the full knee)" if share else "")))
    if headroom.get("fraction") is not None:
        lines.append(
            (
                "safe operating rate",
                f"{num(headroom.get('safe_rate'))}/s = the {headroom.get('basis') or '-'} knee less "
                f"{headroom['fraction']:.0%} headroom",
            )
        )
    return lines


def _sweep_view(sweep: dict[str, Any]) -> dict[str, str]:
    return {
        "name": sweep["name"],
        "replicas": str(sweep["replicas"]),
        "knee": _knee_text(sweep),
        "reason": sweep["reason"],
    }


def _rows(sweep: dict[str, Any]) -> list[_Row]:
    rows = []
    for p in sweep["points"]:
        splits = {s["pool"]: s for s in p.get("split") or []}
        for pool in p["pools"]:
            split = splits.get(pool["pool"], {})
            binding = max(pool["slos"], key=lambda s: s["ratio"] if s["ratio"] is not None else 1e300, default=None)
            rows.append(
                _Row(
                    sweep=sweep["name"],
                    index=p["index"],
                    rate=num(p["rate"]),
                    repetition=p["repetition"],
                    arrivals=num(p["arrivals_per_s"]),
                    pool=pool["pool"],
                    holds="yes" if pool["holds"] else "NO",
                    goodput=num(pool["goodput_per_s"]),
                    good_share=f"{pool['good_share']:.0%}",
                    ttft=f"{ms(pool['ttft_p50_ms'])}/{ms(pool['ttft_p95_ms'])}",
                    queue=f"{ms(split.get('queue_p50_ms'))}/{ms(split.get('queue_p95_ms'))}",
                    prefill=f"{ms(split.get('prefill_p50_ms'))}/{ms(split.get('prefill_p95_ms'))}",
                    tpot=f"{ms(pool['tpot_p50_ms'])}/{ms(pool['tpot_p95_ms'])}",
                    binding="-" if binding is None else f"{binding['key']} {_observed(binding)}",
                    directory=p["directory"],
                )
            )
    return rows


def _chart(doc: dict[str, Any]) -> str | None:
    """The goodput curve: per sweep and pool, the mean goodput over the repetitions at each rate; the knee estimates
    (the figure the headline gives) and the naive estimate as vertical lines."""
    curves = []
    for sweep in doc.get("sweeps") or []:
        by_pool: dict[str, dict[float, list[float]]] = {}
        for p in sweep["points"]:
            for pool in p["pools"]:
                by_pool.setdefault(pool["pool"], {}).setdefault(p["rate"], []).append(pool["goodput_per_s"])
        for name, rates in sorted(by_pool.items()):
            xs = sorted(rates)
            curves.append((f"{sweep['name']}: {name}", xs, [sum(rates[x]) / len(rates[x]) for x in xs]))
    knees = []
    for s in doc.get("sweeps") or []:
        value = s["knee"].get("estimate", s["knee"].get("knee"))
        if value:
            knees.append((f"{s['name']} knee", value))
    naive = (doc.get("naive") or {}).get("rate")
    return goodput_curve(curves, knees, naive)


def _inputs(doc: dict[str, Any]) -> list[tuple[str, str]]:
    i = doc["inputs"]
    t, s = i["timing"], i["search"]
    rates = (
        ", ".join(num(r) for r in s["rates"]) if s["rates"] else f"auto from {num(s['start'])}/s (×{num(s['factor'])})"
    )
    return [
        ("scenario", f"{i['scenario_file']} (seed {i['seed']})"),
        ("target", f"{i['target']['label']} ({i['target']['kind']}, {i['target']['replicas']} replica(s))"),
        ("rates", rates),
        ("repetitions", f"{s['repetitions']} (seed + repetition; coarse points once)"),
        ("bisection tolerance", f"{s['tolerance']:.0%}"),
        (
            "point",
            f"arrivals {num(t['arrivals_s'])}s: warmup {num(t['warmup_s'])}s, judged {num(t['measure_s'])}s, "
            f"tail {num(t['tail_s'])}s; drain {num(t['drain_s'])}s",
        ),
        ("SLO attainment", i["attainment"]["described"]),
    ]


def _notes(doc: dict[str, Any]) -> list[str]:
    notes = list(doc.get("notes") or [])
    for sweep in doc.get("sweeps") or []:
        if sweep["knee"].get("non_monotone"):
            notes.append(f"{sweep['name']}: a rate held above a failing one (noise); the knee ignores it")
        for p in sweep["points"]:
            notes.extend(f"{sweep['name']} #{p['index']:02d} ({num(p['rate'])}/s): {n}" for n in p.get("notes") or [])
    return notes


def write_capacity_reports(run_dir: Path) -> list[Path]:
    """Render ``capacity.md`` and ``capacity.html`` from ``run_dir/capacity.json`` (replacing earlier renders)."""
    view = capacity_view(_capacity_document(run_dir))
    out = []
    for name, html in zip(CAPACITY_FILES, (False, True)):
        text = template_environment(html).get_template(f"{name}.j2").render(v=view)
        out.append(write_in_run_dir(run_dir, name, text.encode("utf-8")))
    return out


def _capacity_document(run_dir: Path) -> dict:
    path = Path(run_dir) / "capacity.json"
    doc = read_json(path, root=run_dir, what="capacity.json")
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a JSON object (a capacity run's figures), found {type(doc).__name__}")
    return doc


def render_capacity(run_dir: Path, fmt: str | None) -> str:
    """What ``drill report RUN_DIR`` prints for a capacity run: with ``fmt`` (md, html, json) the report in that
    format, written nowhere; without, it writes both reports and returns their paths, one per line."""
    if fmt is None:
        return "".join(f"report: {path}\n" for path in write_capacity_reports(run_dir))
    doc = _capacity_document(run_dir)
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"
    return template_environment(fmt == "html").get_template(f"capacity.{fmt}.j2").render(v=capacity_view(doc))
