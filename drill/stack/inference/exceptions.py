"""Errors of the reference stack's engine, in the project's one tree (:mod:`drill.errors`).

Raised by the scheduler (admission control) and the executor (simulated GPU failures); the API
layer turns them into vLLM's HTTP answers (docs/serving-facts.md §3.2, §4).
"""

from __future__ import annotations

from drill.errors import StackError

__all__ = ["AdmissionRefused", "EngineDeadError", "MaxQueuedTokensError", "QueueOverflowError"]


class AdmissionRefused(StackError):
    """Admission control refused a request: HTTP 503, or an error event with code 503 in a stream whose 200
    has gone out (vLLM ≥ 0.29, §3.2). ``reason`` labels ``vllm:admission_rejections_total``."""

    status = 503
    error_type = "Service Unavailable"
    reason = "admission"


class QueueOverflowError(AdmissionRefused):
    """``max_num_queued_reqs`` reached (vLLM's ``QueueOverflowError``, its message verbatim)."""

    reason = "max_num_queued_reqs"

    def __init__(self, in_flight: int, limit: int) -> None:
        super().__init__(
            "The engine is currently busy and cannot accept new requests. "
            "Please try again later or on a different instance."
        )
        self.in_flight = in_flight
        self.limit = limit


class MaxQueuedTokensError(AdmissionRefused):
    """``max_num_queued_tokens`` reached (vLLM's ``MaxQueuedTokensError``, its message verbatim)."""

    reason = "max_num_queued_tokens"

    def __init__(self, backlog_tokens: int, limit: int) -> None:
        super().__init__(
            "The engine has reached its prefill token backlog limit. Please try again later or on a different instance."
        )
        self.backlog_tokens = backlog_tokens
        self.limit = limit


class EngineDeadError(StackError):
    """The (simulated) engine core died: CUDA OOM, an XID error, a broken TP/PP link.

    ``cause`` is the root-cause line a real engine would log (e.g. ``torch.OutOfMemoryError: CUDA
    out of memory. ...``); the message clients see is vLLM's ``EngineDeadError`` text (§4).
    """

    CLIENT_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."

    def __init__(self, cause: str) -> None:
        super().__init__(f"engine died: {cause}")
        self.cause = cause
