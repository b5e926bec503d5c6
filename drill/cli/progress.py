"""A compact live view of a run for a terminal: one line per event, and the phase clock."""

from __future__ import annotations

from rich.console import Console

from drill.engine.listeners import RunListener


class PhaseProgress(RunListener):
    def __init__(self, console: Console) -> None:
        self.console = console

    def run_started(self, run_id: str, run_dir: str) -> None:
        self.console.print(f"run {run_id} → {run_dir}")

    def phase_started(self, phase: str, planned_s: float | None) -> None:
        length = f" ({planned_s:g}s)" if planned_s else ""
        self.console.print(f"[bold]▶ {phase}[/]{length}")

    def fault_injected(self, fault_id: str, kind: str) -> None:
        self.console.print(f"  ⚡ injected {fault_id} ({kind})")

    def fault_verified(self, fault_id: str, summary: str) -> None:
        self.console.print(f"  ✓ {fault_id} landed: {summary}")

    def fault_not_landed(self, fault_id: str, error: str) -> None:
        self.console.print(f"  [red]✗ {fault_id} did not land: {error}[/]")

    def fault_reverted(self, fault_id: str, ok: bool, error: str | None) -> None:
        self.console.print(f"  ↺ reverted {fault_id}" if ok else f"  [bold red]revert of {fault_id} FAILED: {error}[/]")

    def stop_condition(self, label: str, observed: str) -> None:
        self.console.print(f"  [yellow]■ stop condition {label}: {observed}[/]")

    def phase_ended(self, phase: str, elapsed_s: float) -> None:
        self.console.print(f"  {phase} done in {elapsed_s:.1f}s")
