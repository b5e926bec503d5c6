"""The OpenAI-compatible wire format as vLLM speaks it (docs/serving-facts.md §3.1–3.2).

Request bodies are parsed into :class:`CompletionRequest` / :class:`ChatCompletionRequest`
(``extra="ignore"``: like vLLM, fields the stack does not model — ``stop``, ``logprobs``,
``presence_penalty``, ``user`` … — are accepted and ignored), then checked against the context
length with vLLM's messages. Responses and stream chunks are rendered here. SSE chunks are built
from per-request byte templates (:class:`ChunkTemplates`) so a token costs one bytes join.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from drill.spec.scenario import Endpoint
from drill.stack.http.server import HttpError
from drill.stack.inference.textgen import token_text
from drill.stack.inference.tokenizer import vocabulary

__all__ = [
    "ChatCompletionRequest",
    "ChunkTemplates",
    "CompletionRequest",
    "SamplingRequest",
    "StreamOptions",
    "DONE_EVENT",
    "chat_response",
    "check_context_length",
    "completion_response",
    "error_event",
    "parse_body",
    "token_json",
    "usage",
]

_IGNORE = ConfigDict(frozen=True, extra="ignore")


class StreamOptions(BaseModel):
    """OpenAI ``stream_options``; vLLM's defaults (``include_usage`` True once the object is given)."""

    model_config = _IGNORE

    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class SamplingRequest(BaseModel):
    """Sampling fields shared by both routes (vLLM extensions: ignore_eos, min_tokens, priority)."""

    model_config = _IGNORE

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0)] | None = None
    top_p: float | None = None
    n: int = 1
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    min_tokens: Annotated[int, Field(ge=0)] = 0
    priority: int = 0
    kv_transfer_params: dict[str, Any] | None = None  # vLLM's P/D handshake (drill.stack.replica.kv_worker)

    @model_validator(mode="after")
    def _checks(self) -> SamplingRequest:
        if self.n != 1:
            raise ValueError("n must be 1: the reference stack generates one choice per request")
        if self.stream_options is not None and not self.stream:
            raise ValueError("Stream options can only be defined when `stream=True`.")
        return self

    @property
    def include_usage(self) -> bool:
        """Whether a stream ends with the usage chunk (vLLM's ``should_include_usage``)."""
        return bool(self.stream_options is not None and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.include_usage and self.stream_options and self.stream_options.continuous_usage_stats)


class CompletionRequest(SamplingRequest):
    """``POST /v1/completions``: one prompt, a string or a list of token ids."""

    prompt: str | list[int] | list[str] | list[list[int]]

    def prompt_tokens(self) -> Sequence[object]:
        """The prompt's tokens (words, or the given ids). Raises :class:`HttpError` 400 for batches."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise HttpError(
                    400, "batched prompts are not supported by the reference stack; send one prompt per request"
                )
            prompt = prompt[0]
        return prompt.split() if isinstance(prompt, str) else list(prompt)


class ChatMessage(BaseModel):
    model_config = _IGNORE

    role: str
    content: str | list[dict] | None = None


class ChatCompletionRequest(SamplingRequest):
    """``POST /v1/chat/completions``; ``max_completion_tokens`` wins over ``max_tokens``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


_Body = TypeVar("_Body", bound=SamplingRequest)


def parse_body(model: type[_Body], body: object) -> _Body:
    """Validate a JSON body. Raises :class:`HttpError` 400 (BadRequestError) with pydantic's reasons."""
    if not isinstance(body, dict):
        raise HttpError(400, "request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise HttpError(400, reasons) from exc


def check_context_length(num_prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int:
    """The request's effective ``max_tokens``; raises :class:`HttpError` 400 with vLLM's messages (§3.2)."""
    if num_prompt_tokens == 0:
        raise HttpError(400, "The decoder prompt cannot be empty")
    if num_prompt_tokens >= max_model_len:
        raise HttpError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {num_prompt_tokens} input tokens. Please reduce the length of the "
            "input messages.",
        )
    room = max_model_len - num_prompt_tokens
    if max_tokens is None:
        return room
    if max_tokens > room:
        raise HttpError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {max_model_len} tokens and your request has "
            f"{num_prompt_tokens} input tokens ({max_tokens} > {max_model_len} - "
            f"{num_prompt_tokens}).",
        )
    return max_tokens


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


