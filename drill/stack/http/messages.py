"""Request, response and error values and the router of :mod:`drill.stack.http.server` (re-exported there).

Errors are answered in vLLM's current shape (docs/serving-facts.md §3.2):
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

if TYPE_CHECKING:
    from drill.stack.http.server import ResponseStream

__all__ = ["Handler", "HttpError", "HttpRequest", "HttpResponse", "Router", "error_body"]

_STATUSES = {status.value for status in HTTPStatus}


@dataclass(slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case; a repeated header's values are joined by ``", "``."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    peer_host: str | None = None
    http_version: str = "1.1"

    def json(self) -> object:
        """The body parsed as JSON. Raises :class:`HttpError` 400 when it is not JSON."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"request body is not valid JSON: {exc}") from exc

    def query_params(self) -> dict[str, str]:
        """Query parameters (the last value of each name)."""
        return {key: values[-1] for key, values in parse_qs(self.query).items()}


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A fixed-length response."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, payload: object, status: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> HttpResponse:
        """A JSON response (compact separators)."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        return cls(status, body, "application/json", headers)


class HttpError(Exception):
    """Raised by a handler to answer with an error body; ``type`` defaults to the vLLM type for the status."""

    def __init__(
        self, status: int, message: str, *, type: str | None = None, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _error_type(status)
        self.headers = headers

    def response(self) -> HttpResponse:
        """This error as a response: vLLM's ``{"error": {...}}`` body."""
        return HttpResponse.json(error_body(self.message, self.type, self.status), self.status, self.headers)


def error_body(message: str, type: str, code: int, param: str | None = None) -> dict:
    """vLLM's current error body (docs/serving-facts.md §3.2): ``{"error": {message, type, param, code}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _error_type(status: int) -> str:
    return {
        400: "BadRequestError",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFoundError",
        422: "UnprocessableEntityError",
        500: "InternalServerError",
    }.get(status, HTTPStatus(status).phrase if status in _STATUSES else "Error")


Handler = Callable[["HttpRequest", "ResponseStream"], Awaitable["HttpResponse | None"]]


@dataclass
class Router:
    """Handlers by ``(method, path)``; exact paths, plus prefix routes registered with a trailing ``*``."""

    routes: dict[tuple[str, str], Handler] = field(default_factory=dict)
    prefixes: list[tuple[str, str, Handler]] = field(default_factory=list)

    def add(self, method: str, path: str, handler: Handler) -> None:
        """Register ``handler`` for ``method path``; ``path`` ending in ``*`` matches by prefix."""
        if path.endswith("*"):
            self.prefixes.append((method.upper(), path[:-1], handler))
        else:
            self.routes[(method.upper(), path)] = handler

    def resolve(self, method: str, path: str) -> Handler:
        """The handler for a request. Raises :class:`HttpError` 404 (unknown path) or 405 (wrong method)."""
        handler = self.routes.get((method, path))
        if handler is not None:
            return handler
        for route_method, prefix, prefix_handler in self.prefixes:
            if route_method == method and path.startswith(prefix):
                return prefix_handler
        allowed = sorted(
            {m for (m, p) in self.routes if p == path} | {m for (m, p, _) in self.prefixes if path.startswith(p)}
        )
        if allowed:
            raise HttpError(
                405,
                f"Method {method} is not allowed for {path}",
                type="MethodNotAllowed",
                headers=(("Allow", ", ".join(allowed)),),
            )
        raise HttpError(404, f"Not Found: {path}", type="NotFoundError")
