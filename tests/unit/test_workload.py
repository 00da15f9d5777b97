"""Workload generator: ISL distributions, per-rank imbalance CV, arrivals, seeding."""
import math

import numpy as np
import pytest

from dwdp_trtllm.spec.workload import describe, generate_requests, imbalance_factors
from dwdp_trtllm.spec.config import WorkloadConfig


def isls(q):
    return np.array([r.isl for r in q])


@pytest.mark.parametrize("ranks", [2, 3, 4, 7, 8])
@pytest.mark.parametrize("cv", [0.05, 0.2, 0.5])
def test_imbalance_factors_have_exact_mean_and_cv(ranks, cv):
    f = imbalance_factors(cv, ranks)
    assert f.shape == (ranks,)
    assert f.mean() == pytest.approx(1.0, abs=1e-12)
    assert f.std() / f.mean() == pytest.approx(cv, rel=1e-9)
    assert np.all(np.diff(f) > 0)  # rank 0 lightest, last rank heaviest


def test_imbalance_factors_trivial_cases_and_clipping():
    assert imbalance_factors(0.3, 1).tolist() == [1.0]
    assert imbalance_factors(0.0, 5).tolist() == [1.0] * 5
    assert imbalance_factors(0.99, 64).min() == pytest.approx(0.1)


def test_uniform_ratio_stays_in_bounds_and_has_the_expected_mean():
    w = WorkloadConfig(isl=8192, isl_dist="uniform_ratio", isl_ratio=0.8, requests_per_rank=4000, seed=3)
    (q,) = generate_requests(w, 1)
    x = isls(q)
    assert x.min() >= math.ceil(0.8 * 8192) and x.max() <= 8192
    assert x.min() < 0.8 * 8192 + 50 and x.max() > 8192 - 50  # the whole range is used
    assert x.mean() == pytest.approx(0.9 * 8192, rel=0.01)
    assert x.std() == pytest.approx(0.2 * 8192 / math.sqrt(12), rel=0.05)


def test_normal_has_the_requested_mean_and_cv_and_is_at_least_one():
    w = WorkloadConfig(isl=1000, isl_dist="normal", isl_cv=0.3, requests_per_rank=5000, seed=1)
    (q,) = generate_requests(w, 1)
    x = isls(q)
    assert x.mean() == pytest.approx(1000, rel=0.02)
    assert x.std() / x.mean() == pytest.approx(0.3, rel=0.05)
    w = WorkloadConfig(isl=10, isl_dist="normal", isl_cv=2.0, requests_per_rank=500, seed=1)
    assert isls(generate_requests(w, 1)[0]).min() == 1  # heavy clipping at 1, never below


def test_fixed_is_exact_per_rank_scale():
    w = WorkloadConfig(isl=1000, isl_dist="fixed", imbalance_cv=0.2, requests_per_rank=5)
    qs = generate_requests(w, 4)
    f = imbalance_factors(0.2, 4)
    for r, q in enumerate(qs):
        assert isls(q).tolist() == [round(1000 * f[r])] * 5


@pytest.mark.parametrize("dist", ["uniform_ratio", "normal"])
@pytest.mark.parametrize("cv", [0.1, 0.2])
def test_rank_means_have_the_requested_imbalance_cv(dist, cv):
    w = WorkloadConfig(isl=4096, isl_dist=dist, isl_cv=0.2, imbalance_cv=cv, requests_per_rank=3000, seed=11)
    qs = generate_requests(w, 4)
    d = describe(qs)
    assert d["rank_mean_cv"] == pytest.approx(cv, rel=0.05)
    assert d["mean_isl"] == sorted(d["mean_isl"])  # heavier ranks last, as constructed


def test_arrivals_offline_and_poisson():
    w = WorkloadConfig(requests_per_rank=50)
    assert all(r.arrival_s == 0.0 for q in generate_requests(w, 2) for r in q)
    w = WorkloadConfig(arrival="poisson", rate=20.0, requests_per_rank=4000, seed=5)
    (q,) = generate_requests(w, 1)
    t = np.array([r.arrival_s for r in q])
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert np.all(gaps > 0)
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.08)  # exponential: CV 1


def test_ids_ranks_and_seeds():
    w = WorkloadConfig(isl=512, isl_dist="normal", isl_cv=0.5, arrival="poisson", requests_per_rank=16, seed=7)
    a, b = generate_requests(w, 3), generate_requests(w, 3)
    assert a == b  # reproducible
    ids = [r.request_id for q in a for r in q]
    assert len(set(ids)) == len(ids) == 48
    assert [{r.rank for r in q} for q in a] == [{0}, {1}, {2}]
    c = generate_requests(WorkloadConfig(isl=512, isl_dist="normal", isl_cv=0.5, arrival="poisson",
                                         requests_per_rank=16, seed=8), 3)
    assert [isls(q).tolist() for q in a] != [isls(q).tolist() for q in c]
    # without imbalance a rank's draws do not depend on how many ranks there are
    assert generate_requests(w, 5)[1] == a[1]
