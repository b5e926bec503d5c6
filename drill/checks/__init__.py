"""Checks: what judges a finished run, from its run directory alone, into verdicts.

- the check contract (:class:`~drill.api.Check`, :class:`~drill.api.Verdict`, :class:`~drill.api.Status`) is the
  plugin SDK's, :mod:`drill.api.check_sdk`: built-in checks import it from :mod:`drill.api`, as third-party ones do;
  :class:`~drill.rundir.evidence.RunEvidence` is the run's files as every check reads them.
- :mod:`drill.checks.builtin` — ``slo``, ``error_rate``, ``fault_landed``; :mod:`~drill.checks.failures`
  (``fast_failure``), :mod:`~drill.checks.recovery` (``recovery_time``), :mod:`~drill.checks.replay`
  (``recovery_replay``), :mod:`~drill.checks.retries` (``retry_budget``, ``duplicate_side_effects``),
  :mod:`~drill.checks.spans` (``first_abnormal_span``) — registered through the ``drill.checks`` entry point.
- :mod:`drill.checks.judging` and :mod:`drill.rundir.ledger` — what several checks share: phase windows,
  pool settings, and the replicas' side-effect ledgers.

Checks never import the load driver's child side, and run after the run, never during it.
"""
