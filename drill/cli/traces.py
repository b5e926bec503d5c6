"""``drill traces``: read span files of any supported format and analyse them on their own.

``drill traces analyze SPANS...`` finds the first abnormal span (see :mod:`drill.traces.analysis`) in
files the user brings — a run's ``spans.jsonl``, an OpenTelemetry Collector file export, OTLP
protobuf, a Jaeger UI download, a benchmark's CSV span table — detecting each file's format from its content (each
trace source's ``sniff``, :mod:`drill.traces.detect`); a gzip, bzip2 or xz-compressed file is read as the file it
holds (:mod:`drill.traces.compressed`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from drill.cli.common import console, handle_errors, say
from drill.cli.traces_suspects import print_coverage, print_suspects, verdict_line
from drill.errors import InputError
from drill.units import NS_PER, epoch_unit

if TYPE_CHECKING:
    from rich.console import JustifyMethod
    from rich.table import Table

    from drill.traces.analysis import AbnormalReport, AbnormalSpan, AnalysisOptions
    from drill.traces.run_traces import RunTraces
    from drill.traces.table import SpanTable

__all__ = ["parse_time_ns", "traces"]

T = TypeVar("T")


def parse_time_ns(text: str, option: str) -> int:
    """UNIX ns of ``text``: an epoch time whose size tells its unit (``1700000000.5`` s, ``1700000000500`` ms, µs
    from 10^14, ns from 10^17: the rule the CSV reader applies to its time columns, so the injection time a
    benchmark records in ms means what it says) or RFC 3339 with an offset (``...T10:00:00Z``)."""
    value = text.strip()
    try:
        number = Decimal(value)
    except InvalidOperation:
        number = None
    if number is not None and number.is_finite():
        return int(number * NS_PER[epoch_unit(number)])
    try:
        stamp = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither an epoch time nor an RFC 3339 time", param_hint=option) from None
    if stamp.tzinfo is None:
        raise click.BadParameter(
            f"{text!r} has no UTC offset (RFC 3339 needs one, e.g. Z or +02:00)", param_hint=option
        )
    return int(round(stamp.timestamp() * 1e6)) * 1000


@dataclass(frozen=True)
class _Loaded:
    path: Path
    kind: str
    spans: int
    unreadable: int
    where: tuple[str, ...]
    compression: str | None = None  # the file was read decompressed (drill.traces.compressed)
    notes: tuple[str, ...] = ()  # the source's notes: how it read the file (CSV columns, derived phase spans)

    def to_json(self) -> dict:
        return {
            "path": str(self.path),
            "format": self.kind,
            "compression": self.compression,
            "spans": self.spans,
            "unreadable": self.unreadable,
            "where": list(self.where),
            "notes": list(self.notes),
        }


def _read(path: Path) -> tuple[SpanTable, _Loaded]:
    from drill.traces.compressed import decompressed
    from drill.traces.detect import open_span_file
    from drill.traces.sources import TableSource
    from drill.traces.table import SpanTable

    where: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    with decompressed(path) as file:
        try:
            kind, source = open_span_file(file.path)
        except InputError as exc:  # named as the user gave it, not as its temporary copy
            raise InputError(file.shown(str(exc))) from exc
        if not isinstance(source, TableSource):  # a plugin that yields span dicts (drill.api.TraceSource) only
            table, unreadable = SpanTable.from_spans(source.spans()), 0
        else:
            table = source.table()
            unreadable, where = source.report.unreadable, tuple(file.shown(w) for w in source.report.where)
            notes = tuple(source.report.notes)
    if file.damage is not None:  # the spans before the damage were read; the rest of the stream is one bad record
        unreadable, where = unreadable + 1, (file.damage, *where)
    return table, _Loaded(path, kind, len(table), unreadable, where, file.compression, notes)


def _read_all(paths: tuple[Path, ...]) -> tuple[SpanTable, list[_Loaded]]:
    from drill.traces.table import SpanTable

    tables, loaded = [], []
    for path in paths:
        table, info = _read(path)
        tables.append(table)
        loaded.append(info)
    return SpanTable.concat(tables), loaded


def _records(path: Path | None) -> tuple[list, dict | None]:
    """Client records of ``path`` and their read report (JSON); unreadable lines are said on stderr."""
    if path is None:
        return [], None
    from drill.rundir.jsonl import ReadReport
    from drill.rundir.records import read_records

    report = ReadReport(path)
    records = list(read_records(path, report))
    if report.bad_count or report.torn_last_line is not None:
        say(("warning:", "yellow"), f" {report.describe()}", err=True)
    return records, report.to_json()


@click.group("traces")
def traces() -> None:
    """Read span files (receiver, OTLP JSON/protobuf, Jaeger JSON) and analyse them."""


@traces.command("analyze")
@click.argument("spans", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--records",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Client request records (requests.jsonl), joined to the spans by trace id.",
)
@click.option(
    "--baseline-until",
    metavar="TIME",
    help="Traces starting before TIME are the baseline (RFC 3339, or epoch s, ms, µs or ns: its size tells).",
)
@click.option(
    "--baseline",
    "baseline_files",
    multiple=True,
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Span files of a normal period, the baseline (repeatable).",
)
@click.option(
    "--fault-start",
    metavar="TIME",
    help="The fault's injection: the fault window starts here; onsets are relative to it.",
)
@click.option(
    "--fault-end",
    metavar="TIME",
    help="The fault's revert: traces starting after TIME are left out of the fault window (recovery is not the fault).",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many abnormal (service, span name) pairs to list.",
)
@click.option(
    "--min-judged-spans",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Baseline spans a (service, span name) pair needs to be judged at all; fewer: not judged.",
)
@click.option(
    "--min-baseline-spans",
    type=click.IntRange(min=2),
    default=10,
    show_default=True,
    help="Baseline spans below which a judgement is thin (rank test) and span thresholds are not set.",
)
@click.option(
    "--alpha",
    type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
    default=0.01,
    show_default=True,
    help="Significance of each comparison (the rank test, flag rates).",
)
@click.option(
    "--min-ratio",
    type=click.FloatRange(min=1),
    default=1.15,
    show_default=True,
    help="Materiality of a suspect's pair: its self-time median grew at least this much.",
)
@click.option(
    "--min-impact",
    type=click.FloatRange(min=0),
    default=0.5,
    show_default=True,
    help="Materiality of the first abnormal span: its excess over the user-facing span's usual duration.",
)
@click.option(
    "--exact-names",
    is_flag=True,
    help="Judge every span name apart, even thin names that differ only in ids (GET /orders/8812, /orders/9107).",
)
@click.option(
    "--recorded-kinds",
    is_flag=True,
    help="Use span kinds as recorded: no SERVER/CLIENT inferred for services whose spans record no kind.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def analyze(
    spans: tuple[Path, ...],
    records: Path | None,
    baseline_until: str | None,
    baseline_files: tuple[Path, ...],
    fault_start: str | None,
    fault_end: str | None,
    top: int,
    min_judged_spans: int,
    min_baseline_spans: int,
    alpha: float,
    min_ratio: float,
    min_impact: float,
    exact_names: bool,
    recorded_kinds: bool,
    as_json: bool,
) -> None:
    """Find the first abnormal span in SPANS and rank the abnormal (service, span name) pairs.

    The baseline is --baseline FILE..., else the traces starting before --baseline-until, else the first
    third of the time range. Formats are detected from the files' content. Suspects are services ranked
    by their pooled evidence (self time, slow links, root-cause errors; see docs/trace-analysis.md).
    """
    from drill.traces.analysis import AnalysisOptions

    if baseline_until is not None and baseline_files:
        raise click.UsageError("give --baseline-until or --baseline, not both")
    until_ns = None if baseline_until is None else parse_time_ns(baseline_until, "--baseline-until")
    start_ns = None if fault_start is None else parse_time_ns(fault_start, "--fault-start")
    end_ns = None if fault_end is None else parse_time_ns(fault_end, "--fault-end")
    window_start = start_ns if start_ns is not None else until_ns
    if end_ns is not None and window_start is not None and end_ns <= window_start:
        option = "--fault-start" if start_ns is not None else "--baseline-until"
        raise click.BadParameter(
            f"{fault_end!r} is not after {option} {fault_start or baseline_until!r}", param_hint="--fault-end"
        )
    options = AnalysisOptions(
        min_judged_spans=min_judged_spans,
        min_baseline_spans=min_baseline_spans,
        alpha=alpha,
        min_ratio=min_ratio,
        min_impact=min_impact,
        name_templates=not exact_names,
        infer_kinds=not recorded_kinds,
    )
    with handle_errors():
        _analyze(spans, records, until_ns, baseline_files, (start_ns, end_ns), top, as_json, options)


def _analyze(
    spans: tuple[Path, ...],
    records_path: Path | None,
    until_ns: int | None,
    baseline_files: tuple[Path, ...],
    fault: tuple[int | None, int | None],
    top: int,
    as_json: bool,
    options: AnalysisOptions,
) -> None:
    import numpy as np

    from drill.traces.analysis import find_abnormal
    from drill.traces.run_traces import traces_of
    from drill.traces.table import SpanTable

    table, loaded = _read_all(spans)
    mask = None
    if baseline_files:
        base, base_loaded = _read_all(baseline_files)
        loaded = base_loaded + loaded
        mask = np.concatenate([np.ones(len(base), dtype=bool), np.zeros(len(table), dtype=bool)])
        table = SpanTable.concat([base, table])
    records, records_read = _records(records_path)
    evidence = traces_of(
        table,
        records,
        source=", ".join(f"{x.kind}: {x.path}" for x in loaded),
        unreadable=sum(x.unreadable for x in loaded),
        where=tuple(w for x in loaded for w in x.where),
    )
    if not len(table):
        first = next((f"; first: {w}" for x in loaded for w in x.where), "")
        files = ", ".join(str(p) for p in spans)
        raise InputError(f"no span could be read from {files} ({evidence.no_spans_reason}{first})")
    if mask is not None and not mask.any():
        raise InputError("the --baseline files hold no span")
    report = find_abnormal(
        table,
        baseline=mask,
        baseline_until_ns=until_ns,
        fault_start_ns=fault[0],
        fault_end_ns=fault[1],
        top=top,
        options=options,
    )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "schema": "llm-drill/traces-analysis/v1",
                    "files": [x.to_json() for x in loaded],
                    "records": records_read,
                    "completeness": evidence.completeness.to_json(),
                    "analysis": report.to_json(),
                },
                indent=2,
                default=str,
            )
        )
        return
    _print(report, loaded, evidence)


# -- human output ---------------------------------------------------------------------------------


def _print(report: AbnormalReport, loaded: list[_Loaded], evidence: RunTraces) -> None:
    for info in loaded:
        bad: tuple = ()
        if info.unreadable:
            bad = (", ", (f"{info.unreadable} unreadable", "yellow"), f" (first: {info.where[0]})")
        kind = f"{info.kind} ({info.compression}-compressed)" if info.compression else info.kind
        say(f"{info.path}: {kind}, {info.spans:,} spans", *bad)
        for note in info.notes:
            say((f"  {note}", "dim"))
    console.print(
        f"baseline: {report.baseline_rule}: {report.baseline_spans:,} spans; fault window: {report.fault_spans:,} spans"
    )
    c = evidence.completeness
    if c.requests:
        console.print(
            f"client records: {c.requests:,} requests, {c.requests_with_spans:,} with spans of their trace "
            f"id (p50 {c.spans_per_request_p50 or 0:g} spans per request)"
        )
    for note in evidence.completeness.notes():
        say((f"note: {note}", "dim"))
    for count, what in ((report.baseline_spans, "baseline"), (report.fault_spans, "fault window")):
        if count == 0:
            say(
                ("warning:", "yellow"),
                f" the {what} holds no span: nothing can be compared "
                "(check --baseline-until / --fault-start against the spans' times)",
                err=True,
            )
    console.print()
    headline = verdict_line(report)
    if headline is not None:
        console.print(headline)
    if report.first is not None:
        _print_first(report.first, report.reference)
    print_suspects(report)
    if report.pairs:
        console.print()
        console.print(_pairs_table(report))
    skews = [(pair, skew) for pair in report.pairs for skew in pair.attributes]
    if skews:
        console.print("what the flagged spans have in common:")
        for pair, skew in skews:
            console.print(f"  {pair.service} / {pair.name}: {skew.text}")
    if report.merged_names_text is not None:
        say((f"{report.merged_names_text} (--exact-names: judge each name apart)", "dim"))
    if report.inferred_kinds is not None:
        say((f"{report.inferred_kinds} (--recorded-kinds: use the kinds as recorded)", "dim"))
    if report.thin_pairs or report.new_pairs:
        say(
            (
                f"{len(report.thin_pairs)} pair(s) with too few baseline spans for span thresholds, "
                f"{len(report.new_pairs)} absent from the baseline",
                "dim",
            )
        )
    print_coverage(report.ranking)


def _print_first(first: AbnormalSpan, reference: str) -> None:
    say(
        ("first abnormal span:", "bold"),
        f" {first.service} / ",
        (first.name, "bold"),
        f" ({first.kind}, {first.status}, {first.duration_ms:,.3f} ms)",
    )
    console.print(f"  trace {first.trace_id}  span {first.span_id}")
    say(f"  deviation: {first.deviation}")
    if first.onset_s is not None:
        console.print(f"  onset: {first.onset_s:+.3f} s after the {reference}")
    if first.impact is not None:
        minor = "" if first.material else " (no cause adds as much as min_impact: the earliest one is shown)"
        console.print(f"  impact: adds {first.impact:.0%} of the user-facing span's usual duration{minor}")
    attributes = {**first.context_attributes, **first.attributes}
    if attributes:
        say("  attributes: " + ", ".join(f"{k}={_short(v)}" for k, v in attributes.items()))
    lost = " (its parent was lost)" if first.root_missing else ""
    console.print(f"  chain, from the user-facing span{lost} down to it:")
    for depth, link in chain_rows(list(reversed(first.chain))):
        indent = "    " + "  " * min(depth, MAX_CHAIN_INDENT) + ("└ " if depth else "")
        if link is None:
            left_out = len(first.chain) - 2 * CHAIN_ENDS
            say(indent, (f"… {left_out:,} links not shown (the chain is {len(first.chain):,} spans deep) …", "dim"))
            continue
        state = f"  {link.deviation}" if link.deviation else "  normal"
        say(indent, f"{link.service} / {link.name} ", (f"{link.kind} {link.duration_ms:,.3f} ms", "dim"), state)


#: How many links of a long chain are shown from each end, and the deepest indentation of the chain's text (the
#: links after the elided middle are not indented further): a chain 100,000 spans deep prints a few dozen lines,
#: not gigabytes.
CHAIN_ENDS = 12
MAX_CHAIN_INDENT = 2 * CHAIN_ENDS + 1  # a chain shown whole is indented whole


def chain_rows(links: list[T]) -> list[tuple[int, T | None]]:
    """``(depth, link)`` for each link shown; the middle of a chain longer than ``2 * CHAIN_ENDS + 1`` links is one
    ``(depth, None)`` row (its ``len(links) - 2 * CHAIN_ENDS`` links are left out)."""
    if len(links) <= 2 * CHAIN_ENDS + 1:
        return list(enumerate(links))
    head: list[tuple[int, T | None]] = list(enumerate(links[:CHAIN_ENDS]))
    tail = [(len(links) - CHAIN_ENDS + i, link) for i, link in enumerate(links[-CHAIN_ENDS:])]
    return [*head, (CHAIN_ENDS, None), *tail]


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pairs_table(report: AbnormalReport) -> Table:
    from rich.table import Table

    table = Table(title="abnormal (service, span name) pairs", title_justify="left", show_edge=False)
    columns: list[tuple[str, JustifyMethod]] = [
        ("#", "right"),
        ("service", "left"),
        ("span name", "left"),
        ("flagged", "right"),
        ("share", "right"),
        ("causes (material)", "right"),
        ("median ratio", "right"),
        ("deviation", "left"),
    ]
    for column, justify in columns:
        table.add_column(column, justify=justify)
    for i, pair in enumerate(report.pairs, 1):
        ratio = "" if pair.median_ratio is None else f"{pair.median_ratio:.1f}x"
        table.add_row(
            str(i),
            pair.service,
            pair.name,
            f"{pair.flagged}/{pair.spans}",
            f"{pair.share:.0%}",
            f"{pair.root_causes} ({pair.material})",
            ratio,
            pair.deviation,
        )
    return table
