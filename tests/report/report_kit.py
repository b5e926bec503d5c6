"""Hand-built run directories for report tests: :class:`~tests.checks.rundir_kit.RunKit` plus what a report reads
beyond the checks — ``verdicts.json``, ``env.json``, the drill's own fields in ``resolved.json`` (name, faults,
report, decision, runbook), the target config, ``failing_samples.jsonl``, ``replay.jsonl`` and a runbook copy.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from drill.api import Status, Verdict
from drill.rundir.evidence import RunEvidence
from tests.checks.rundir_kit import RunKit

__all__ = ["ReportKit"]


class ReportKit(RunKit):
    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.drill: dict[str, Any] = {"name": "kit-drill", "title": "A drill", "target": {"kind": "embedded"}}
        self.target_params: dict[str, Any] = {}
        self.fault_params: list[dict[str, Any]] = []
        self.verdicts: list[Verdict] = []
        self.samples: list[dict[str, Any]] = []
        self.replays: list[dict[str, Any]] = []
        self.runbook_text: str | None = None
        self.env: dict[str, Any] = {"target": {"model": "llama-3-8b", "version": "0.1.0"}}

    def run_bounds(self, start: float, end: float) -> None:
        self.event("run_started", start, run_id="kit-run", pid=1, pid_start=None, drill=self.drill["name"])
        self._finished_at = end

    def embedded(self, replicas: int, tp: int = 1, pp: int = 1, max_model_len: int = 8192) -> None:
        self.target_params = {
            "replicas": replicas,
            "engine": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "max_model_len": max_model_len},
        }

    def planned_fault(
        self,
        name: str,
        kind: str,
        params: dict[str, Any],
        start: str = "1s",
        duration: str | None = "5s",
        **selector: Any,
    ) -> None:
        self.drill.setdefault("faults", []).append(
            {"name": name, "kind": kind, "params": params, "start": start, "duration": duration, "selector": selector}
        )
        self.fault_params.append(params)

    def verdict(self, kind: str, status: Status, message: str = "", name: str | None = None, **fields: Any) -> None:
        self.verdicts.append(Verdict(kind, name or kind, status, message or f"{kind} {status.value}", **fields))

    def sample(
        self,
        request_id: str,
        prompt: str,
        *,
        pool: str = "interactive",
        headers: dict | None = None,
        error: str = "timeout",
        status: int | None = None,
        at: float = 0.0,
    ) -> None:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]}).encode()
        self.samples.append(
            {
                "request_id": request_id,
                "logical_id": request_id.rsplit("-", 1)[0],
                "pool": pool,
                "attempt": 1,
                "trace_id": "0" * 32,
                "idempotency_key": f"key-{request_id}",
                "payload_digest": "d0",
                "method": "POST",
                "endpoint": "/v1/chat/completions",
                "headers": headers or {},
                "body_b64": base64.b64encode(body).decode(),
                "error": error,
                "status": status,
                "intended_ts": self.ts(at),
            }
        )

    def replayed(
        self,
        original: str,
        *,
        set: str = "original",
        status: int = 200,
        error: str | None = None,
        at: float = 0.0,
        repetition: int = 1,
        original_error: str | None = "timeout",
        ttft_ms: float = 50.0,
        e2e_ms: float = 400.0,
        pool: str = "interactive",
    ) -> None:
        self.replays.append(
            {
                "request_id": f"{original}-replay-{repetition}",
                "original_request_id": original,
                "logical_id": original,
                "pool": pool,
                "trace_id": "1" * 32,
                "original_trace_id": "0" * 32,
                "idempotency_key": f"key-{original}",
                "original_error": original_error,
                "original_status": None,
                "payload_digest": "d0",
                "sent_ts": self.ts(at),
                "set": set,
                "repetition": repetition,
                "status": status,
                "error": error,
                "ttft_ms": ttft_ms,
                "e2e_ms": e2e_ms,
            }
        )

    def write(self) -> Path:
        path = super().write()
        finished = getattr(self, "_finished_at", None)
        if finished is not None and not any(e["event"] == "run_finished" for e in self.journal):
            self.event("run_finished", finished, status="completed", exit_code=1)
            path = super().write()
        resolved = json.loads((path / "resolved.json").read_text())
        pools = resolved.get("scenario", {}).get("pools") or []
        resolved.update(
            drill_file="drills/kit-drill.yaml",
            time_scale=1.0,
            drill={**self.drill, **({"slo": {}} if "slo" not in self.drill else {})},
            scenario={"pools": pools},
            target_params=self.target_params,
            fault_params=self.fault_params,
        )
        (path / "resolved.json").write_text(json.dumps(resolved))
        (path / "env.json").write_text(json.dumps(self.env))
        (path / "verdicts.json").write_text(
            json.dumps(
                {"schema": "llm-drill/verdicts/v1", "run_id": "kit-run", "checks": [v.to_json() for v in self.verdicts]}
            )
        )
        if self.samples:
            (path / "failing_samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in self.samples))
        if self.replays:
            (path / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in self.replays))
        if self.runbook_text is not None:
            (path / "runbook.md").write_text(self.runbook_text)
        return path

    def evidence(self) -> RunEvidence:
        return RunEvidence(self.write())
