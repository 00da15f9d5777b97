"""perf/planner.py's `predict` row: each field a user reads pinned to the function that owns its number (phases for
the per-layer parts, iteration_times for the iterations, break_even_tokens, memory_fit, the contention model) or to
a hand computation (tokens per second per GPU, the bytes a rank pulls, the prefetch wait under a stated slowdown),
so that a field dropped, swapped or computed from the wrong end of the range is seen."""
from dataclasses import replace

import numpy as np
import pytest

from dwdp_trtllm.perf import planner as pl
from dwdp_trtllm.perf.bench_work import IterationLoad
from dwdp_trtllm.perf.contention import expected_slowdown
from dwdp_trtllm.perf.flops import core_flops
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig

R1 = PRESETS["deepseek-r1"]
H200 = get_gpu("h200")


def _load(tokens, ranks=8, isl=None):
    """`ranks` ranks of `tokens` each: one request of its tokens, or whole requests of `isl` (a prorated chunk)."""
    tok = np.full((1, ranks), float(tokens))
    isl = isl or tokens
    n = tokens / isl
    core = np.full((1, ranks), n * float(core_flops(R1, isl)))
    return IterationLoad(tok, tok, core, np.full((1, ranks), max(1.0, n)))


@pytest.fixture(scope="module")
def spec():
    return pl.PlanSpec(model=R1, gpu=H200, target="trtllm", mnt=16384)


@pytest.fixture
def row8k(spec):  # per test (not per module): each test that reads the row calls predict itself
    return pl.predict(spec, 8, 0, 2 << 20, 8192, load=_load(8192))


def test_per_layer_parts_are_the_phases(spec, row8k):
    ph = pl.phases(spec, _load(8192), 8, 8192, pl.Skew())
    r = row8k
    assert r.tokens_per_rank == 8192.0 and r.local_experts == 32 and r.target == spec.priced_as == "trtllm"
    assert r.t_attention_us == pytest.approx(float(ph.attention_SR.mean()), rel=1e-12)
    assert r.t_experts_dwdp_us == pytest.approx(float(ph.experts_dwdp_SR.mean()), rel=1e-12)
    assert r.t_other_us == pytest.approx(float(ph.other_SR.mean()), rel=1e-12)
    assert r.t_dense_mlp_us == pytest.approx(float((ph.dense_layer_SR - ph.attention_SR).mean()), rel=1e-12)


def test_throughput_memory_and_bytes_are_the_owners_numbers(spec, row8k):
    r = row8k
    it = pl.iteration_times(spec, _load(8192), 8, 0, 2 << 20, 8192)
    # every rank runs 8192 tokens per iteration: tokens / s per GPU = 8192 / the iteration's seconds
    assert r.t_iteration_dep_us == pytest.approx(float(it.dep_S[0]), rel=1e-9)
    assert r.tps_per_gpu_dep == pytest.approx(8192 / r.t_iteration_dep_us * 1e6, rel=1e-12)
    assert r.tps_per_gpu_dwdp == pytest.approx(8192 / r.t_iteration_dwdp_us * 1e6, rel=1e-12)
    fit = pl.memory_fit(spec, 8, 0, 16384)
    assert r.memory_per_rank_gb == pytest.approx(fit.total / 1e9, rel=1e-12)
    assert r.memory_dep_gb == pytest.approx(fit.dep.total / 1e9, rel=1e-12)
    assert r.memory_parts_gb == {k: round(v, 3) for k, v in fit.parts().items()}
    assert r.memory_dep_parts_gb == {k: round(v / 1e9, 3) for k, v in fit.dep.parts().items()}
    # a rank pulls the 224 experts it lacks, each of DeepSeek-R1's FP8 experts with its scales
    assert r.fetch_gb == pytest.approx(224 * R1.expert_bytes("fp8") / 1e9, rel=1e-12)
    assert r.contention_slowdown == expected_slowdown(8, True)
    unsliced = pl.predict(spec, 8, 0, 0, 8192, load=_load(8192))
    assert unsliced.contention_slowdown == expected_slowdown(8, False) != expected_slowdown(8, True)


def test_a_redundant_rank_pulls_fewer_experts_than_a_source_serves(spec):
    # 3 redundant experts per rank: each rank holds 35 and pulls 221; fetch_gb is what a rank pulls
    r = pl.predict(spec, 8, 3, 2 << 20, 8192, load=_load(8192))
    assert r.fetch_gb == pytest.approx(221 * R1.expert_bytes("fp8") / 1e9, rel=1e-12)


def test_the_range_fields_are_their_ends(row8k):
    r = row8k
    assert r.speedup_low == pytest.approx(r.t_dep_us_range[0] / r.t_dwdp_us_range[0], rel=1e-12)
    assert r.speedup_high == pytest.approx(r.t_dep_us_range[1] / r.t_dwdp_us_range[1], rel=1e-12)
    assert r.speedup_low < r.speedup < r.speedup_high


