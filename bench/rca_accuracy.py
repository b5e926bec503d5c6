"""Benchmark: does the trace analysis name the faulty service? AC@1, AC@3, Avg@5 on the generated corpus.

For each of ``--cases`` cases of :mod:`trace_corpus` (seeds ``--seed`` onwards, fault kinds in turn)
it runs, on the same spans with the baseline ending at the fault's injection (what
``drill traces analyze --baseline-until <injection>`` does):

- **suspects**: :func:`drill.traces.analysis.find_abnormal`'s ranked suspects (``report.suspects``);
- **first+pairs**: the ranking the analysis gave before ranked suspects existed: the first abnormal
  span's service, then the services of the abnormal pairs in their order;
- **naive**: the reference rule: for every (service, span name) with at least 5 baseline spans, the
  robust z-score of the fault window's median duration against the baseline's median and MAD
  (z = (median_f − median_b) / (1.4826·MAD_b)); one vote per pair with z > 3; services ranked by
  votes (ties: the larger summed z first).

and prints, per fault kind and over the latency-visible kinds, AC@k (the share of cases whose faulty
service is among the first k services; Wu et al., "MicroRCA", NOMS 2020, and later RCA benchmarks
such as RCAEval use the same AC@k and Avg@5 = mean of AC@1..AC@5) side by side, and how often a
case ended with nothing reported although most of its fault window could not be judged ("not judged
as no deviation": must be 0). ``--timing`` also times the analysis with and without the ranking.

``--hard`` scores the corpus's hard cases instead (20-60 s baselines, intermittent faults, delays as a
fraction, contention felt by the callers and in the contended service's CLIENT spans, the previous fault's
tail and a load change in the baseline, dropped spans, clock skew, external calls, span names with an id per
request: :class:`trace_corpus.Hardships`). ``--exact-names`` scores the analysis judging every span name apart
(``AnalysisOptions.name_templates`` off), to show what templates of names with ids add.

``--no-kinds`` removes every span's kind (UNSPECIFIED) before scoring: traces as many benchmarks' and trace stores'
CSV exports give them, where the analysis infers SERVER and CLIENT from the traces' shape
(:mod:`drill.traces.kinds`); ``--recorded-kinds`` turns that inference off, to show what it adds. ``--via-csv``
writes each case as a benchmark's ``traces.csv`` (trace, span and parent ids, service, span name, start and
duration in µs, an HTTP status code: 500 for an ERROR span, else 200; no kind, no attributes) and reads it back
through the ``csv_file`` source (:mod:`drill.traces.csvfile`) before scoring: the whole path such a file takes.

    .venv/bin/python bench/rca_accuracy.py [--cases 200] [--seed 0] [--hard] [--exact-names] [--no-kinds]
        [--recorded-kinds] [--via-csv] [--timing] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trace_corpus  # noqa: E402

from drill.rundir.jsonl import ReadReport  # noqa: E402
from drill.traces.analysis import AbnormalReport, AnalysisOptions, find_abnormal  # noqa: E402
from drill.traces.csvfile import read_csv_file  # noqa: E402
from drill.traces.table import STATUS_NAMES, SpanTable  # noqa: E402

_ERROR = STATUS_NAMES.index("ERROR")

K = 5


def naive_ranking(table: SpanTable, injection_ns: int) -> list[str]:
    """The reference rule (see the module doc)."""
    rows = np.arange(len(table))
    parent = table.parent_row
    top = rows.copy()
    for _ in range(64):  # the top span of each row's trace, by pointer jumping
        up = parent[top]
        moved = up >= 0
        if not moved.any():
            break
        top = np.where(moved, up, top)
    base = table.start_ns[top] < injection_ns
    duration = table.duration_ns.astype(np.float64)
    votes: dict[str, int] = defaultdict(int)
    strength: dict[str, float] = defaultdict(float)
    key = table.service.astype(np.int64) * max(len(table.names), 1) + table.name
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    for members in np.split(order, bounds):
        b, f = duration[members[base[members]]], duration[members[~base[members]]]
        if len(b) < 5 or not len(f):
            continue
        median = np.median(b)
        mad = 1.4826 * np.median(np.abs(b - median))
        z = (np.median(f) - median) / mad if mad > 0 else (np.inf if np.median(f) > median else 0.0)
        service = table.services[table.service[members[0]]]
        if z > 3:
            votes[service] += 1
            strength[service] += min(float(z), 1e6)
    return sorted(votes, key=lambda s: (-votes[s], -strength[s], s))


def legacy_ranking(report: AbnormalReport) -> list[str]:
    services = [report.first.service] if report.first is not None else []
    services += [pair.service for pair in report.pairs]
    return list(dict.fromkeys(services))


def suspects_ranking(report: AbnormalReport) -> list[str]:
    return [s.service for s in report.suspects]


def _rank(ranking: list[str], truth: str) -> int | None:
    return ranking.index(truth) + 1 if truth in ranking else None


def _scores(ranks: list[int | None]) -> dict[str, float]:
    n = max(len(ranks), 1)
    ac = [sum(1 for r in ranks if r is not None and r <= k) / n for k in range(1, K + 1)]
    return {"AC@1": ac[0], "AC@3": ac[2], "Avg@5": sum(ac) / K, "n": len(ranks)}


def _silent_not_judged(report: AbnormalReport) -> bool:
    """The analysis said "no deviation" (no first span, no suspect, no INCONCLUSIVE reason) while most of
    the fault window was not judged: it would have stated a finding on evidence it never weighed."""
    ranking = report.ranking
    if report.first is not None or report.suspects or report.inconclusive_reason is not None:
        return False
    if ranking is None:
        return len(report.thin_pairs) + len(report.new_pairs) > report.judged_pairs
    return ranking.unjudged_spans * 2 > ranking.fault_spans or ranking.judged * 2 < ranking.pairs


def through_csv(table: SpanTable) -> SpanTable:
    """``table`` written as a benchmark's ``traces.csv`` and read back by the ``csv_file`` source (module doc)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "traces.csv"
        with path.open("w", newline="") as fh:
            out = csv.writer(fh, lineterminator="\n")
            out.writerow(["traceID", "spanID", "parentSpanID", "serviceName", "operationName", "startTime", "duration"]
                         + ["statusCode"])  # fmt: skip
            start_us, end_us = table.start_ns // 1000, table.end_ns // 1000
            for row in range(len(table)):
                out.writerow(
                    [table.trace_id[row], table.span_id[row], table.parent_id[row], table.services[table.service[row]]]
                    + [table.names[table.name[row]], int(start_us[row]), int(end_us[row] - start_us[row])]
                    + [500 if table.status[row] == _ERROR else 200]
                )
        report = ReadReport(path)
        read = read_csv_file(path, report)
        assert report.bad_count == 0 and len(read) == len(table), report.describe()
        return read


