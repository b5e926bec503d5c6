"""The load driver, harness side: scenario plan, schedule, records, summary, replay, and the driver that
starts the load-generator child. Everything here is plain Python the harness imports safely; what runs
under gevent in the child (Locust, the open loop, streaming, the reactor) is in :mod:`drill.load.child`."""
