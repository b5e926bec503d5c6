"""A compact live view of a run for a terminal: one line per event, and the phase clock."""

from __future__ import annotations

from rich.console import Console

from drill.cli.terminal import styled
from drill.runner.listeners import RunListener


class PhaseProgress(RunListener):
    def __init__(self, console: Console) -> None:
        self.console = console

    def run_started(self, run_id: str, run_dir: str) -> None:
        self.console.print(styled(f"run {run_id} → {run_dir}"))

    def phase_started(self, phase: str, planned_s: float | None) -> None:
        length = f" ({planned_s:g}s)" if planned_s else ""
        self.console.print(styled((f"▶ {phase}", "bold"), length))

    def fault_injected(self, fault_id: str, kind: str) -> None:
        self.console.print(styled(f"  ⚡ injected {fault_id} ({kind})"))

    def fault_verified(self, fault_id: str, summary: str) -> None:
        self.console.print(styled(f"  ✓ {fault_id} landed: {summary}"))

    def fault_not_landed(self, fault_id: str, error: str) -> None:
        self.console.print(styled("  ", (f"✗ {fault_id} did not land: {error}", "red")))

    def fault_reverted(self, fault_id: str, ok: bool, error: str | None) -> None:
        if ok:
            self.console.print(styled(f"  ↺ reverted {fault_id}"))
        else:
            self.console.print(styled("  ", (f"revert of {fault_id} FAILED: {error}", "bold red")))

    def stop_condition(self, label: str, observed: str) -> None:
        self.console.print(styled("  ", (f"■ stop condition {label}: {observed}", "yellow")))

    def phase_ended(self, phase: str, elapsed_s: float) -> None:
        self.console.print(styled(f"  {phase} done in {elapsed_s:.1f}s"))
