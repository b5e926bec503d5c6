"""Token-length sampling for scenario pools (``input_tokens`` / ``output_tokens``).

Called while the schedule is built (:mod:`drill.load.schedule`), once per
planned request, with that pool's seeded :class:`random.Random`, so the same
seed gives the same lengths. Production lengths are multimodal, so the
faithful choice is an empirical quantile table sampled by inverse CDF with
linear interpolation in log space (``docs/serving-facts.md`` §7.1, §7.5);
lognormal, gamma, uniform and fixed are there for synthetic shapes.
"""

from __future__ import annotations

import math
import random

from drill.spec.scenario import DistributionKind, LengthDistribution

__all__ = ["sample_length", "empirical_quantile"]


def sample_length(dist: LengthDistribution, rng: random.Random, trace_value: int | None = None) -> int:
    """One token count drawn from ``dist``, rounded and clipped to ``[dist.min, dist.max]``.

    ``trace_value`` is the trace row's count; it is used by ``dist: trace`` and
    required there. Raises ValueError for ``dist: trace`` without a row value.
    """
    return _clip(dist, _raw(dist, rng, trace_value))


def empirical_quantile(quantiles: list[float], u: float) -> float:
    """Inverse CDF of an equally spaced quantile table (q0..q100) at ``u`` in [0, 1).

    Interpolates linearly in log space between neighbouring quantiles, which keeps
    the table's modes and long tail (§7.5).
    """
    position = u * (len(quantiles) - 1)
    low = min(int(position), len(quantiles) - 2)
    frac = position - low
    a, b = math.log(quantiles[low]), math.log(quantiles[low + 1])
    return math.exp(a + (b - a) * frac)


def _raw(dist: LengthDistribution, rng: random.Random, trace_value: int | None) -> float:
    kind = dist.dist
    # LengthDistribution's validator guarantees each kind's parameters (the asserts narrow the Optional fields)
    if kind is DistributionKind.FIXED:
        assert dist.value is not None
        return float(dist.value)
    if kind is DistributionKind.UNIFORM:
        return float(rng.randint(dist.min, dist.max))
    if kind is DistributionKind.LOGNORMAL:
        assert dist.mu is not None and dist.sigma is not None
        return math.exp(rng.gauss(dist.mu, dist.sigma))
    if kind is DistributionKind.GAMMA:
        assert dist.shape is not None and dist.scale is not None
        return rng.gammavariate(dist.shape, dist.scale)
    if kind is DistributionKind.EMPIRICAL:
        assert dist.quantiles is not None
        return empirical_quantile(dist.quantiles, rng.random())
    if trace_value is None:
        raise ValueError("a 'trace' length distribution needs a trace arrival process with use_lengths: true")
    return float(trace_value)


def _clip(dist: LengthDistribution, value: float) -> int:
    return max(dist.min, min(dist.max, max(1, int(round(value)))))
