"""Starting, supervising and stopping the processes of a stack (stack-contracts.md §9).

The stack plan decided before anything starts (:mod:`drill.stack.supervision.stack_plan`: ports,
names, launches, proxies), the launcher behind ``drill stack up|down`` and the state file it leaves,
the supervisor process (``python -m drill.stack.supervision.supervisor``), and ``runtime: docker``
with its container entry point. Named supervision, not process, so it does not share a name with
:mod:`drill.backends.process`. Importing this package starts nothing.
"""
