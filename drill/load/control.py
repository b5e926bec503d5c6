"""The control channel between the harness and the load-generator child, and what travels on it.

One JSON object per line over a socketpair: the harness (:mod:`drill.load.driver`)
sends the :class:`GeneratorPlan` first, then commands (bursts, stop); the child
(:mod:`drill.load.child.locustfile`) answers ``ready``, a ``status`` every half second,
replies to ``burst_status`` and a final ``summary``. The same code runs on both
sides: in the child, ``socket`` and ``threading`` are gevent-patched, so a
blocking read only blocks its greenlet.

Distributed workers get the same plan from the master over Locust's ZeroMQ
channel (``runner.send_message``), so a remote ``drill worker`` needs nothing
but the master's address.
"""

from __future__ import annotations

import enum
import json
import socket
import threading
from dataclasses import asdict, dataclass, field

from drill.spec.scenario import Scenario

__all__ = ["Channel", "GeneratorPlan", "Msg", "STATUS_INTERVAL_S"]

#: How often the child reports its counters (s).
STATUS_INTERVAL_S = 0.5


class Msg(str, enum.Enum):
    PLAN = "plan"
    READY = "ready"
    STATUS = "status"
    SUMMARY = "summary"
    ERROR = "error"
    START_BURST = "start_burst"
    END_BURST = "end_burst"
    BURST_STATUS = "burst_status"
    REPLY = "reply"
    STOP = "stop"


@dataclass(frozen=True)
class GeneratorPlan:
    """Everything a generating process needs; built by the driver, JSON on the wire."""

    scenario: dict  # Scenario.model_dump(mode="json", by_alias=True)
    target_url: str
    model: str
    duration_s: float
    seed: int
    run_nonce: str  # makes idempotency keys and request ids unique to this run
    run_dir: str
    workers: int = 0
    expect_remote_workers: int = 0
    master_bind: str = "127.0.0.1:0"
    headers: dict[str, str] = field(default_factory=dict)
    start_lead_s: float = 0.3  # t0 is this far after the plan is applied, so offset 0 is not late
    control_ids: list[str] = field(default_factory=list)  # logical ids whose output text is digested
    capture_outputs: bool = False  # also digest every temperature-0 answer, with its first tokens
    keep_text: bool = False  # the first tokens as text (report.include_text), else as digests
    repeat_of: dict[str, str] = field(default_factory=dict)  # logical id -> the baseline one whose body it re-sends
    prompts_file: str | None = None  # the fitted prompts (drill.load.tokenizing); None: one token per word

    def scenario_model(self) -> Scenario:
        return Scenario.model_validate(self.scenario)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> GeneratorPlan:
        return cls(**data)


class Channel:
    """JSON lines over a connected stream socket; ``recv`` returns None at EOF."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""
        self._lines: list[bytes] = []
        self._send_lock = threading.Lock()

    def send(self, kind: Msg, **data: object) -> None:
        """Send one message; raises OSError when the other side is gone."""
        line = json.dumps({"type": kind.value, **data}, separators=(",", ":")).encode() + b"\n"
        with self._send_lock:
            self.sock.sendall(line)

    def recv(self) -> dict | None:
        """The next message, blocking; None once the peer has closed its end."""
        while not self._lines:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            parts = (self._buffer + chunk).split(b"\n")
            self._buffer = parts.pop()
            self._lines.extend(p for p in parts if p)
        return json.loads(self._lines.pop(0))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