@lru_cache(maxsize=1)
def _token_json() -> tuple[bytes, ...]:
    return tuple(json.dumps(token_text(index)).encode() for index in range(len(vocabulary())))


def token_json(token_id: int) -> bytes:
    """The JSON string literal (quotes included) of one token's text (a table built on first use)."""
    if not _TOKEN_JSON:
        _TOKEN_JSON.extend(_token_json())
    table = _TOKEN_JSON
    return table[token_id]


_TOKEN_JSON: list[bytes] = []


def _dumps(payload: object) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


class ChunkTemplates:
    """Byte templates of one request's SSE events (§3.1), built once per request."""

    __slots__ = ("endpoint", "head", "mid", "plain_tail", "role_event", "response_id", "created", "model")

    def __init__(self, endpoint: Endpoint, response_id: str, created: int, model: str) -> None:
        self.endpoint = endpoint
        self.response_id = response_id
        self.created = created
        self.model = model
        envelope = (
            b"data: "
            + _dumps({"id": response_id, "object": _CHUNK_OBJECT[endpoint], "created": created, "model": model})[:-1]
        )
        if endpoint is Endpoint.COMPLETIONS:
            self.head = envelope + b',"choices":[{"index":0,"text":'
            self.mid = b',"logprobs":null,"finish_reason":'
            self.role_event = b""
        else:
            self.head = envelope + b',"choices":[{"index":0,"delta":{"content":'
            self.mid = b'},"logprobs":null,"finish_reason":'
            self.role_event = (
                envelope + b',"choices":[{"index":0,"delta":{"role":"assistant",'
                b'"content":""},"logprobs":null,"finish_reason":null}]}\n\n'
            )
        self.plain_tail = self._tail(None, None)

    def _tail(self, finish_reason: str | None, usage_json: bytes | None) -> bytes:
        reason = b"null" if finish_reason is None else b'"' + finish_reason.encode() + b'"'
        if self.endpoint is Endpoint.COMPLETIONS:
            return self.mid + reason + b',"stop_reason":null}],"usage":' + (usage_json or b"null") + b"}\n\n"
        stop = b',"stop_reason":null' if finish_reason is not None else b""
        extra = b',"usage":' + usage_json if usage_json is not None else b""
        return self.mid + reason + stop + b"}]" + extra + b"}\n\n"

    def token_event(self, text_json: bytes, finish_reason: str | None = None, usage_json: bytes | None = None) -> bytes:
        """One content event; ``finish_reason`` on the last one; ``usage_json`` for continuous usage stats."""
        if finish_reason is None and usage_json is None:
            return self.head + text_json + self.plain_tail
        return self.head + text_json + self._tail(finish_reason, usage_json)

    def usage_event(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The final ``choices: []`` usage event."""
        return (
            b"data: "
            + _dumps(
                {
                    "id": self.response_id,
                    "object": _CHUNK_OBJECT[self.endpoint],
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage(prompt_tokens, completion_tokens),
                }
            )
            + b"\n\n"
        )


_CHUNK_OBJECT = {Endpoint.COMPLETIONS: "text_completion", Endpoint.CHAT: "chat.completion.chunk"}

DONE_EVENT = b"data: [DONE]\n\n"


def error_event(message: str, error_type: str, code: int) -> bytes:
    """A mid-stream error event followed by ``[DONE]`` (§3.1)."""
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return b"data: " + _dumps(body) + b"\n\n" + DONE_EVENT


def completion_response(
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict:
    """A non-streaming ``text_completion`` body."""
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
        ],
        "usage": {**usage(prompt_tokens, completion_tokens), "prompt_tokens_details": None},
    }


def chat_response(
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict:
    """A non-streaming ``chat.completion`` body."""
    message: dict[str, object] = {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [],
        "reasoning_content": None,
    }
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        ],
        "usage": {**usage(prompt_tokens, completion_tokens), "prompt_tokens_details": None},
        "prompt_logprobs": None,
    }