def run(
    cases: int,
    seed: int,
    hard: bool = False,
    exact_names: bool = False,
    no_kinds: bool = False,
    recorded_kinds: bool = False,
    via_csv: bool = False,
) -> dict:
    ranks: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    silent = inconclusive = 0
    options = AnalysisOptions(name_templates=not exact_names, infer_kinds=not recorded_kinds)
    for i in range(cases):
        kind = trace_corpus.KINDS[i % len(trace_corpus.KINDS)]
        case = trace_corpus.make_case(seed + i, kind, hard=hard)
        if no_kinds:
            case = replace(case, table=case.table.with_kinds(np.zeros_like(case.table.kind)))
        if via_csv:
            case = replace(case, table=through_csv(case.table))
        report = find_abnormal(case.table, baseline_until_ns=case.injection_ns, options=options)
        silent += _silent_not_judged(report)
        inconclusive += report.inconclusive_reason is not None
        for method, ranking in (
            ("suspects", suspects_ranking(report)),
            ("first+pairs", legacy_ranking(report)),
            ("naive", naive_ranking(case.table, case.injection_ns)),
        ):
            ranks[method][kind].append(_rank(ranking, case.truth))
    out: dict = {
        "cases": cases,
        "seed": seed,
        "hard": hard,
        "exact_names": exact_names,
        "no_kinds": no_kinds,
        "via_csv": via_csv,
        "recorded_kinds": recorded_kinds,
        "not_judged_as_no_deviation": silent,
        "inconclusive": inconclusive,
        "methods": {},
    }
    for method, by_kind in ranks.items():
        table = {kind: _scores(r) for kind, r in by_kind.items()}
        table["latency-visible"] = _scores([r for k in trace_corpus.LATENCY_KINDS for r in by_kind[k]])
        table["all"] = _scores([r for r in by_kind.values() for r in r])
        out["methods"][method] = table
    return out


