"""Properties of expert placement (derived and upstream) and source choice, over many (E, G, redundancy)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.placement import compact_ranges, group_of, make_placement

SETTINGS = settings(max_examples=80, deadline=None)
EXPERTS = st.one_of(st.sampled_from([1, 2, 3, 7, 8, 9, 31, 64, 127, 128, 255, 256]), st.integers(1, 300))
POLICY = st.sampled_from(["balanced", "lowest_rank"])


@st.composite
def derived(draw):
    e = draw(EXPERTS)
    g = draw(st.integers(1, min(8, e)))
    red = draw(st.integers(0, e - -(-e // g)))
    return DwdpConfig(dwdp_size=g, redundant_experts=red, source_policy=draw(POLICY)), e


@st.composite
def upstream(draw):
    g = draw(st.integers(1, 8))
    stride = draw(st.integers(1, 40))
    size = draw(st.integers(stride, stride + 40))
    return DwdpConfig(dwdp_size=g, num_experts_per_worker=size, num_prefetch_experts=stride,
                      source_policy=draw(POLICY)), (g - 1) * stride + size


def check_invariants(cfg: DwdpConfig, e: int) -> None:
    cfg.validate_for(e)
    p = make_placement(cfg, e)
    assert p.num_experts == e and p.dwdp_size == cfg.dwdp_size and len(p.local_experts) == cfg.dwdp_size
    assert all(len(o) >= 1 for o in p.owners), "an expert has no owner"
    for r in range(cfg.dwdp_size):
        local, fetched = set(p.local_experts[r]), p.fetch_experts(r)
        assert list(p.local_experts[r]) == sorted(local)
        assert list(fetched) == sorted(set(fetched)) and len(fetched) == len(set(fetched))
        assert not local & set(fetched)
        assert local | set(fetched) == set(range(e))
        for ex, src in p.sources[r]:
            assert src != r and ex in p.local_experts[src], (r, ex, src)
        loc = p.expert_location(r)
        for ex, (kind, idx) in enumerate(loc):
            assert (p.local_experts[r] if kind == 0 else fetched)[idx] == ex
    assert sum(p.source_load()) == sum(len(p.fetch_experts(r)) for r in range(cfg.dwdp_size))


@SETTINGS
@given(derived())
def test_derived_placement_invariants(case):
    check_invariants(*case)


@SETTINGS
@given(upstream())
def test_upstream_placement_invariants_and_ranges(case):
    cfg, e = case
    check_invariants(cfg, e)
    p = make_placement(cfg, e)
    s, n = cfg.num_prefetch_experts, cfg.num_experts_per_worker
    for r in range(cfg.dwdp_size):
        assert p.local_experts[r] == tuple(range(r * s, r * s + n))


@SETTINGS
@given(st.sampled_from([3, 5, 6, 7]), st.integers(0, 64), POLICY)
def test_deepseek_256_experts_odd_groups(g, red, policy):
    check_invariants(DwdpConfig(dwdp_size=g, redundant_experts=red, source_policy=policy), 256)


@SETTINGS
@given(derived(), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_routed_topk_ids_resolve_to_the_right_expert(case, top_k, seed):
    """Every expert a token routes to is found locally or in the prefetch slot, at the right index."""
    cfg, e = case
    p = make_placement(cfg, e)
    ids_TK = np.random.default_rng(seed).integers(0, e, size=(64, min(top_k, e)))
    for r in range(cfg.dwdp_size):
        loc = p.expert_location(r)
        fetched = p.fetch_experts(r)
        for ex in ids_TK.ravel().tolist():
            kind, idx = loc[ex]
            assert (p.local_experts[r] if kind == 0 else fetched)[idx] == ex


@SETTINGS
@given(derived())
def test_balanced_never_worse_than_lowest_rank(case):
    cfg, e = case
    lo = make_placement(DwdpConfig(dwdp_size=cfg.dwdp_size, redundant_experts=cfg.redundant_experts,
                                   source_policy="lowest_rank"), e)
    bal = make_placement(DwdpConfig(dwdp_size=cfg.dwdp_size, redundant_experts=cfg.redundant_experts,
                                    source_policy="balanced"), e)
    assert bal.local_experts == lo.local_experts
    assert bal.max_source_load() <= lo.max_source_load()
    assert sum(bal.source_load()) == sum(lo.source_load())
    # lowest_rank always takes the first owner
    for r in range(cfg.dwdp_size):
        assert all(s == lo.owners[ex][0] for ex, s in lo.sources[r])


@pytest.mark.parametrize("red, lowest, balanced", [(8, 172, 163), (32, 172, 139)])
def test_balanced_strictly_lower_on_deepseek_r1_g3(red, lowest, balanced):
    lo = make_placement(DwdpConfig(dwdp_size=3, redundant_experts=red, source_policy="lowest_rank"), 256)
    bal = make_placement(DwdpConfig(dwdp_size=3, redundant_experts=red, source_policy="balanced"), 256)
    assert lo.max_source_load() == lowest
    assert bal.max_source_load() == balanced < lowest
    # total pulls = 3 * (256 - held); balanced reaches the ceiling of the average
    total = sum(bal.source_load())
    assert bal.max_source_load() == -(-total // 3)


def test_balanced_reaches_even_load_on_r1_g8_red32():
    """Each rank holds 32 + 32 experts and fetches 192; an even split serves 192 per source."""
    bal = make_placement(DwdpConfig(dwdp_size=8, redundant_experts=32, source_policy="balanced"), 256)
    lo = make_placement(DwdpConfig(dwdp_size=8, redundant_experts=32, source_policy="lowest_rank"), 256)
    assert bal.source_load() == [192] * 8
    assert lo.max_source_load() == 384


def test_derived_ranges_without_redundancy_are_contiguous_blocks():
    p = make_placement(DwdpConfig(dwdp_size=3), 256)
    assert [compact_ranges(x) for x in p.local_experts] == ["0-85", "86-170", "171-255"]
    p = make_placement(DwdpConfig(dwdp_size=3, redundant_experts=8), 256)
    assert [compact_ranges(x) for x in p.local_experts] == ["0-93", "86-178", "0-7,171-255"]


def test_compact_ranges_and_group_of():
    assert compact_ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert compact_ranges([]) == "-"
    assert compact_ranges([4]) == "4"
    assert group_of(5, 4) == (1, 1)


def test_make_placement_rejects_zero_experts():
    with pytest.raises(ValueError, match="num_experts"):
        make_placement(DwdpConfig(), 0)


@SETTINGS
@given(derived())
def test_balanced_max_load_is_optimal(case):
    """Certificate: the sources R reachable from the hottest one (by re-routing pulls) serve pulls that
    can only be served inside R, and there are more of them than |R| * (max - 1): no assignment does better."""
    cfg, e = case
    p = make_placement(DwdpConfig(dwdp_size=cfg.dwdp_size, redundant_experts=cfg.redundant_experts,
                                  source_policy="balanced"), e)
    load = p.source_load()
    top = max(load, default=0)
    if top == 0:  # nothing is pulled (G=1 or every rank holds every expert): trivially optimal
        assert all(not p.fetch_experts(r) for r in range(p.dwdp_size))
        return
    hot = load.index(top)
    reach, stack = {hot}, [hot]
    while stack:
        s = stack.pop()
        for dst in range(p.dwdp_size):
            for ex, src in p.sources[dst]:
                if src == s:
                    for o in p.owners[ex]:
                        if o != dst and o not in reach:
                            reach.add(o)
                            stack.append(o)
    assert sum(load[r] for r in reach) > len(reach) * (top - 1)
