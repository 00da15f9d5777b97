"""perf/planner.py's `phases` and `iteration_times` on the inputs test_pinned_planner.py does not vary, each pinned to a
hand computation, a shipped table's own row, or another public function of the planner that computes the same fact by
another route (break_even_tokens): a measured all-to-all bandwidth is neither ranged nor marked as extrapolated, and is
scaled by the routing's all-to-all factor; a group DeepEP does not run gets all-gather + reduce-scatter; the engine
target reads the measured attention time at the plan's ISL and prices the DEP path asked; DeepEP + DeepGEMM's expert
skew per sample; this project's expert op under gemm multi_buffer; the prefetch-bound flag against the break-even
size; a serving rank's KV transfer on its links."""
import math
from dataclasses import replace

import numpy as np
import pytest

from dwdp_trtllm.perf import planner as pl
from dwdp_trtllm.perf.bench_work import IterationLoad
from dwdp_trtllm.perf.calibration import Calibration
from dwdp_trtllm.perf.flops import core_flops
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.spec.models import PRESETS

R1 = PRESETS["deepseek-r1"]
H200 = get_gpu("h200")


def _load(rows, isl=None):
    """Per (sample, rank) tokens; each rank's tokens are whole requests of `isl` (None: one request of its tokens)."""
    tok = np.array(rows, float)
    if isl is None:
        core = np.array([[float(core_flops(R1, t)) if t else 0.0 for t in r] for r in rows])
        return IterationLoad(tok, tok, core, (tok > 0).astype(float))
    n = tok / isl
    return IterationLoad(tok, tok, n * float(core_flops(R1, isl)), np.where(tok > 0, np.maximum(1.0, n), 0.0))


@pytest.fixture(scope="module")
def spec():
    return pl.PlanSpec(model=R1, gpu=H200, target="trtllm", mnt=16384)


