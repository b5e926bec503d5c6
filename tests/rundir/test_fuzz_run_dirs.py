"""Fuzz over run directories (issue 21), next to the one over drill files (``tests/spec/test_fuzz_drill_files.py``).

A fixed seed and a bounded number of cases (``DRILL_FUZZ_RUN_DIRS``, default 36) of damaged run directories,
each judged, reported and its spans analysed (see :mod:`tests.rundir.fuzz_cases`), all in one child process:
never exit 3, never a traceback, never a change outside the run directory nor a file but the report files inside
it, never the content of a file outside it in the output or the report, no command past 20 s, and the whole child
under 500 MB (its own ``ru_maxrss``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.rundir.received import run_python

CASES = int(os.environ.get("DRILL_FUZZ_RUN_DIRS", "36"))
SEED = 21


def test_damaged_run_directories_never_crash_hang_or_reach_outside(tmp_path: Path) -> None:
    ran = run_python("-m", "tests.rundir.fuzz_cases", str(SEED), str(CASES), str(tmp_path), timeout=120 + 5 * CASES)
    assert not ran.timed_out, ran.text[-3000:]
    assert ran.code == 0, ran.text[-3000:]
    lines = [json.loads(line) for line in ran.out.splitlines() if line.startswith("{")]
    assert len(lines) == 3 * CASES, ran.text[-3000:]
    bad = [line for line in lines if line["problems"]]
    assert not bad, "\n".join(json.dumps(line) for line in bad[:10])
    assert ran.max_rss_mb < 500, f"the fuzz child peaked at {ran.max_rss_mb:.0f} MB"
    codes = {line["exit"] for line in lines}
    assert codes <= {0, 1, 2}, codes
    assert 2 in codes and 1 in codes, "the cases no longer reach both refusals and verdicts"
