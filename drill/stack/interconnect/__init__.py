"""The TP/PP interconnect of one replica (stack-contracts.md §8): real processes, real TCP.

What one engine step asks of the interconnect (:mod:`drill.stack.interconnect.step_exchange`:
the exchange plan, the ``Interconnect`` protocol and the no-op one for tp = pp = 1), the TCP
interconnect between rank 0 and its rank processes (:mod:`drill.stack.interconnect.tcp`), one
TP rank or PP stage (``python -m drill.stack.interconnect.rank``), and the predicted step slowdown
when a Toxiproxy toxic sits on a link (:mod:`drill.stack.interconnect.link_model`). Importing this
package starts nothing.
"""
