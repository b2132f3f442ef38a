"""Bootstrap confidence intervals of mean success rates (percentile bootstrap, seeded) and the permutation test of two
groups' means (docs/evidence.md §4).

The stratified bootstrap is rliable's (Agarwal et al. 2021), as the paper reports its aggregates: the tasks are
fixed strata, each task's runs (seeds) are resampled with replacement, and the statistic is the mean over tasks of
each task's mean.
"""

from __future__ import annotations

import itertools
import math
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


# Above this many splits of the pooled runs, the permutation test samples splits instead of enumerating them all.
MAX_EXACT_SPLITS = 200_000


def permutation_test(
    first: Sequence[float],
    second: Sequence[float],
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    max_exact: int = MAX_EXACT_SPLITS,
) -> float:
    """
    Two-sided permutation test of equal means (docs/evidence.md §4): under the null hypothesis the runs of both groups
    are exchangeable, so every split of the pooled values into groups of the two sizes is equally likely. The p-value
    is the fraction of splits whose ``|mean(first*) - mean(second*)|`` is at least the observed one: every split is
    enumerated when there are at most ``max_exact``; otherwise ``n_resamples`` random splits are drawn and the p-value
    is ``(1 + count) / (1 + n_resamples)``.

    :param first: The first group's values (e.g. qc_sb3's seeds at one evaluation)
    :param second: The second group's values
    :param n_resamples: Random splits when there are too many to enumerate
    :param seed: Seed of the random splits
    :param max_exact: Largest number of splits that is enumerated
    :return: The p-value
    """
    arrays = [np.asarray(group, dtype=np.float64) for group in (first, second)]
    if any(array.ndim != 1 or array.size == 0 for array in arrays):
        raise ValueError("permutation_test needs two non-empty 1-D sequences of values")
    pooled = np.concatenate(arrays)
    n_first, total = arrays[0].size, pooled.sum()
    observed = abs(arrays[0].mean() - arrays[1].mean())
    # The mean difference of a split is a function of the first group's sum; ties within float rounding count as equal.
    tolerance = 1e-9 * max(1.0, float(np.abs(pooled).max()))
    exact = math.comb(pooled.size, n_first) <= max_exact
    if exact:
        members = np.array(list(itertools.combinations(range(pooled.size), n_first)))
        sums = pooled[members].sum(axis=1)
    else:
        shuffled = np.random.default_rng(seed).permuted(np.tile(pooled, (n_resamples, 1)), axis=1)
        sums = shuffled[:, :n_first].sum(axis=1)
    extreme = np.sum(np.abs(sums / n_first - (total - sums) / (pooled.size - n_first)) >= observed - tolerance)
    return float(extreme / sums.size) if exact else float((1 + extreme) / (1 + n_resamples))


def smallest_permutation_p_value(
    n_first: int, n_second: int, n_resamples: int = N_RESAMPLES, max_exact: int = MAX_EXACT_SPLITS
) -> float:
    """
    The smallest p-value :func:`permutation_test` can return for groups of these sizes (distinct values): only the
    observed split is as extreme, and with equal sizes its mirror too. A test whose smallest p-value exceeds its level
    cannot reject, whatever the data: with three runs a side it is 2 / 20 = 0.1.

    :param n_first: Runs in the first group
    :param n_second: Runs in the second group
    :param n_resamples: As in :func:`permutation_test`
    :param max_exact: As in :func:`permutation_test`
    :return: The smallest attainable p-value
    """
    splits = math.comb(n_first + n_second, n_first)
    if splits > max_exact:
        return 1 / (1 + n_resamples)
    return (2 if n_first == n_second else 1) / splits
