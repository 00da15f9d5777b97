"""perf/planner.py's handling of what the user states, pinned to hand computations and to the functions of other modules
that own each fact: the candidates `dwdp plan` refuses (flag and message), the workload's iterations (whole requests
packed up to MNT), the routing skew applied (imbalance.skew_term's factors for the plan's model, group and tokens; a
table distribution on the trtllm target; an all-gather moves every token whatever the routing), the interference
stated or measured (a hidden copy costs compute + copy x (1 - 1 / slowdown)), and DEP communication's range per
target (trtllm: the faster / slower of the two paths; engine: uncertainty.ENGINE_A2A_EFF)."""
from dataclasses import replace

import numpy as np
import pytest

from dwdp_trtllm.perf import planner as pl
from dwdp_trtllm.perf.bench_work import IterationLoad
from dwdp_trtllm.perf.calibration import Calibration
from dwdp_trtllm.perf.contention import expected_slowdown
from dwdp_trtllm.perf.flops import core_flops
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.imbalance import skew_term
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig
from dwdp_trtllm.spec.schema import ConfigError

R1 = PRESETS["deepseek-r1"]
H200 = get_gpu("h200")
POWER = RoutingSkewConfig(kind="power_law", alpha=1.2)


@pytest.fixture(scope="module")
def spec():
    return pl.PlanSpec(model=R1, gpu=H200, target="trtllm", mnt=16384)


def _load(tokens, ranks):
    tok = np.full((1, ranks), float(tokens))
    return IterationLoad(tok, tok, np.full((1, ranks), float(core_flops(R1, tokens))), np.ones((1, ranks)))


@pytest.mark.parametrize("sizes, redundant, message", [
    ((0,), (0,), "--dwdp-size: each G must be in [1, 256] for deepseek-r1, got 0"),
    ((257,), (0,), "--dwdp-size: each G must be in [1, 256] for deepseek-r1, got 257"),
    ((8,), (-1,), "--redundant-experts: -1 with G=8: expected an integer >= 0, got -1"),
    ((8,), (1000,), "--redundant-experts: 1000 with G=8: 1000 extra experts per rank exceed the model's 256 experts"),
])
def test_impossible_candidates_are_refused_naming_the_flag(spec, sizes, redundant, message):
    with pytest.raises(ConfigError) as e:
        pl.check_candidates(replace(spec, dwdp_sizes=sizes, redundant_experts=redundant))
    assert str(e.value) == message


def test_every_group_from_one_rank_to_one_expert_per_rank_is_a_candidate(spec):
    pl.check_candidates(replace(spec, dwdp_sizes=(1, 8, 256)))  # no error
    pl.check_candidates(replace(spec, dwdp_sizes=(8,), redundant_experts=(0, 3)))


def test_the_workloads_iterations_pack_whole_requests_up_to_mnt(spec):
    # ISL 4096 fixed, MNT 16384: each rank runs 4 whole requests of 4096 tokens, each its own attention segment
    ld = pl.sampled_load(replace(spec, isls=(4096,)), 4096, 4)
    assert ld.tokens_SR.shape[1] == 4 and (ld.tokens_SR == 16384).all() and (ld.kv_tokens_SR == 16384).all()
    assert (ld.segments_SR == 4).all()
    assert ld.core_flops_SR == pytest.approx(np.full(ld.tokens_SR.shape, 4 * float(core_flops(R1, 4096))), rel=1e-12)


def test_a_stated_routing_applies_skew_terms_factors_for_the_plans_model_group_and_tokens():
    eng = pl.PlanSpec(model=R1, gpu=H200, target="engine", mnt=16384, routing_skew=POWER)
    st = skew_term(POWER, num_moe_layers=58, num_experts=256, top_k=8, ep_size=8, tokens_per_rank=8192)
    assert st.dep_a2a_factor > 1 and st.dep_expert_factor > 1 and st.dwdp_gemm_factor > 1
    assert pl.routing_skew(eng, 8, 8192.0) == pl.Skew(label=st.label, dep_expert=st.dep_expert_factor,
                                                      dep_a2a=st.dep_a2a_factor, dwdp_gemm=st.dwdp_gemm_factor)
    # fewer than one token per rank is priced as one
    one = skew_term(POWER, num_moe_layers=58, num_experts=256, top_k=8, ep_size=8, tokens_per_rank=1)
    assert pl.routing_skew(eng, 8, 0.5).dep_expert == one.dep_expert_factor
    assert one.dep_expert_factor != skew_term(POWER, num_moe_layers=58, num_experts=256, top_k=8, ep_size=8,
                                              tokens_per_rank=2).dep_expert_factor
    # an all-gather + reduce-scatter moves every token whatever the routing: no all-to-all factor
    ag = pl.routing_skew(replace(eng, dep_comm="allgather_reducescatter"), 8, 8192.0)
    assert ag.dep_a2a == 1.0 and ag.dep_expert == st.dep_expert_factor
    # the model's own routing: nothing applied
    assert pl.routing_skew(replace(eng, routing_skew=RoutingSkewConfig(kind="none")), 8, 8192.0) == pl.Skew()
    assert pl.routing_skew(replace(eng, routing_skew=None), 8, 8192.0) == pl.Skew()


