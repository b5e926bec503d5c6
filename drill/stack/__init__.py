"""The embedded reference serving stack: a simulated GPU LLM serving stack that imitates vLLM.

Engine half (this package's scheduler, cost model, replica process, API, metrics, tracing,
admin API) and topology half (router, TP/PP ranks, supervisor, launcher) meet at the seams
fixed in ``docs/design/stack-contracts.md``. Importing any module here starts nothing; only the
``python -m drill.stack.<process>`` entry points start servers.
"""