def _deepep_measured_us(tokens, group, gbps):
    """DeepEP at a measured bandwidth: a token sent once per remote rank holding one of its 8 experts (256 / G per
    rank), FP8 dispatch + BF16 combine of 7168 values, plus the H200's 20 us."""
    remote = (group - 1) * (1 - math.comb(256 - 256 // group, 8) / math.comb(256, 8))
    return tokens * remote * 7168 * 3 / (gbps * 1e9) * 1e6 + 20.0


def test_a_measured_all_to_all_bandwidth_is_scaled_by_the_routings_all_to_all_factor(spec):
    cal = replace(spec, calibration=Calibration(all_to_all_gbps=100.0))
    load = _load([[8192] * 8])
    assert pl.phases(cal, load, 8, 8192, pl.Skew()).comm_S.tolist() == pytest.approx(
        [_deepep_measured_us(8192, 8, 100.0)], rel=1e-12)
    skewed = pl.phases(cal, load, 8, 8192, pl.Skew(dep_a2a=1.5)).comm_S  # the busiest rank receives 1.5x
    assert skewed.tolist() == pytest.approx([1.5 * _deepep_measured_us(8192, 8, 100.0)], rel=1e-12)


def test_a_measured_all_to_all_bandwidth_is_not_ranged_nor_marked_extrapolated(spec):
    # 262,144 tokens per rank lie two doublings past the DeepEP rows: without a measurement the cell is marked
    # (and the range's slow end grows per doubling); measured, DEP's communication is the measurement at every end
    load = _load([[262144] * 8])
    assert pl.phases(spec, load, 8, 8192, pl.Skew()).beyond["DEP communication"] == pytest.approx(2.0)
    cal = replace(spec, calibration=Calibration(all_to_all_gbps=100.0))
    ph = pl.phases(cal, load, 8, 8192, pl.Skew())
    assert "DEP communication" not in ph.beyond and "attention core" in ph.beyond  # only that mark dropped
    assert ph.comm_source == "deepep: the measured all-to-all bandwidth 100 GB/s (calibration)"
    small = _load([[8192] * 8])
    want = [pl.phases(cal, small, 8, 8192, pl.Skew()).comm_S[0] * 58]
    for which in ("nominal", "low", "high"):
        assert pl.iteration_times(cal, small, 8, 0, 2 << 20, 8192, which=which).dep_comm_S.tolist() == pytest.approx(
            want, rel=1e-12), which


def test_one_rank_has_no_communication_to_measure(spec):
    cal = replace(spec, calibration=Calibration(all_to_all_gbps=100.0))
    ph = pl.phases(cal, _load([[4096]]), 1, 8192, pl.Skew())
    assert ph.comm_S.tolist() == [0.0] and ph.comm_source == ""


def test_a_group_deepep_does_not_run_gets_allgather_reducescatter(spec):
    # DeepEP runs 2, 4 or 8 ranks on a node (deep_ep.py _is_deepep_feasible); TensorRT-LLM falls back to NCCL
    ph = pl.phases(spec, _load([[4096] * 6]), 6, 8192, pl.Skew())
    assert ph.comm_source.startswith("allgather_reducescatter: ")
    assert pl.phases(spec, _load([[4096] * 8]), 8, 8192, pl.Skew()).comm_source.startswith("deepep: ")


def test_engine_target_prices_the_dep_path_asked_and_the_attention_at_the_plans_isl():
    eng = pl.PlanSpec(model=R1, gpu=H200, target="engine", mnt=16384, dep_comm="allgather_reducescatter")
    load = _load([[1000, 3000, 2000, 2000, 2000, 2000, 2000, 2000]])
    # each rank gathers the other ranks' tokens (at most 15,000: rank 0's) and reduce-scatters as many back, BF16
    want = 2 * 15000 * 7168 * 2 / H200.a2a_bytes_per_s_for(8) * 1e6 + 2 * H200.a2a_latency_us
    assert pl.phases(eng, load, 8, 8192, pl.Skew()).comm_S.tolist() == pytest.approx([want], rel=1e-12)
    # a measured attention time per request (one request of 2048 / 8192 tokens per rank): that time, at this ISL
    timed = replace(eng, calibration=Calibration(attention_us_by_isl=((2048.0, 400.0), (8192.0, 5200.0))))
    for isl, us in ((8192, 5200.0), (2048, 400.0)):
        core = pl.phases(timed, _load([[isl] * 8]), 8, isl, pl.Skew()).core_SR
        assert core == pytest.approx(np.full((1, 8), us), rel=1e-12)


def _deepgemm_us(rows, local):
    """DeepGEMM's grouped GEMM (1346 / 1214 TFLOPS, DeepGEMM README) over `rows` padded by half a 128-row tile per
    local expert: fc1 7168 -> 2 x 2048, fc2 2048 -> 7168."""
    padded = rows + local * 127 / 2
    return (2 * padded * 7168 * 4096 / 1346e12 + 2 * padded * 2048 * 7168 / 1214e12) * 1e6


def test_deepep_deepgemm_experts_carry_the_skew_factor_of_each_samples_size():
    from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig

    sk_spec = pl.PlanSpec(model=R1, gpu=H200, target="trtllm", mnt=16384,
                          routing_skew=RoutingSkewConfig(kind="power_law", alpha=1.2))
    t = sk_spec.tables
    g_tok = np.array([65536.0, 8192.0])
    ratios = t.moe_ms("fp8", 8, "power_law_1.2", g_tok)[0] / t.moe_ms("fp8", 8, "balanced", g_tok)[0]
    assert ratios[0] == pytest.approx(16.7296 / 9.9968, rel=1e-6) and ratios[1] != pytest.approx(ratios[0], rel=1e-3)
    # the mean over the samples of the table's skewed / balanced MoE time at each sample's size, x a stated factor
    factor = float(np.mean(ratios)) * 1.3
    load = _load([[8192] * 8, [1024] * 8])
    ph = pl.phases(sk_spec, load, 8, 8192, pl.Skew(dist="power_law_1.2", dep_expert=1.3), "deepep_deepgemm")
    assert ph.experts_dep_S.tolist() == pytest.approx([_deepgemm_us(g * 8 / 8 * factor, 32) for g in g_tok],
                                                      rel=1e-9)
    # 6 ranks: the tables have no EP6 rows, so the factor is the stated one alone; 43 local experts (256 / 6 up)
    six = pl.phases(sk_spec, _load([[4096] * 6]), 6, 8192, pl.Skew(dep_expert=1.3), "deepep_deepgemm")
    assert six.experts_dep_S.tolist() == pytest.approx([_deepgemm_us(4096 * 6 * 8 / 6 * 1.3, 43)], rel=1e-9)


def test_gemm_multi_buffer_prices_dwdp_experts_with_this_projects_op(spec):
    # data/moe_op/h200.json: the op on a DWDP8 rank of DeepSeek-R1 takes 8.51 ms for 8192 tokens (balanced)
    mb = replace(spec, gemm="multi_buffer")
    ph = pl.phases(mb, _load([[8192] * 8]), 8, 8192, pl.Skew())
    assert ph.experts_dwdp_SR == pytest.approx(np.full((1, 8), 8510.0), rel=1e-9)
    assert "routed experts (DWDP, this project's op)" in ph.beyond
    assert "routed experts (DWDP, EP1)" in pl.phases(spec, _load([[8192] * 8]), 8, 8192, pl.Skew()).beyond


@pytest.mark.parametrize("isl", [1024, 32768])
def test_prefetch_bound_flag_flips_at_the_break_even_size(spec, isl):
    # compute slowed 1.5x beside the copy: below the break-even size the slowed compute leaves the copy exposed,
    # above it hides it (where the unslowed compute alone would still be shorter than the copy). ISL 32K: the
    # break-even is a chunk of one request, carrying its share of the attention core
    s = replace(spec, interference=1.5)
    be = pl.break_even_tokens(s, 8, 0, 2 << 20, isl)
    assert 1024 < be < 1e6 and (be < isl) == (isl == 32768)
    load = _load([[0.9 * be] * 4 + [1.1 * be] * 4], isl=isl)
    it = pl.iteration_times(s, load, 8, 0, 2 << 20, isl)
    assert it.dwdp_prefetch_bound_SR.tolist() == [[True] * 4 + [False] * 4]


def test_a_serving_ranks_kv_transfer_slows_an_exposed_prefetch_by_its_bytes(spec):
    # 8 ranks, 32 experts each: every rank pulls 224 experts and serves 224 (7 peers x 32), unsliced, at a measured
    # 100 GB/s slowed 2x by contention; 1 GB more on the source's links: 1e9 / 100e9 x 2 = 20 ms per MoE layer, 58
    cal = replace(spec, calibration=Calibration(peer_copy_gbps=100.0, contention_slowdown={"unsliced": 2.0}))
    one = _load([[1] * 8])  # one token per rank: the prefetch is exposed
    base = pl.iteration_times(cal, one, 8, 0, 0, 8192)
    more = pl.iteration_times(cal, one, 8, 0, 0, 8192, extra_src_bytes=1e9)
    assert base.dwdp_prefetch_bound_SR.all()
    assert more.dwdp_SR - base.dwdp_SR == pytest.approx(np.full((1, 8), 58 * 20000.0), rel=1e-9)
    # no bytes besides the experts unless asked
    assert pl.iteration_times(cal, one, 8, 0, 0, 8192, extra_src_bytes=0.0).dwdp_SR.tolist() == base.dwdp_SR.tolist()


def test_the_peer_range_is_the_groups_a_measurement_from_fewer_peers_widens_the_slow_end(spec):
    # the slow end prices the peer copies at 0.75 of the modelled bandwidth (uncertainty.PEER_RANGE) where the GPU's
    # published measurement pulled from as many peers as a rank of the group does, at 0.2 (NO_EVIDENCE_PEER_LOW)
    # where it pulled from fewer: an exposed prefetch (one token per rank) grows by 1/0.2 - 1 = 4 times its nominal
    # instead of 1/0.75 - 1 = 1/3, 12 times as much, at 8 ranks (7 peers) for a measurement from 3; at 4 ranks (3
    # peers) the two GPUs' slow ends agree
    one = _load([[1] * 8])
    three = replace(spec, gpu=replace(H200, peer_measured_peers=3))
    grow = {}
    for name, s in (("covered", spec), ("three", three)):
        lo, nom = (pl.iteration_times(s, one, 8, 0, 2 << 20, 8192, which=w).dwdp_SR[0, 0] for w in ("low", "nominal"))
        grow[name] = lo - nom
    assert grow["three"] == pytest.approx(12 * grow["covered"], rel=1e-9) and grow["covered"] > 0
    four = _load([[1] * 4])
    assert (pl.iteration_times(three, four, 4, 0, 2 << 20, 8192, which="low").dwdp_SR.tolist()
            == pl.iteration_times(spec, four, 4, 0, 2 << 20, 8192, which="low").dwdp_SR.tolist())


# ---- the range's ends ------------------------------------------------------------------------------------------
def test_deepep_deepgemms_slow_end_is_its_own_skewed_routing(spec):
    # the DEP-slow end routes skewed (uncertainty.SKEWED_ROUTING) and takes the slower communication path of that
    # DEP (DeepEP + DeepGEMM: the published 8xH200 layer's slow end), 5% slower per doubling past its anchor
    from dwdp_trtllm.perf.kernel_tables import EXTRAP_PER_DOUBLING

    load = _load([[8192] * 8])
    ph = pl.phases(spec, load, 8, 8192, pl.skewed_routing(spec, 8, 8192.0), "deepep_deepgemm")
    b = ph.beyond["DEP communication"]
    assert b > 0.01
    want = max(ph.comm_S[0], ph.comm_alt_S[0]) * (1 + EXTRAP_PER_DOUBLING) ** b
    high = pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192, which="high", variant="deepep_deepgemm")
    assert high.dep_comm_S[0] == pytest.approx(58 * want, rel=1e-12)


def test_a_stated_routing_is_applied_at_every_end_and_not_ranged():
    from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig

    rs = RoutingSkewConfig(kind="power_law", alpha=1.2)
    eng = pl.PlanSpec(model=R1, gpu=H200, target="engine", mnt=16384, routing_skew=rs,
                      stated=(("routing", "power_law_1.2"),))  # as `--routing-skew` sets it
    load = _load([[8192] * 8])
    comm = pl.phases(eng, load, 8, 8192, pl.routing_skew(eng, 8, 8192.0)).comm_S[0]  # the stated skew's all-to-all
    # the engine's all-to-all at 0.90 / 0.77 / 0.60 of the link (uncertainty.ENGINE_A2A_EFF), no skewed end on top
    for which, f in (("nominal", 1.0), ("low", 0.77 / 0.90), ("high", 0.77 / 0.60)):
        got = pl.iteration_times(eng, load, 8, 0, 2 << 20, 8192, which=which).dep_comm_S[0]
        assert got == pytest.approx(58 * comm * f, rel=1e-12), which


def test_one_rank_pulls_nothing_so_any_size_hides_it(spec):
    assert pl.break_even_tokens(spec, 1, 0, 2 << 20, 1024) == 0.0


@pytest.mark.parametrize("which", ["nominal", "low"])
def test_engine_prefetch_bound_flag_flips_at_the_break_even_size_of_each_end(which):
    # the engine target ranges its assumed compute efficiencies: at the DWDP-slow end (the efficiencies, the peer
    # bandwidth and the interference at their low ends) the break-even size moves, and iteration_times at that end
    # flips where break_even_tokens says
    eng = pl.PlanSpec(model=R1, gpu=H200, target="engine", mnt=16384)
    be = pl.break_even_tokens(eng, 8, 0, 2 << 20, 1024, which)
    assert 1024 < be < 1e6
    load = _load([[0.9 * be] * 4 + [1.1 * be] * 4], isl=1024)
    it = pl.iteration_times(eng, load, 8, 0, 2 << 20, 1024, which=which)
    assert it.dwdp_prefetch_bound_SR.tolist() == [[True] * 4 + [False] * 4]


def test_one_rank_has_no_skewed_end_and_two_ranks_have_one(spec):
    from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig

    one = _load([[8192]])
    ends = [pl.iteration_times(spec, one, 1, 0, 2 << 20, 8192, which=w) for w in ("nominal", "high")]
    assert ends[1].dep_S.tolist() == ends[0].dep_S.tolist() and ends[1].dwdp_SR.tolist() == ends[0].dwdp_SR.tolist()
    # 2 ranks: an unstated routing's slow end is skewed, slower than a stated balanced routing's
    two = _load([[8192] * 2])
    balanced = replace(spec, routing_skew=RoutingSkewConfig(kind="none"), stated=(("routing", "none"),))
    unstated, stated = (pl.iteration_times(s, two, 2, 0, 2 << 20, 8192, which="high").dep_S[0]
                        for s in (spec, balanced))
    assert unstated > stated * 1.01


def test_measured_compute_is_not_ranged_on_the_engine_target():
    # DEP's compute (its iteration less its communication) at the DWDP-fast end: the assumed efficiencies move it,
    # a measured attention rate (a compute efficiency, perf/inputs.py) fixes them
    eng = pl.PlanSpec(model=R1, gpu=H200, target="engine", mnt=16384)
    measured = replace(eng, calibration=Calibration(attention_tflops=500.0),
                       provenance=(("attention_tflops", "c.json"),))
    load = _load([[8192] * 8])

    def compute(s, which):
        it = pl.iteration_times(s, load, 8, 0, 2 << 20, 8192, which=which)
        return float(it.dep_S[0] - it.dep_comm_S[0])
    assert compute(measured, "low") == pytest.approx(compute(measured, "nominal"), rel=1e-12)
    assert compute(eng, "low") < 0.9 * compute(eng, "nominal")
