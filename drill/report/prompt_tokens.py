"""The report's prompt-token figures: was the load the length distribution the scenario declared?

Called by :func:`drill.report.build.assemble`. Per pool, the planned input tokens of the successful attempts
(the schedule's) against the prompt tokens the server billed (``usage.prompt_tokens``), and how the prompts
were made (``fitted-prompts.json``, :mod:`drill.load.tokenizing`): fitted to the target's tokenizer, or one
token per word. A pool more than :data:`~drill.load.summary.PROMPT_TOKENS_TOLERANCE` off is warned about.
"""

from __future__ import annotations

from collections import defaultdict

from drill.load.summary import PROMPT_TOKENS_TOLERANCE
from drill.load.tokenizing import read_fit
from drill.report.model import NOT_AVAILABLE, PromptTokens, PromptTokensRow
from drill.rundir.evidence import RunEvidence
from drill.rundir.records import RequestRecord

__all__ = ["prompt_tokens"]


def prompt_tokens(evidence: RunEvidence) -> PromptTokens:
    """The prompt-token section of one run directory."""
    fit = read_fit(evidence.run_dir)
    rows = _rows(evidence.requests)
    warnings = [] if fit is None or fit.warning is None else [fit.warning]
    if fit is not None and fit.unfit:
        warnings.append(f"{len(fit.unfit)} prompt(s) could not be fitted exactly ({fit.describe().split(' — ')[-1]})")
    warnings += [
        f"pool {row.pool}: the server counted {row.ratio:.3f} times the planned prompt tokens (more than "
        f"{PROMPT_TOKENS_TOLERANCE:.0%} off): the load was not the scenario's length distribution"
        for row in rows
        if row.off
    ]
    rule = NOT_AVAILABLE if fit is None else fit.describe().split(" — ")[0]
    return PromptTokens(rule, rows, tuple(warnings))


def _rows(records: list[RequestRecord]) -> tuple[PromptTokensRow, ...]:
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in records:
        if r.ok and r.burst is None and r.prompt_tokens is not None and r.planned_input_tokens:
            acc = sums[r.pool]
            acc[0] += 1
            acc[1] += r.planned_input_tokens
            acc[2] += r.prompt_tokens
    rows = []
    for pool, (count, planned, achieved) in sorted(sums.items()):
        ratio = achieved / planned
        rows.append(
            PromptTokensRow(pool, count, planned, achieved, round(ratio, 4), abs(ratio - 1) > PROMPT_TOKENS_TOLERANCE)
        )
    return tuple(rows)
