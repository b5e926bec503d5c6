"""The router process in front of the replicas: ``python -m drill.stack.router.gateway --launch FILE.json``.

The gateway (:mod:`drill.stack.router.gateway`: endpoints, health checks, admin API), one
request's upstream attempts and retries (:mod:`drill.stack.router.proxy`), the routing decisions
and the Idempotency-Key store kept apart from the I/O (:mod:`drill.stack.router.routing`), and the
router's ``/metrics`` and tracer (:mod:`drill.stack.router.telemetry`). Importing this package
starts nothing.
"""
