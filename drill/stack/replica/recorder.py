"""Writes each finished request to the side-effect ledger and as an ``llm_request`` span.

An :class:`~drill.stack.inference.core.EngineListener` the replica installs next to the metrics: when the
engine finishes a request for any reason, :class:`RequestRecorder` appends its ledger record
(stack-contracts.md §6) and then emits its spans (§7) carrying the same fields
(``drill.side_effect.seq``, ``drill.idempotency_key``, ``drill.replica``, ``drill.billed_tokens``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from drill.rundir.ledger import LedgerStatus
from drill.stack.inference.core import StepRecord
from drill.stack.inference.request import FinishReason, Request
from drill.stack.replica.ledger import Ledger
from drill.stack.replica.openai_api import ApiContext
from drill.stack.replica.request_spans import SpanAttributes, Tracing

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = ["RequestRecorder"]

log = logging.getLogger(__name__)


class RequestRecorder:
    """Ledger and tracing for finished requests of one replica."""

    def __init__(self, ledger: Ledger, tracing: Tracing, replica: str) -> None:
        self.ledger = ledger
        self.tracing = tracing
        self.replica = replica

    def step_finished(self, record: StepRecord) -> None:
        """Nothing per step."""

    def request_finished(self, request: Request) -> None:
        """Append the ledger record, then emit the spans (they carry its ``seq``)."""
        ctx = request.context
        if not isinstance(ctx, ApiContext):
            return
        status = _status(request, ctx)
        to_wall = ctx.clock_offset
        finished = request.finished_ts if request.finished_ts is not None else request.arrival_time
        record = self.ledger.append(
            request_id=ctx.base_id,
            idempotency_key=ctx.idempotency_key,
            trace_id=ctx.trace_id,
            prompt_tokens=request.num_prompt_tokens,
            completion_tokens=request.num_output_tokens,
            billed_tokens=request.num_prompt_tokens + request.num_output_tokens,
            finish_reason=(request.finish_reason or FinishReason.ABORT).value,
            status=status,
            arrival_ts=ctx.arrival_wall,
            first_token_ts=None if request.first_token_ts is None else request.first_token_ts + to_wall,
            finish_ts=finished + to_wall,
            cached_tokens=request.num_cached_tokens,
            num_preemptions=request.num_preemptions,
            priority=request.priority,
        )
        if not self.tracing.enabled:
            return
        attributes: dict[str, AttributeValue] = {
            SpanAttributes.GEN_AI_REQUEST_ID: ctx.base_id,  # the client's X-Request-Id, not the internal id
            SpanAttributes.DRILL_SIDE_EFFECT_SEQ: record.seq,
            SpanAttributes.DRILL_REPLICA: self.replica,
            SpanAttributes.DRILL_BILLED_TOKENS: record.billed_tokens,
        }
        if ctx.idempotency_key is not None:
            attributes[SpanAttributes.DRILL_IDEMPOTENCY_KEY] = ctx.idempotency_key
        if ctx.temperature:
            attributes[SpanAttributes.GEN_AI_REQUEST_TEMPERATURE] = ctx.temperature
        if ctx.top_p:
            attributes[SpanAttributes.GEN_AI_REQUEST_TOP_P] = ctx.top_p
        if request.aborted_in is not None:
            attributes[SpanAttributes.DRILL_ABORTED_IN] = request.aborted_in
        error = (
            ctx.error[1] if ctx.error else (_abort_message(request, ctx) if status is LedgerStatus.ABORTED else None)
        )
        self.tracing.record_request(request, ctx.http_span, clock_offset=to_wall, attributes=attributes, error=error)


def _abort_message(request: Request, ctx: ApiContext) -> str:
    """The ERROR status of an aborted request's span: who went away, and where the request was then."""
    who = "client disconnected" if ctx.response.disconnected else "aborted at shutdown"
    return f"{who} ({request.aborted_in})" if request.aborted_in else who


def _status(request: Request, ctx: ApiContext) -> LedgerStatus:
    if ctx.error_status == 503:
        return LedgerStatus.TIMEOUT
    if ctx.error_status is not None or request.finish_reason is FinishReason.ERROR:
        return LedgerStatus.ERROR
    if request.finish_reason is FinishReason.ABORT:
        return LedgerStatus.ABORTED
    return LedgerStatus.OK
