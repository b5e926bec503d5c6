"""One replica process of the stack: ``python -m drill.stack.replica.api_server --launch FILE.json``.

The API server (:mod:`drill.stack.replica.api_server`, named after vLLM's
``vllm.entrypoints.openai.api_server``) runs an engine from :mod:`drill.stack.inference` behind the
OpenAI-compatible API (:mod:`drill.stack.replica.openai_api`, wire format in
:mod:`drill.stack.replica.openai_protocol`), the admin API, vLLM's Prometheus ``/metrics``, the
OpenTelemetry spans of each request and their export (:mod:`drill.stack.replica.request_spans`,
:mod:`drill.stack.http.span_export`), and the side-effect ledger with the recorder that writes
it. Importing this package starts nothing.
"""
