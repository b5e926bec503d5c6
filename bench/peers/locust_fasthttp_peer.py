"""Peer for bench/load_driver.py: Locust's stock FastHttpUser reading the stream with ``iter_lines``.

Closed loop, as Locust users are: each of ``-u N`` users sends a streaming completion and reads it
line by line with ``FastHttpSession.iter_lines`` (1 KB reads, docs/dependencies.md §1.1), timestamping
each ``data:`` line with ``time.time()``, then sends the next. At the end of the test the samples
(X-Request-Id and chunk times) are written to ``$BENCH_OUT`` as JSON.

Run by the bench: ``python -m locust -f bench/peers/locust_fasthttp_peer.py --headless -u N -r N
-t 10s --host URL`` with ``BENCH_CHUNKS`` (tokens per stream).
"""

import json
import os
import time
import uuid

from locust import FastHttpUser, constant, events, task

SAMPLES = []


class StreamUser(FastHttpUser):
    wait_time = constant(0)
    concurrency = 1

    @task
    def stream(self):
        rid = uuid.uuid4().hex
        body = {
            "model": "bench-model",
            "prompt": "hello " * 20,
            "max_tokens": int(os.environ["BENCH_CHUNKS"]),
            "stream": True,
            "ignore_eos": True,
        }
        times = []
        for line in self.client.iter_lines("/v1/completions", method="POST", json=body, headers={"X-Request-Id": rid}):
            if line.startswith("data: {"):
                times.append(time.time())
        SAMPLES.append([rid, times])


@events.test_stop.add_listener
def dump(environment, **kwargs):
    with open(os.environ["BENCH_OUT"], "w") as fh:
        json.dump({"samples": SAMPLES}, fh)
