"""``drill capacity``: the highest arrival rate at which every pool's SLO holds, measured, never divided.

A capacity run sweeps the arrival rate of a scenario open loop (its own length distributions, pools and arrival
process, rescaled with :func:`drill.load.schedule.with_total_rate`) against a target, one *rate point* at a time,
and finds the *knee*: a coarse sweep brackets it, bisection narrows it, and repetitions with other seeds bound the
noise. The parts, decide/apply split:

- :mod:`drill.capacity.planner` decides: given the points measured so far, the next rate (pure, step-testable);
- :mod:`drill.capacity.attainment` judges one point's records against each pool's SLO (pure);
- :mod:`drill.capacity.point` measures one rate point with the load driver into its own directory;
- :mod:`drill.capacity.sweep` applies: starts the OTLP receiver and the target, runs the planner's points, the
  single-request naive estimate and the N-1 sweep, and writes ``capacity.json``;
- :mod:`drill.capacity.ttft_split` splits the stack's spans per point (TTFT = queueing + prefill);
- :mod:`drill.capacity.reporting` renders ``capacity.md`` and ``capacity.html``.

Nothing is imported here eagerly. ``docs/capacity.md`` documents the definitions and the statistics.
"""
