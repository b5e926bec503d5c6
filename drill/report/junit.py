"""``junit.xml``: a run's verdicts as JUnit XML, for CI systems.

One ``<testsuite>`` (the drill) with one ``<testcase>`` per check: ``classname`` is the drill's name, ``name``
the check's. What each status becomes:

- PASS: an empty test case;
- FAIL: ``<failure type="FAIL" message="observed … vs expected …">`` with the check's message and evidence;
- INCONCLUSIVE and ERROR: ``<error type="INCONCLUSIVE"|"ERROR" message=…>``. Not ``<skipped>``: the drill
  exits 1 on either (only PASS passes), and a skipped test case shows green in most CI systems, which would
  contradict the exit code. ``type`` keeps the two apart.

The file is deterministic (no timestamps, no durations): the same verdicts write the same bytes. Text is
escaped by the XML writer; characters XML 1.0 cannot carry (control characters) are replaced, and secrets are
scrubbed (:class:`drill.rundir.redact.Redactor`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from drill.api import Status, Verdict
from drill.rundir.redact import Redactor

__all__ = ["junit_xml", "observed_vs_expected", "write_junit"]

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_OPERATORS = ("<", ">", "=", "!", "≤", "≥")
_ELEMENT = {Status.FAIL: "failure", Status.INCONCLUSIVE: "error", Status.ERROR: "error"}


def _clean(text: str, redactor: Redactor) -> str:
    return _NOT_XML.sub("\N{REPLACEMENT CHARACTER}", redactor.value(text))


def _figures(values: dict, units: dict) -> str:
    parts = []
    for key, value in values.items():
        unit = units.get(key)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        joint = " " if shown[:1] in _OPERATORS else "="  # a condition: "error_rate <= 0.05"
        parts.append(f"{key}{joint}{shown}{' ' + unit if unit else ''}")
    return ", ".join(parts) or "nothing"


def observed_vs_expected(verdict: Verdict) -> str:
    """``observed error_rate=0.2 vs expected error_rate <= 0.05`` (``nothing`` where a side is empty)."""
    return (
        f"observed {_figures(verdict.observed, verdict.units)} vs expected {_figures(verdict.expected, verdict.units)}"
    )


def _details(verdict: Verdict) -> str:
    lines = [f"{verdict.status.value}: {verdict.message}", observed_vs_expected(verdict)]
    lines += [
        f"evidence: {ref.kind.value}={ref.value}" + (f" ({ref.note})" if ref.note else "") for ref in verdict.evidence
    ]
    lines += [f"note: {note}" for note in verdict.notes]
    return "\n".join(lines)


def _testcase(suite: ET.Element, drill_name: str, verdict: Verdict, redactor: Redactor) -> None:
    case = ET.SubElement(suite, "testcase", {"classname": drill_name, "name": verdict.name, "time": "0"})
    element = _ELEMENT.get(verdict.status)
    if element is None:
        return
    message = observed_vs_expected(verdict)
    if verdict.status is not Status.FAIL:
        message = f"{verdict.status.value}: {verdict.message}; {message}"
    outcome = ET.SubElement(case, element, {"type": verdict.status.value, "message": _clean(message, redactor)})
    outcome.text = _clean(_details(verdict), redactor)


def junit_xml(run_id: str, drill_name: str, verdicts: Sequence[Verdict], redactor: Redactor | None = None) -> str:
    """The JUnit XML document for one run's verdicts."""
    redactor = redactor or Redactor()
    failures = sum(v.status is Status.FAIL for v in verdicts)
    errors = sum(v.status in (Status.INCONCLUSIVE, Status.ERROR) for v in verdicts)
    counts = {"tests": str(len(verdicts)), "failures": str(failures), "errors": str(errors), "skipped": "0"}
    root = ET.Element("testsuites", {"name": "llm-drill", **counts, "time": "0"})
    suite = ET.SubElement(root, "testsuite", {"name": drill_name, "id": run_id, **counts, "time": "0"})
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", {"name": "run_id", "value": run_id})
    for verdict in verdicts:
        _testcase(suite, drill_name, verdict, redactor)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(
    path: Path, run_id: str, drill_name: str, verdicts: Sequence[Verdict], redactor: Redactor | None = None
) -> Path:
    """Write ``junit.xml`` (refuses to overwrite, as every file of a run directory)."""
    path = Path(path)
    with open(path, "x", encoding="utf-8") as fh:
        fh.write(junit_xml(run_id, drill_name, verdicts, redactor))
    return path
