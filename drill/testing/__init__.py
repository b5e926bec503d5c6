"""Contract kits for plugin authors: what a fault and what a check must satisfy (every built-in one passes them).

- :mod:`drill.testing.fault_contract`: a fault under live traffic against a real target — inject, verify, the
  effect seen and gone after revert, idempotent reverts, a clean revert after a failed inject, and a revert
  from the journal record alone (:func:`run_fault_contract`).
- :mod:`drill.testing.check_contract`: a check on run directories alone — registered, its params a contract,
  thin evidence INCONCLUSIVE, verdicts that serialise, a pure function of the run, the statuses its author
  expects (:func:`run_check_contract`).

Import from here: ``from drill.testing import FaultCase, run_fault_contract, CheckCase, run_check_contract``.
A broken clause raises :class:`ContractViolation` (an AssertionError) naming it.
"""

from __future__ import annotations

from drill.testing.check_contract import (
    CheckCase,
    CheckContractReport,
    check_params_contract,
    check_pure,
    check_registered,
    check_statuses,
    check_thin_evidence,
    check_verdict_serialises,
    run_check_contract,
    write_minimal_run,
)
from drill.testing.fault_contract import (
    ContractReport,
    ContractViolation,
    Effect,
    FaultCase,
    Traffic,
    TrafficSample,
    check_inject_verify_revert,
    check_revert_after_failed_inject,
    check_revert_from_journal,
    check_revert_without_inject,
    errors_above,
    latency_above,
    latency_or_errors,
    run_fault_contract,
    within_baseline,
)

__all__ = [
    "CheckCase",
    "CheckContractReport",
    "ContractReport",
    "ContractViolation",
    "Effect",
    "FaultCase",
    "Traffic",
    "TrafficSample",
    "check_inject_verify_revert",
    "check_params_contract",
    "check_pure",
    "check_registered",
    "check_revert_after_failed_inject",
    "check_revert_from_journal",
    "check_revert_without_inject",
    "check_statuses",
    "check_thin_evidence",
    "check_verdict_serialises",
    "errors_above",
    "latency_above",
    "latency_or_errors",
    "run_check_contract",
    "run_fault_contract",
    "write_minimal_run",
    "within_baseline",
]