def test_break_even_is_the_nominal_ends_and_its_range_all_three(spec, row8k):
    be = [pl.break_even_tokens(spec, 8, 0, 2 << 20, 8192, w) for w in ("nominal", "low", "high")]
    assert len(set(be)) == 3
    assert row8k.break_even_tokens == be[0] and row8k.break_even_range == (min(be), max(be))


def test_a_stated_slowdown_sets_the_prefetch_wait_and_whether_the_copy_hides(spec):
    # compute slowed 1.5x beside the copy: the wait is copy - 1.5 x compute when exposed; just above the break-even
    # size the slowed compute hides the copy (which the unslowed compute alone would not)
    s = replace(spec, interference=1.5)
    exposed = pl.predict(s, 8, 0, 2 << 20, 8192, load=_load(1024))
    assert not exposed.prefetch_hidden
    assert exposed.t_prefetch_wait_us == pytest.approx(exposed.t_prefetch_us - 1.5 * exposed.t_compute_us, rel=1e-9)
    be = pl.break_even_tokens(s, 8, 0, 2 << 20, 1024)
    hidden = pl.predict(s, 8, 0, 2 << 20, 1024, load=_load(1.1 * be, isl=1024))
    assert hidden.prefetch_hidden and hidden.t_prefetch_wait_us == 0.0
    assert hidden.t_compute_us < hidden.t_prefetch_us < 1.5 * hidden.t_compute_us


def test_extrapolated_cells_say_how_far_past_the_last_row(spec):
    # 200,000 tokens per rank: DEP's communication log2(200000 / 65536) = 1.61 doublings past DeepEP's rows
    r = pl.predict(spec, 8, 0, 2 << 20, 8192, load=_load(200_000, isl=8192))
    assert r.extrapolated["DEP communication"] == f"{200_000 / 65536:.1f}x the last row" == "3.1x the last row"


def test_a_stated_routing_is_named_and_prices_the_row_and_its_break_even():
    eng = pl.PlanSpec(model=R1, gpu=H200, target="engine", mnt=16384,
                      routing_skew=RoutingSkewConfig(kind="power_law", alpha=1.2))
    r = pl.predict(eng, 8, 0, 2 << 20, 8192, load=_load(8192))
    skew = pl.routing_skew(eng, 8, 8192.0)
    assert r.routing_skew == skew.label == "power_law_1.2 (seed 0)"
    assert r.break_even_tokens == pl.break_even_tokens(eng, 8, 0, 2 << 20, 8192, "nominal", skew)
    assert r.break_even_tokens != pl.break_even_tokens(eng, 8, 0, 2 << 20, 8192, "nominal")


def test_the_range_is_the_groups_a_measurement_from_fewer_peers_widens_it(spec, row8k):
    # a published copy measurement from 3 peers does not cover a rank of 8 pulling from 7: the slow end is wider
    three = replace(spec, gpu=replace(H200, peer_measured_peers=3))
    r = pl.predict(three, 8, 0, 2 << 20, 8192, load=_load(8192))
    assert r.speedup == pytest.approx(row8k.speedup, rel=1e-12)
    assert r.speedup_low < row8k.speedup_low * 0.99


def test_depends_on_names_the_input_that_carries_the_range_across_one(spec):
    # 2048 tokens per rank: DEP wins at every end, nothing to name
    assert pl.predict(spec, 8, 0, 2 << 20, 8192, load=_load(2048)).depends_on == ""
    # 8192 tokens: DEP wins at the nominal (0.84) but DWDP at the better end (1.19); the routing's skewed end alone
    # carries it there: stated (balanced), the range stays below 1 and nothing is named
    r = pl.predict(spec, 8, 0, 2 << 20, 8192, load=_load(8192))
    assert r.speedup < 1 < r.speedup_high and r.depends_on == "routing"
    balanced = replace(spec, stated=(("routing", "none"),))  # as `--routing-skew none` sets it
    b = pl.predict(balanced, 8, 0, 2 << 20, 8192, load=_load(8192))
    assert b.speedup == pytest.approx(r.speedup, rel=1e-12) and b.speedup_high < 1 and b.depends_on == ""
    # 16384 tokens: DWDP wins at the nominal (1.05), DEP at the worse end; what moves it most is the DEP kernels'
    # table extrapolation (past the last row), whatever else is stated
    for s in (spec, replace(spec, dep_comm="deepep", stated=(("routing", "none"), ("DEP communication", "deepep")))):
        r = pl.predict(s, 8, 0, 2 << 20, 8192, load=_load(16384, isl=8192))
        assert r.speedup_low < 1 < r.speedup and r.depends_on == "extrapolated table cells"
