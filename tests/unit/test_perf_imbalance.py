"""Imbalance: DEP waits for the slowest rank every layer, DWDP ranks run free."""
import numpy as np
import pytest

from dwdp_trtllm.perf.imbalance import Workload, compare, per_rank_load, sample_requests


def test_two_ranks_by_hand():
    # 1000 and 3000 tokens at 1 us per token: DEP layer = 3000 us (the max), DWDP = each its own
    tokens = np.array([[1000.0, 3000.0]])
    res = compare(tokens, tokens * 1.0, tokens * 1.0)
    # DEP: 4000 tokens / 3000 us; DWDP: 1000/1000 + 3000/3000 = 2 tokens/us
    assert res.t_dep_us == pytest.approx(3000.0)
    assert res.t_dwdp_us == pytest.approx(2000.0)
    assert res.speedup == pytest.approx(1.5)
    assert res.sync_overhead == pytest.approx(2000 / (2 * 3000))  # rank 0 waits 2000 of 2 x 3000 rank-us
    assert res.t_sync_us == pytest.approx(1000.0)  # mean wait over the two ranks


def test_shared_lockstep_part_adds_to_dep_only():
    tokens = np.array([[1000.0, 3000.0]])
    res = compare(tokens, tokens, tokens, dep_shared_us_S=500.0)
    assert res.t_dep_us == pytest.approx(3500.0)
    assert res.t_dwdp_us == pytest.approx(2000.0)


def test_balanced_ranks_have_no_sync_cost():
    tokens = np.full((3, 4), 2048.0)
    res = compare(tokens, tokens * 0.5, tokens * 0.5)
    assert res.sync_overhead == 0 and res.speedup == pytest.approx(1.0)


def test_fixed_batch_is_deterministic():
    isl, tok = sample_requests(Workload(isl=8192, batch=2), 4)
    assert isl.shape == (1, 4, 2) and np.all(isl == 8192) and np.all(tok == isl)


def test_uniform_ratio_bounds_and_seed():
    wl = Workload(isl=1000, isl_dist="uniform_ratio", isl_ratio=0.5, batch=8, samples=64, seed=3)
    a, _ = sample_requests(wl, 4)
    b, _ = sample_requests(wl, 4)
    assert np.array_equal(a, b)
    assert a.min() >= 500 and a.max() <= 1000 and a.std() > 50
    c, _ = sample_requests(Workload(isl=1000, isl_dist="uniform_ratio", isl_ratio=0.5, batch=8, samples=64, seed=4), 4)
    assert not np.array_equal(a, c)


def test_imbalance_cv_of_rank_means():
    wl = Workload(isl=4096, imbalance_cv=0.2, batch=1, samples=4000, seed=1)
    isl, _ = sample_requests(wl, 8)
    cv = isl[..., 0].std() / isl[..., 0].mean()
    assert cv == pytest.approx(0.2, abs=0.01)


def test_mnt_packing_fills_whole_requests_up_to_mnt():
    wl = Workload(isl=8192, isl_dist="uniform_ratio", isl_ratio=0.8, batch=None, mnt=32768, samples=200, seed=0)
    isl, tok = sample_requests(wl, 4)
    per_rank = tok.sum(-1)
    assert np.all(per_rank <= 32768)
    assert np.all(per_rank > 32768 - 8192)  # the next whole request would not have fitted
    assert per_rank.std() > 0  # packing itself makes ranks unequal


def test_long_request_is_chunked_and_its_cost_prorated():
    wl = Workload(isl=40000, batch=None, mnt=16384)
    isl, tok = sample_requests(wl, 2)
    assert tok.sum(-1).tolist() == [[16384.0, 16384.0]]
    tokens, cost = per_rank_load(isl, tok, lambda x: x.astype(float) ** 2)
    assert cost[0, 0] == pytest.approx(40000.0**2 * 16384 / 40000)


def test_bad_workload_names_the_field():
    with pytest.raises(ValueError, match="imbalance_cv"):
        Workload(isl=10, imbalance_cv=1.5)
    with pytest.raises(ValueError, match="batch"):
        Workload(isl=10, batch=None, mnt=None)


def test_plan_refuses_the_draws_sample_requests_would_make():
    """`dwdp plan` sizes the Monte-Carlo draws with the slots sample_requests starts from (one formula)."""
    import argparse

    from dwdp_trtllm.commands.plan import MAX_DRAWS, _check_draws
    from dwdp_trtllm.perf.imbalance import requests_per_iteration
    from dwdp_trtllm.spec.schema import ConfigError

    K = requests_per_iteration(16384, 1024, "uniform_ratio", 0.8)
    assert K == 42 and requests_per_iteration(16384, 1024, "fixed", 1.0) == 34  # ceil(2 mnt / shortest ISL) + 2
    isl_SRK, _ = sample_requests(Workload(isl=1024, isl_dist="uniform_ratio", mnt=16384, samples=4), 2)
    assert isl_SRK.shape[-1] >= K
    args = argparse.Namespace(imbalance_cv=0.1, isl_dist="uniform_ratio", isl_ratio=0.8, samples=MAX_DRAWS // (8 * K),
                              mnt=16384, batch=None)
    _check_draws(args, (8,), (1024,))  # samples x G x K just below the limit
    with pytest.raises(ConfigError, match="--mnt"):
        _check_draws(argparse.Namespace(**{**vars(args), "samples": args.samples + 1}), (8,), (1024,))
