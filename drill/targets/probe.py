"""Probes the runner sends to any OpenAI-compatible target: model discovery and the first good response."""

from __future__ import annotations

import time

import httpx

from drill.errors import TargetError

__all__ = ["first_good_response", "served_model", "unhealthy_after"]


def served_model(
    base_url: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None
) -> tuple[str | None, str | None]:
    """(first model id from ``/v1/models``, server version from ``/version``); None where unknown."""
    model = version = None
    with httpx.Client(timeout=timeout_s, trust_env=False, headers=headers) as client:
        try:
            data = client.get(f"{base_url}/v1/models").json().get("data") or []
            model = data[0].get("id") if data else None
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        try:
            response = client.get(f"{base_url}/version")
            if response.status_code == 200:
                version = response.json().get("version")
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
    return model, version


def first_good_response(
    base_url: str, model: str | None, *, timeout_s: float, poll_s: float = 0.2, headers: dict[str, str] | None = None
) -> float:
    """Seconds until a one-token completion succeeds (a cold start ends at the first good response)."""
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no answer"
    with httpx.Client(timeout=min(30.0, timeout_s), trust_env=False, headers=headers) as client:
        while time.monotonic() < deadline:
            name = model or served_model(base_url, headers=headers)[0]
            if name:
                try:
                    response = client.post(
                        f"{base_url}/v1/completions",
                        json={"model": name, "prompt": "ping", "max_tokens": 1, "temperature": 0},
                    )
                    if response.status_code == 200:
                        return time.monotonic() - start
                    last = f"HTTP {response.status_code}: {response.text[:200]}"
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
            time.sleep(poll_s)
    raise TargetError(
        f"no good response from {base_url} within {timeout_s:g}s (last: {last})",
        hint="raise phases.cold_start.timeout, or check the target's logs",
    )


def unhealthy_after(url: str, timeout_s: float, poll_s: float) -> str | None:
    """Polls ``url`` until it answers 200: None then, else what it last said ("HTTP 503", the error, "no answer")
    once ``timeout_s`` has passed; the caller says what was not healthy."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    with httpx.Client(timeout=5.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            try:
                response = client.get(url)
                if response.status_code == 200:
                    return None
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(poll_s)
    return last
