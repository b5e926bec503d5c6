"""The KV transfer between disaggregated prefill and decode workers (docs/disaggregated.md).

Its wire format (:mod:`drill.stack.kv.wire`), a transfer's lifecycle on the prefill side
(:mod:`drill.stack.kv.transfers`), the prefill side's TCP server (:mod:`drill.stack.kv.kv_server`), the decode side's
read with its lease (:mod:`drill.stack.kv.kv_client`) and the KV faults a prefill worker honours
(:mod:`drill.stack.kv.kv_faults`). It sits beside the interconnect, under the engine; what a worker does with it per
request is :mod:`drill.stack.replica.kv_worker`, the configuration :mod:`drill.stack.topology`. Importing this package
starts nothing.
"""