def timing(cases: int, seed: int, reps: int = 3) -> dict:
    """Analysis time with the ranking and without it (``rank_suspects=False``), medians over cases."""
    with_rank, without = [], []
    for i in range(cases):
        case = trace_corpus.make_case(seed + i)
        for flag, bucket in ((True, with_rank), (False, without)):
            best = []
            for _ in range(reps):
                t = time.process_time()
                find_abnormal(case.table, baseline_until_ns=case.injection_ns, rank=flag)
                best.append(time.process_time() - t)
            bucket.append(min(best))
    total_with, total_without = sum(with_rank), sum(without)
    return {
        "cases": cases,
        "cpu_s_with_ranking": round(total_with, 3),
        "cpu_s_without_ranking": round(total_without, 3),
        "ranking_share": round(total_with / total_without - 1, 4),
        "median_ratio": round(statistics.median(a / b for a, b in zip(with_rank, without)), 4),
    }


def _print(result: dict) -> None:
    methods = list(result["methods"])
    rows = list(result["methods"][methods[0]])
    names = ", every span name judged apart" if result["exact_names"] else ""
    print(f"{result['cases']} {'hard ' if result['hard'] else ''}cases from seed {result['seed']}{names}")
    print(f"{'kind':<18}{'n':>5}  " + "  ".join(f"{m + ' AC@1/AC@3/Avg@5':>36}" for m in methods))
    for row in rows:
        cells = []
        for m in methods:
            s = result["methods"][m][row]
            cells.append(f"{s['AC@1']:>10.2f}/{s['AC@3']:.2f}/{s['Avg@5']:.2f}".rjust(36))
        n = result["methods"][methods[0]][row]["n"]
        print(f"{row:<18}{n:>5}  " + "  ".join(cells))
    print(
        f"not judged reported as no deviation: {result['not_judged_as_no_deviation']}; "
        f"INCONCLUSIVE (most of the fault window not judged, nothing found): {result['inconclusive']}"
    )
    if "timing" in result:
        t = result["timing"]
        print(
            f"analysis CPU time over {t['cases']} cases: {t['cpu_s_with_ranking']} s with ranking, "
            f"{t['cpu_s_without_ranking']} s without (+{t['ranking_share']:.0%}; median per case x{t['median_ratio']})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing", action="store_true", help="also time the analysis with and without the ranking")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--hard", action="store_true", help="the corpus's hard cases (trace_corpus.Hardships)")
    parser.add_argument(
        "--exact-names", action="store_true", help="judge every span name apart (no templates of names with ids)"
    )
    parser.add_argument("--no-kinds", action="store_true", help="remove every span's kind before scoring")
    parser.add_argument("--recorded-kinds", action="store_true", help="no kind inference for services with none")
    parser.add_argument("--via-csv", action="store_true", help="each case written as a traces.csv and read back")
    args = parser.parse_args()
    result = run(args.cases, args.seed, args.hard, args.exact_names, args.no_kinds, args.recorded_kinds, args.via_csv)
    if args.timing:
        result["timing"] = timing(min(args.cases, 40), args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


if __name__ == "__main__":
    main()
