"""Measurements against a running stack, from the client's side (what a user would see)."""

from __future__ import annotations

import statistics
import time
import uuid

import httpx


def tpot_s(replica, token: str, *, tokens: int = 8, requests: int = 2, model: str = "llama-3-8b") -> float:
    """vLLM's per-request TPOT, ``(finish - first token) / (n - 1)``, of ``requests`` streams sent
    to ``replica.url``, as the replica's ledger stamped them; the median, in seconds.

    Server-side stamps: on a loaded 2-core machine the test process itself may be descheduled and
    then read several chunks at once, which would make client-side gaps meaningless.
    """
    values: list[float] = []
    with httpx.Client(timeout=120, trust_env=False) as client:
        for _ in range(requests):
            request_id = f"tpot-{uuid.uuid4().hex[:12]}"
            body = {"model": model, "prompt": "hello", "max_tokens": tokens, "stream": True, "ignore_eos": True}
            with client.stream(
                "POST", f"{replica.url}/v1/completions", json=body, headers={"X-Request-Id": request_id}
            ) as response:
                assert response.status_code == 200, response.read()
                events = sum(1 for line in response.iter_lines() if line.startswith("data: {"))
            assert events == tokens
            record = _ledger_record(replica, token, request_id)
            values.append((record["finish_ts"] - record["first_token_ts"]) / (record["completion_tokens"] - 1))
    return statistics.median(values)


def _ledger_record(replica, token: str, request_id: str) -> dict:
    records = admin_get(f"{replica.admin_url}/admin/ledger?since=0", token)["records"]
    return next(r for r in reversed(records) if request_id in r["request_id"])


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
