"""The embedded reference serving stack: a simulated GPU LLM serving stack that imitates vLLM.

Sub-packages, by what their modules do (the seams between them are fixed in
``docs/design/stack-contracts.md``):

- :mod:`drill.stack.inference`: the simulated engine of one replica (scheduler, KV cache, virtual
  GPU, cost model, tokenizer, text generator, the engine loop in ``inference.core``);
- :mod:`drill.stack.replica`: the replica process around it (OpenAI and admin APIs, metrics,
  request spans and their export, side-effect ledger);
- :mod:`drill.stack.router`: the router process in front of the replicas;
- :mod:`drill.stack.interconnect`: the TP/PP interconnect between a replica's rank processes;
- :mod:`drill.stack.http`: the small HTTP server the replica and the router share;
- :mod:`drill.stack.supervision`: plan, launcher, supervisor, state file, Docker runtime.

At the root, what they all share: the stack YAML (:mod:`drill.stack.config`), the GPU and model
presets, the launches each process is told at start (:mod:`drill.stack.launch`) and lifelines
(:mod:`drill.stack.lifeline`). Importing any module here starts nothing; only the
``python -m drill.stack.<package>.<module>`` entry points (``replica.api_server``, ``router.gateway``,
``interconnect.rank``, ``supervision.supervisor``, ``supervision.container_entry``) start
processes.
"""
