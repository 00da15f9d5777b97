"""Contention model of the paper's section 4.3 against brute force."""
import itertools

import numpy as np
import pytest

from dwdp_trtllm.perf.contention import (degree_distribution, enumerate_degree_distribution, expected_slowdown,
                                         high_order_mass, simulate_degree_distribution)


@pytest.mark.parametrize("G", range(1, 11))
def test_probabilities_sum_to_one(G):
    p = degree_distribution(G)
    assert sum(p) == pytest.approx(1.0) and all(x >= 0 for x in p)
    assert len(p) == max(1, G - 1)


def test_g3_matches_a_hand_written_brute_force():
    # every rank picks one of its 2 peers: 2^3 joint choices, count each pull's source load
    counts = {1: 0, 2: 0}
    for choice in itertools.product([1, 2], [0, 2], [0, 1]):
        for s in choice:
            counts[choice.count(s)] += 1
    total = sum(counts.values())
    brute = (counts[1] / total, counts[2] / total)
    assert brute == (0.5, 0.5)
    assert degree_distribution(3) == pytest.approx(brute)


@pytest.mark.parametrize("G", [3, 4, 5, 6])
def test_closed_form_matches_enumeration(G):
    assert degree_distribution(G) == pytest.approx(enumerate_degree_distribution(G), abs=1e-12)


def test_monte_carlo_of_random_orders_converges_to_the_model():
    sim = simulate_degree_distribution(6, trials=100_000, seed=1)
    assert np.allclose(sim, degree_distribution(6), atol=0.01)


def test_low_order_most_likely_and_high_order_grows_with_g():
    for G in range(3, 12):
        p = degree_distribution(G)
        assert max(p) == pytest.approx(max(p[0], p[1]))
    masses = [high_order_mass(G) for G in range(3, 12)]
    assert masses[0] == 0 and all(b > a for a, b in zip(masses, masses[1:]))


def test_expected_slowdown():
    assert expected_slowdown(2, False) == expected_slowdown(2, True) == 1.0
    assert expected_slowdown(3, False) == pytest.approx(1.25)  # 1 + (E[C] - 1) / 2, C in {1, 2} equally likely
    assert expected_slowdown(3, True) == 1.0  # never C >= 3: two slices in flight are never slowed
    assert expected_slowdown(4, True) == pytest.approx(1 + (1 / 9) ** 2 * 0.5)  # both C=3: 1/(1/3+1/3) = 1.5
    for G in range(3, 10):
        assert 1.0 <= expected_slowdown(G, True) < expected_slowdown(G, False)
        assert expected_slowdown(G + 1, False) > expected_slowdown(G, False)
    with pytest.raises(ValueError, match="group size"):
        degree_distribution(0)
