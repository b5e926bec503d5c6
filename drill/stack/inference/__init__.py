"""The simulated inference engine of one replica, laid out like vLLM V1.

The engine loop (:mod:`drill.stack.inference.core`: schedule → execute → sleep out the step →
apply), the scheduler with its waiting queue, the paged KV cache, the virtual GPU (memory plan and
conditions in ``gpu``, the step runner in ``executor``, priced by ``cost_model``), the tokenizer and
the text generator, and the request and step-output values they pass. No sockets and no HTTP: the
replica package serves this engine. Importing this package starts nothing.
"""
