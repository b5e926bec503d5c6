"""``drill compare``: a baseline and a candidate that differ in exactly one variable, run on the same request set.

:mod:`~drill.compare.diff` diffs the two resolved drills and refuses anything but one difference;
:mod:`~drill.compare.comparison` runs both (sequentially, with :func:`drill.runner.variants.run_variant`) into
one comparison folder; :mod:`~drill.compare.figures` reads each run's verdicts and headline figures from its run
directory; :mod:`~drill.compare.requestset` checks both runs sent the same request bodies;
:mod:`~drill.compare.acceptance` judges the drill's pre-registered acceptance; :mod:`~drill.compare.documents`
writes the decision record, ``comparison.json`` and the comparison report.
"""
