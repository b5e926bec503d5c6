"""Targets: the serving stacks a drill runs against, as ``drill.targets`` plugins.

A target starts (or attaches to) a stack and describes it to faults as a :class:`drill.api.TargetInfo`
(its replicas, links, proxies and capabilities). :mod:`drill.targets.embedded` runs the embedded reference
stack (:mod:`drill.stack`); :mod:`drill.targets.openai` attaches to any OpenAI-compatible server;
:mod:`drill.targets.probe` asks a server which model it serves and waits for its first good answer.
"""
