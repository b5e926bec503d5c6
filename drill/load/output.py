"""The digest of a response's generated text: what a replay compares byte for byte.

Used by the load generator for the control requests it was asked to watch (the
``control_ids`` of its plan) and by :mod:`drill.load.replay` for every replay.
The digest is ``sha256:<hex>`` of the UTF-8 text the server generated, choice by
choice in the order the chunks came: ``choices[].delta.content`` of a streamed
chat chunk, ``choices[].text`` of a completion chunk, ``choices[].message.content``
or ``choices[].text`` of a whole (non-streamed) body. Ids, timestamps and usage are
not part of it, so two answers with the same words have the same digest.

A content chunk that cannot be parsed is counted (``unreadable``) and the digest
is then ``None``: a partial digest would compare as a difference that is not one.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["HEAD_TOKENS", "OutputDigest", "response_text", "token_digest"]

#: How many of an answer's first tokens a record keeps (``output_head``): where two answers part, for a reviewer.
HEAD_TOKENS = 16


class OutputDigest:
    """Accumulates the generated text of one response, and its first :data:`HEAD_TOKENS` tokens.

    A token is one streamed content piece (vLLM sends one token per chunk); a whole body's text is split at
    whitespace instead, the closest a client gets without the model's tokenizer.
    """

    __slots__ = ("_hash", "unreadable", "chars", "head")

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.unreadable = 0
        self.chars = 0
        self.head: list[str] = []

    def feed_chunk(self, line: bytes) -> None:
        """One SSE content event (``data: {...}``, with or without its newlines)."""
        payload = line.strip()
        if payload.startswith(b"data:"):
            payload = payload[5:].strip()
        self._add(payload, stream=True)

    def feed_body(self, body: bytes) -> None:
        """A whole non-streamed JSON response body."""
        self._add(body, stream=False)

    def value(self) -> str | None:
        """``sha256:<hex>`` of the text so far; None when a content chunk could not be read."""
        return None if self.unreadable else "sha256:" + self._hash.hexdigest()

    def _add(self, payload: bytes, *, stream: bool) -> None:
        try:
            text = response_text(json.loads(payload), stream=stream)
        except (ValueError, TypeError, AttributeError, KeyError):
            self.unreadable += 1
            return
        data = text.encode("utf-8")
        self.chars += len(text)
        self._hash.update(data)
        if text and len(self.head) < HEAD_TOKENS:
            pieces = [text] if stream else text.split()
            self.head.extend(pieces[: HEAD_TOKENS - len(self.head)])

    def first_tokens(self, keep_text: bool = False) -> list[str] | None:
        """The first tokens of the answer — each as ``sha256:<12 hex>`` unless ``keep_text`` (the drill's
        ``report: {include_text: true}``: raw records keep no completion text otherwise, ``docs/redaction.md``);
        None when a content chunk could not be read (as :meth:`value`)."""
        if self.unreadable:
            return None
        return list(self.head) if keep_text else [token_digest(t) for t in self.head]


def token_digest(token: str) -> str:
    """A token as records keep it without ``include_text``: enough to tell two apart, nothing to read."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:12]


def response_text(data: dict, *, stream: bool) -> str:
    """The generated text of one parsed chunk (``stream``) or body; raises TypeError for another shape."""
    choices = data["choices"]
    if not isinstance(choices, list):
        raise TypeError("choices is not a list")
    parts = []
    for choice in choices:
        holder = choice.get("delta" if stream else "message") or {}
        text = holder.get("content") if isinstance(holder, dict) else None
        if text is None:
            text = choice.get("text")
        if text is not None and not isinstance(text, str):
            raise TypeError(f"generated text is a {type(text).__name__}")
        parts.append(text or "")
    return "".join(parts)