def test_trtllm_reads_a_table_distribution_and_falls_back_to_nccl_where_deepep_does_not_run(spec):
    assert pl.routing_skew(replace(spec, routing_skew=POWER), 8, 8192.0) == pl.Skew(
        label="power_law_1.2 (seed 0)", dist="power_law_1.2")
    zipf = replace(spec, routing_skew=RoutingSkewConfig(kind="zipf", alpha=1.2))  # no table distribution: factors
    assert pl.routing_skew(zipf, 8, 4096.0).dep_a2a > 1.0  # DeepEP on 8 ranks: the all-to-all follows the routing
    assert pl.routing_skew(zipf, 6, 4096.0).dep_a2a == 1.0  # 6 ranks: NCCL's all-gather, every token moves
    # an unstated routing's skewed end is uncertainty.SKEWED_ROUTING (power_law_1.01), whatever the spec says
    assert pl.skewed_routing(spec, 8, 8192.0) == pl.Skew(label="power_law_1.01 (seed 0)", dist="power_law_1.01")


def _hidden_copy_us(s, tokens=65536):
    return pl.iteration_times(s, _load(tokens, 8), 8, 0, 2 << 20, 8192).dwdp_SR[0, 0]


def test_stated_or_measured_interference_slows_the_compute_beside_a_hidden_copy(spec):
    # a rank whose compute hides its copy costs compute + copy x (1 - 1 / slowdown) per MoE layer: 1.5x slower
    # compute adds copy / 3 per layer over no slowdown. The copy: 224 experts pulled over the H200's link at 8 ranks,
    # 2 MiB slices, the contention model's sliced slowdown
    copy = 224 * R1.expert_bytes("fp8") / H200.peer_bytes_per_s_for(8) * expected_slowdown(8, True) * 1e6
    none = _hidden_copy_us(replace(spec, interference=1.0))
    stated = _hidden_copy_us(replace(spec, interference=1.5))
    assert stated - none == pytest.approx(58 * copy / 3, rel=1e-9)
    # the same number from a calibration file, as one slowdown or one per phase
    assert _hidden_copy_us(replace(spec, calibration=Calibration(interference=1.5))) == pytest.approx(stated, rel=1e-12)
    per_phase = {k: 1.5 for k in ("attention_core", "gemm", "memory_bound", "grouped_gemm")}
    by_phase = replace(spec, calibration=Calibration(interference_by_phase=per_phase))
    assert _hidden_copy_us(by_phase) == pytest.approx(stated, rel=1e-12)


def test_dep_communications_range_is_the_targets(spec):
    load = _load(8192, 8)
    ph = pl.phases(spec, load, 8, 8192, pl.Skew())  # DeepEP's rows, and NCCL's as the other path
    assert ph.beyond.get("DEP communication", 0.0) == 0.0 and ph.comm_S[0] < ph.comm_alt_S[0]
    ends = {w: pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192, which=w).dep_comm_S[0] / 58
            for w in ("nominal", "low", "high")}
    assert ends == pytest.approx({"nominal": ph.comm_S[0], "low": ph.comm_S[0], "high": ph.comm_alt_S[0]}, rel=1e-12)
    # the engine's all-to-all at 0.90 / 0.77 / 0.60 of the link (DEP-fast end, nominal, DEP-slow end); the slow end
    # also routes skewed (an unstated routing's skewed end: its all-to-all factor)
    eng = pl.PlanSpec(model=R1, gpu=H200, target="engine", mnt=16384)
    comm = pl.phases(eng, load, 8, 8192, pl.Skew()).comm_S[0]
    a2a = pl.skewed_routing(eng, 8, 8192.0).dep_a2a
    assert a2a > 1
    ends = {w: pl.iteration_times(eng, load, 8, 0, 2 << 20, 8192, which=w).dep_comm_S[0] / 58
            for w in ("nominal", "low", "high")}
    assert ends == pytest.approx({"nominal": comm, "low": comm * 0.77 / 0.90, "high": comm * 0.77 / 0.60 * a2a},
                                 rel=1e-12)


def test_a_stated_dep_path_is_not_ranged(spec):
    # --dep-comm deepep: the range keeps DeepEP at both ends (unstated, its ends are the faster / slower path)
    load = _load(8192, 8)
    stated = replace(spec, dep_comm="deepep", stated=(("DEP communication", "deepep"),))  # as `--dep-comm` sets it
    comm = pl.phases(stated, load, 8, 8192, pl.Skew()).comm_S[0]
    for which in ("nominal", "low", "high"):
        got = pl.iteration_times(stated, load, 8, 0, 2 << 20, 8192, which=which).dep_comm_S[0]
        assert got == pytest.approx(58 * comm, rel=1e-12), which


def test_measured_peer_copies_keep_the_interference_prior_narrow_on_a_gpu_nothing_published_for(spec):
    # the wide interference prior is for a family whose copies nothing measured; a calibration that measured them
    # (peer_copy_gbps) is that measurement: the slow end is the same as on a GPU with a published measurement
    cal = Calibration(peer_copy_gbps=300.0)
    load = _load(65536, 8)
    unpublished = replace(spec, gpu=replace(H200, peer_evidence=None), calibration=cal)
    published = replace(spec, calibration=cal)
    low = [pl.iteration_times(s, load, 8, 0, 2 << 20, 8192, which="low").dwdp_SR for s in (unpublished, published)]
    assert low[0].tolist() == low[1].tolist()
    # without the calibration the unpublished GPU's slow end is wider
    wide = pl.iteration_times(replace(unpublished, calibration=Calibration()), load, 8, 0, 2 << 20, 8192, which="low")
    narrow = pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192, which="low")
    assert wide.dwdp_SR[0, 0] > narrow.dwdp_SR[0, 0]
