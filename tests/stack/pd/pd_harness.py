"""Helpers of the P/D tests: a prefill + a decode worker in the test's loop (imported by conftest and tests)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import httpx

from drill.stack.config import parse_stack_config
from drill.stack.launch import ReplicaLaunch
from drill.stack.replica.api_server import Replica
from drill.stack.supervision.stack_plan import StackPlan, build_plan

ADMIN = {"Authorization": "Bearer pd-test-admin-token"}


@dataclass
class PdPair:
    """A prefill worker and a decode worker running in the test's loop, and a client for both."""

    prefill: Replica
    decode: Replica
    http: httpx.AsyncClient

    async def prefill_then_decode(
        self,
        request_id: str,
        prompt: str = "the quick brown fox",
        headers: dict[str, str] | None = None,
        **body: object,
    ):
        """What the P/D router does: prefill with max_tokens 1, then decode with the announced transfer (``headers``
        added to both, e.g. a ``traceparent``)."""
        first = await self.http.post(
            f"{self.prefill.server.url}/v1/completions",
            json={
                "prompt": prompt,
                "max_tokens": 1,
                "temperature": 0,
                "kv_transfer_params": {"do_remote_decode": True},
            },
            headers={"X-Request-Id": request_id, **(headers or {})},
        )
        assert first.status_code == 200, first.text
        params = first.json()["kv_transfer_params"]
        return await self.http.post(
            f"{self.decode.server.url}/v1/completions",
            json={"prompt": prompt, "max_tokens": 12, "temperature": 0, "kv_transfer_params": params, **body},
            headers={"X-Request-Id": request_id, **(headers or {})},
        )

    async def set_fault(self, **fault: object) -> None:
        url = f"{self.prefill.server.url}/admin/kv/fault"
        response = await self.http.put(url, json={"name": "t", **fault}, headers=ADMIN)
        assert response.status_code == 200, response.text


def worker_spec(tmp_path: Path, config: dict, index: int, role: str) -> ReplicaLaunch:
    return ReplicaLaunch(
        name=f"replica-{index}",
        index=index,
        port=0,
        config=parse_stack_config(config).replica_config(index),  # its role's engine, as the plan launches it
        admin_token=ADMIN["Authorization"].removeprefix("Bearer "),
        ledger_path=tmp_path / f"ledger-{secrets.token_hex(4)}.jsonl",
        role=role,
        kv_listen="127.0.0.1:0" if role == "prefill" else None,
    )


def plan_of(config: dict, tmp_path: Path) -> StackPlan:
    """The stack's launch plan for ``config`` (local, no OTLP, no Toxiproxy): what ``drill stack up`` would start."""
    return build_plan(
        parse_stack_config(config),
        name="pd",
        runtime="local",
        state_dir=tmp_path,
        otlp_endpoint=None,
        toxiproxy_url=None,
    )
