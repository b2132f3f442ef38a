"""Bootstrap confidence intervals of mean success rates (percentile bootstrap, seeded; docs/evidence.md §4).

The stratified bootstrap is rliable's (Agarwal et al. 2021), as the paper reports its aggregates: the tasks are
fixed strata, each task's runs (seeds) are resampled with replacement, and the statistic is the mean over tasks of
each task's mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

N_RESAMPLES = 10_000
CONFIDENCE = 0.95


def stratified_bootstrap_ci(
    groups: Sequence[Sequence[float]],
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float, float]:
    """
    The mean over groups of the groups' means, with a percentile bootstrap interval that resamples each group's values
    with replacement (independently per group).

    :param groups: One sequence of values per stratum (e.g. per task: its seeds' success rates); none may be empty
    :param n_resamples: Bootstrap resamples
    :param confidence: Coverage of the interval
    :param seed: Seed of the resampling
    :return: (point estimate, lower bound, upper bound)
    """
    arrays = [np.asarray(group, dtype=np.float64) for group in groups]
    if not arrays or any(array.ndim != 1 or array.size == 0 for array in arrays):
        raise ValueError("stratified_bootstrap_ci needs at least one group, each a non-empty 1-D sequence of values")
    rng = np.random.default_rng(seed)
    point = float(np.mean([array.mean() for array in arrays]))
    resampled = np.zeros(n_resamples)
    for array in arrays:
        indices = rng.integers(0, array.size, size=(n_resamples, array.size))
        resampled += array[indices].mean(axis=1)
    resampled /= len(arrays)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return point, float(low), float(high)


def bootstrap_mean_ci(
    values: Sequence[float], n_resamples: int = N_RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float, float, float]:
    """
    The mean of ``values`` with a percentile bootstrap interval.

    :param values: The values (e.g. one task's seeds' success rates at one step)
    :param n_resamples: Bootstrap resamples
    :param confidence: Coverage of the interval
    :param seed: Seed of the resampling
    :return: (mean, lower bound, upper bound)
    """
    return stratified_bootstrap_ci([values], n_resamples, confidence, seed)


def bootstrap_difference_ci(
    first: Sequence[float],
    second: Sequence[float],
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float, float]:
    """
    The difference of two groups' means (``first`` minus ``second``), with a percentile bootstrap interval that resamples
    each group's values with replacement, independently (e.g. two implementations' seeds at one evaluation).

    :param first: The first group's values
    :param second: The second group's values
    :param n_resamples: Bootstrap resamples
    :param confidence: Coverage of the interval
    :param seed: Seed of the resampling
    :return: (difference of the means, lower bound, upper bound)
    """
    arrays = [np.asarray(group, dtype=np.float64) for group in (first, second)]
    if any(array.ndim != 1 or array.size == 0 for array in arrays):
        raise ValueError("bootstrap_difference_ci needs two non-empty 1-D sequences of values")
    rng = np.random.default_rng(seed)
    means = [array[rng.integers(0, array.size, size=(n_resamples, array.size))].mean(axis=1) for array in arrays]
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means[0] - means[1], [tail, 100 - tail])
    return float(arrays[0].mean() - arrays[1].mean()), float(low), float(high)
