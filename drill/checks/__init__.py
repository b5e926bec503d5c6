"""Checks: what judges a finished run, from its run directory alone, into verdicts.

- :mod:`drill.checks.base` — the check contract (:class:`~drill.checks.base.Check`,
  :class:`~drill.checks.base.Verdict`, :class:`~drill.checks.base.Status`) and
  :class:`~drill.rundir.evidence.RunEvidence`, the run's files as every check reads them.
- :mod:`drill.checks.builtin` — ``slo``, ``error_rate``, ``fault_landed``; :mod:`~drill.checks.failures`
  (``fast_failure``), :mod:`~drill.checks.recovery` (``recovery_time``), :mod:`~drill.checks.replay`
  (``recovery_replay``), :mod:`~drill.checks.retries` (``retry_budget``, ``duplicate_side_effects``),
  :mod:`~drill.checks.spans` (``first_abnormal_span``) — registered through the ``drill.checks`` entry point.
- :mod:`drill.checks.judging` and :mod:`drill.rundir.ledger` — what several checks share: phase windows,
  pool settings, and the replicas' side-effect ledgers.

Checks never import the load driver's child side, and run after the run, never during it.
"""
