"""The one plumbing of the backends' REST clients (Toxiproxy's API, the reference stack's admin APIs).

One ``httpx`` client per server, every call bounded by ``timeout_s`` (connect, read, write, pool), a
``User-Agent`` of llm-drill's, and one translation of what can go wrong into the backend's
:class:`drill.errors.HttpApiError` subclass, with the ``operation`` and a hint:

* no answer within ``timeout_s`` (``status`` None);
* no connection at all (``status`` None; the httpx error is the ``__cause__``);
* an HTTP status the call does not expect (``status`` set; the server's message from an ``{"error": ...}``
  body, Toxiproxy's string or vLLM's ``{"message": ...}`` object, else the body's text);
* an answer that is not JSON where JSON was expected.

A client says which error it raises, how messages name the server and the hints for its failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

import httpx

from drill import __version__
from drill.errors import HttpApiError

__all__ = ["RestClient", "user_agent"]

_MESSAGE_CHARS = 300


def user_agent(role: str) -> str:
    """``llm-drill/<version> (<role>)``: what each client sends (Toxiproxy refuses ``Mozilla/...``)."""
    return f"llm-drill/{__version__} ({role})"


class RestClient:
    """One server's REST API. Subclasses set the class attributes; calls go through :meth:`_request`."""

    #: The error every failure raises.
    error: ClassVar[type[HttpApiError]] = HttpApiError
    #: How messages name the server: "Toxiproxy", "the replica admin API".
    who: ClassVar[str] = "the server"
    #: Hints for a call that got no answer in time, for one that found nobody listening, and per HTTP status.
    timeout_hint: ClassVar[str | None] = None
    unreachable_hint: ClassVar[str | None] = None
    status_hints: ClassVar[Mapping[int, str]] = {}
    #: Whether ``HTTP(S)_PROXY`` and friends apply (a loopback admin API is never behind a proxy).
    trust_env: ClassVar[bool] = True

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        user_agent: str,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        headers = {"User-Agent": user_agent}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s),
            headers=headers,
            transport=transport,
            trust_env=self.trust_env,
        )

    def close(self) -> None:
        """Close the connection pool. Called once when the client is no longer needed."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(
        self, method: str, path: str, operation: str, *, json: Any = None, ok: tuple[int, ...] = (200,)
    ) -> httpx.Response:
        """The response of one call whose status is in ``ok``; the backend's error otherwise."""
        try:
            response = self._http.request(method, path, json=json)
        except httpx.TimeoutException as exc:
            raise self.error(
                f"{operation}: {self.who} at {self.base_url} did not answer within {self.timeout_s:g}s",
                hint=self.timeout_hint,
                operation=operation,
            ) from exc
        except httpx.HTTPError as exc:
            raise self.error(
                f"{operation}: cannot reach {self.who} at {self.base_url} ({type(exc).__name__}: {exc})",
                hint=self.unreachable_hint,
                operation=operation,
            ) from exc
        if response.status_code not in ok:
            status = response.status_code
            raise self.error(
                f"{operation}: {self.who} answered HTTP {status}: {_error_message(response)}",
                hint=self.status_hints.get(status),
                operation=operation,
                status=status,
            )
        return response

    def _json(self, method: str, path: str, operation: str, *, json: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        """The JSON document a call answers; the backend's error when it fails or answers something else."""
        response = self._request(method, path, operation, json=json, ok=ok)
        try:
            return response.json()
        except ValueError as exc:
            raise self.error(
                f"{operation}: {self.who} answered non-JSON: {response.text[:200]!r}",
                operation=operation,
                status=response.status_code,
            ) from exc


def _error_message(response: httpx.Response) -> str:
    """The server's own words from an ``{"error": "..."}`` or ``{"error": {"message": "..."}}`` body, else its text."""
    try:
        error = response.json()["error"]
        if isinstance(error, dict):
            error = error["message"]
    except (ValueError, KeyError, TypeError):
        return response.text.strip()[:_MESSAGE_CHARS]
    return str(error)[:_MESSAGE_CHARS]
