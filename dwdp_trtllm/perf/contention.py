"""Many-to-one contention at source copy engines: the paper's random-asynchronous model (pure).

Section 4.3.1 (arXiv 2604.01621): each of G ranks pulls its missing experts from its G-1 peers one
after another, in a random order, asynchronously (ranks are not in step). At a random instant every
rank is therefore pulling from a uniformly random peer, independently of the others. The *contention
degree* C of a pull is the number of pulls being served by its source at that instant (itself
included). For a pull d <- s, each of the other G-2 ranks (neither d nor s) pulls from s with
probability 1/(G-1), so

    C - 1 ~ Binomial(G - 2, 1 / (G - 1)),   C in 1..G-1.

Low-order contention is the most likely, and the mass of C >= 3 grows with G (G=3: none; G=4: 1/9;
G=8: 0.22). `degree_distribution` is that closed form, `enumerate_degree_distribution` the same by brute
force over every joint choice (small G), `simulate_degree_distribution` a seeded Monte-Carlo of the
process itself (random permutations and random phases), which converges to it.

Time: with equal-size pulls served one at a time (the paper's fully serialised approximation) a pull
of degree C takes C*tau, so an unsliced rank-level pull is E[C] times slower. That holds only if the C-1 other pulls
at its source overlap it for its whole length; in the same random-asynchronous model they do not: two pulls of
equal length tau whose starts are independent and uniform overlap, given that they overlap at all, for tau/2 on
average (the offset is uniform in (-tau, tau); overlap tau - |offset|, mean tau/2). With fair sharing of the source,
each contending pull costs half a tau: 1 + (E[C] - 1) / 2 (OVERLAP). Checked against blog 19's published +8% TPS/GPU
from sliced copies at ISL 8K, ISL ratio 0.5, MNT 16K on GB200 (the validation table's blog19-contention-opt row):
the fully serialised E[C] predicts +31% there, the half-overlap +9%. Section 4.3.2: with
time-division-multiplexed slices, two slices are in flight per destination, at two (independent)
sources; the rank-level pull slows only when both meet C >= 3, and then runs at the sum of the two
fair shares 1/C1 + 1/C2 of a link.
"""
from __future__ import annotations

import itertools
from functools import lru_cache
from math import comb

import numpy as np

#: the mean fraction of a pull that a contending pull at the same source overlaps (module docstring)
OVERLAP = 0.5


def _check_group(group: int) -> None:
    if not isinstance(group, (int, np.integer)) or group < 1:
        raise ValueError(f"group size G must be an integer >= 1, got {group!r}")


@lru_cache(maxsize=64)
def degree_distribution(group: int) -> tuple[float, ...]:
    """P(C = c) for c = 1..G-1 (index c-1) under the random-asynchronous model; (1.0,) for G <= 2."""
    _check_group(group)
    if group <= 2:
        return (1.0,)
    n, q = group - 2, 1.0 / (group - 1)
    return tuple(comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(n + 1))


def enumerate_degree_distribution(group: int) -> tuple[float, ...]:
    """The same distribution by brute force over all (G-1)^G joint source choices (G <= 7)."""
    _check_group(group)
    if group > 7:
        raise ValueError(f"enumeration of {group - 1}^{group} states is too large; use degree_distribution")
    if group <= 2:
        return (1.0,)
    counts = np.zeros(group, dtype=np.int64)
    peers = [[s for s in range(group) if s != d] for d in range(group)]
    for choice in itertools.product(*peers):
        load = np.bincount(choice, minlength=group)
        for s in choice:  # every destination's pull has the degree of its source
            counts[load[s]] += 1
    total = float(counts.sum())
    return tuple(float(c) / total for c in counts[1:group])


def simulate_degree_distribution(group: int, trials: int = 200_000, seed: int = 0) -> tuple[float, ...]:
    """Monte-Carlo: each rank pulls its peers in a random order with a random phase; sample instants."""
    _check_group(group)
    if group <= 2:
        return (1.0,)
    rng = np.random.default_rng(seed)
    n = group - 1
    # a random permutation of peer offsets 1..G-1 per (trial, rank), and a random position in it
    offsets_TGN = np.argsort(rng.random((trials, group, n)), axis=-1) + 1
    pos_TG = rng.integers(0, n, size=(trials, group))
    src_TG = (np.arange(group) + np.take_along_axis(offsets_TGN, pos_TG[..., None], -1)[..., 0]) % group
    load_TG = np.stack([(src_TG == s).sum(-1) for s in range(group)], axis=-1)
    degree_TG = np.take_along_axis(load_TG, src_TG, -1)
    hist = np.bincount(degree_TG.ravel(), minlength=group + 1)[1:group]
    return tuple(float(h) / degree_TG.size for h in hist)


def high_order_mass(group: int, min_degree: int = 3) -> float:
    """P(C >= min_degree)."""
    return float(sum(degree_distribution(group)[min_degree - 1:]))


def expected_slowdown(group: int, sliced: bool) -> float:
    """Expected factor on a rank-level pull's time from source contention.

    unsliced: 1 + OVERLAP x (E[C] - 1) (each contending pull at its source overlaps half of it on average).
    sliced:   two slices in flight at independent sources; factor 1 unless both have C >= 3, then
              1 / (1/C1 + 1/C2) (the destination gets the two fair shares).
    """
    p = np.asarray(degree_distribution(group))
    c = np.arange(1, len(p) + 1, dtype=float)
    if not sliced:
        return 1.0 + OVERLAP * (float((p * c).sum()) - 1.0)
    c1, c2 = np.meshgrid(c, c, indexing="ij")
    factor = np.where((c1 >= 3) & (c2 >= 3), 1.0 / (1.0 / c1 + 1.0 / c2), 1.0)
    return float((np.outer(p, p) * factor).sum())
