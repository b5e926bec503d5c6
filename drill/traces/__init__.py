"""Traces: one columnar span model fed by many sources, and what the checks read from it.

- :mod:`drill.traces.table` — :class:`~drill.traces.table.SpanTable`, the columnar span model (numpy
  columns, lowercase hex ids, service/name codes, OTLP kind and status codes, UNIX ns).
- :mod:`drill.traces.sources` and :mod:`drill.traces.jaeger` — the ``drill.traces`` plugins: the run's
  receiver file, OTLP JSON and protobuf files, Jaeger JSON files and Jaeger's query API; each reads
  into a table and reports what it could not read.
- :mod:`drill.traces.request_phases` — vLLM's ``llm_request`` phase attributes as ``queue``/``prefill``/``decode``
  child spans, derived by every source when it reads.
- :mod:`drill.traces.otlp` — OTLP decoding (the receiver's HTTP bodies, OTLP/JSON lines, protobuf files).
- :mod:`drill.traces.receiver` — the run's OTLP/HTTP receiver, which writes ``spans.jsonl``.
- :mod:`drill.traces.completeness` — how complete a table is (orphans, roots, clock skew, unreadable).
- :mod:`drill.traces.join` — client request records joined to their spans; measurement truth.
- :mod:`drill.traces.run_traces` — :class:`~drill.traces.run_traces.RunTraces`, what ``evidence.traces``
  gives the checks.
"""
