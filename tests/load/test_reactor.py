"""The load child's stream reactor (``drill.load.child.reactor``) never holds the other greenlets back.

Run in a child process (the load child's own world: gevent's hub, no pytest around it). The stream fed to the reactor
never runs dry — every read is written back into it — which is what a flood of open streams looks like to the
reactor: there is always another chunk ready. The arrivals' greenlets wait on timers; they must still run on time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import json, socket, time
import gevent
from drill.load.child.reactor import StreamReactor

reader, writer = socket.socketpair()
reader.setblocking(False)
writer.sendall(b"data: x\n\n" * 4096)  # a backlog the reads keep topped up

class Endless:
    def __init__(self):
        self.reads, self.until = 0, time.perf_counter() + STREAM_S
    def on_data(self, data, now):
        self.reads += 1
        writer.send(data)  # what was read arrives again: the socket is ready on every poll
        return now >= self.until
    def on_error(self, exc):
        raise exc

stream = Endless()
done = StreamReactor().watch(reader, stream)
gevent.sleep(0)  # the reactor starts reading
late = []
for _ in range(5):  # an arrival every 50 ms, as the open loop's schedule waits for them
    due = time.perf_counter() + 0.05
    gevent.sleep(0.05)
    late.append(time.perf_counter() - due)
done.wait()
print(json.dumps({"late_s": late, "reads": stream.reads}))
"""


def _run(stream_s: float) -> dict:
    script = _SCRIPT.replace("STREAM_S", repr(stream_s))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.realtime  # timer lateness in wall time
def test_a_stream_that_never_runs_dry_does_not_hold_back_the_timers_of_the_arrivals() -> None:
    got = _run(stream_s=3.0)
    assert got["reads"] > 1000, got  # the stream was read all along
    # five 50 ms waits while the stream pours in: each one wakes in well under the stream's 3 s (before the reactor
    # gave the hub its turn, the first waited for the whole stream); a loaded 2-core machine adds tens of ms at most
    assert max(got["late_s"]) < 0.75, got
