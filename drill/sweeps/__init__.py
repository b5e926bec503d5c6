"""Sweeps: one drill run once per value of ONE variable, with the same seed and request set.

A drill with a ``sweep:`` block (:class:`drill.spec.models.SweepSpec`) names a variable by its key path (as
``--set`` does) and 2-8 values. ``drill run`` then runs the drill once per value, each variant the drill as
written with exactly that one assignment (:mod:`drill.sweeps.resolve`), into its own run directory under the
sweep's (``variants/<label>-<value>/<drill>/<run id>/``, through :func:`drill.runner.variants.run_variant`), and
judges the whole (:mod:`drill.sweeps.sweeper`):

- :mod:`drill.sweeps.resolve` loads the variants (a fault a variant's target cannot take is left out only when the
  sweep says ``skip_unsupported_faults``, and the sweep says so) and splits the checks: a
  :class:`~drill.sweeps.resolve.SweepCheck` judges the sweep, every other check judges each variant;
- :mod:`drill.sweeps.scaling` measures each variant in its two link states, healthy (the baseline phase) and
  degraded (the fault window), and sets the figures beside the embedded stack's cost model;
- :mod:`drill.sweeps.tp_scaling` is the ``tp_scaling`` check over those figures;
- :mod:`drill.sweeps.pd_figures` measures a sweep of prefill:decode splits (``topology.ratio``) beside the cost
  model's load of each side (``pd_ratio.json``), and :mod:`drill.sweeps.pd_ratio` is the ``pd_ratio`` check over it;
- :mod:`drill.sweeps.scaling_chart` and :mod:`drill.sweeps.scaling_report` render ``scaling.md``/``scaling.html``
  (templates in ``drill/report/templates/scaling.*``) beside ``scaling.json``.
"""
