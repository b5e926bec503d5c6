"""Measurements against a running stack, from the client's side (what a user would see)."""

from __future__ import annotations

import statistics
import time

import httpx


def tpot_s(base_url: str, *, tokens: int = 6, requests: int = 2, model: str = "llama-3-8b") -> float:
    """Median time per output token (gap between streamed chunks) over ``requests`` streams, seconds."""
    gaps: list[float] = []
    with httpx.Client(timeout=120, trust_env=False) as client:
        for _ in range(requests):
            arrivals = []
            body = {"model": model, "prompt": "hello", "max_tokens": tokens, "stream": True, "ignore_eos": True}
            with client.stream("POST", f"{base_url}/v1/completions", json=body) as response:
                assert response.status_code == 200, response.read()
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        arrivals.append(time.perf_counter())
            assert len(arrivals) == tokens
            gaps.extend(b - a for a, b in zip(arrivals, arrivals[1:]))
    return statistics.median(gaps)


def admin_get(url: str, token: str) -> dict:
    """GET an admin URL with the stack's token."""
    response = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10, trust_env=False)
    response.raise_for_status()
    return response.json()


def wait_until(predicate, timeout_s: float, what: str, poll_s: float = 0.05):
    """Poll ``predicate`` until it returns a truthy value; fail the test with ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    from pathlib import Path

    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members
