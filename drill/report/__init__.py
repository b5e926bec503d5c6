"""Reports: what a person reads about a finished run, rendered from its run directory.

Empty so far: ``verdicts.json`` (written by :mod:`drill.engine.verdicts`) and ``drill judge`` are how a run's
outcome is read today; the rendered reports come in a later change.
"""
