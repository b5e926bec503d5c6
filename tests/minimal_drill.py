"""The smallest valid drill file, for the tests that plan, validate, load or break one.

Its target is an OpenAI-compatible server on loopback that none of these tests reaches; its scenario one ``chat``
pool of fixed lengths (100 tokens in, 50 out) arriving at 5 requests/s; a 10 s baseline and a 20 s fault phase.
"""

from __future__ import annotations

__all__ = ["minimal_drill"]

_DRILL = """\
name: {name}
target: {{kind: openai, config: {{url: "http://127.0.0.1:8000"}}}}
scenario:
  arrival: {{process: poisson, rate: 5}}
  pools:
    - name: chat
      input_tokens: {{dist: fixed, value: 100}}
      output_tokens: {{dist: fixed, value: 50}}
phases: {{baseline: 10s, fault: 20s}}
"""


def minimal_drill(name: str = "ok", extra: str = "") -> str:
    """The drill file's text, named ``name``, with ``extra`` (top-level YAML keys: checks, faults...) appended."""
    return _DRILL.format(name=name) + extra
