"""perf/planner.py's iteration pricing pinned beyond test_pinned_values.py's lock-step check: an idle rank costs
nothing and a one-token rank is busy, the DEP communication share is predict's per-layer all-to-all x the MoE
layers (two code paths, one number), the ISL is rounded to whole tokens, and a measured all-to-all bandwidth prices
TensorRT-LLM's all-gather + reduce-scatter path byte for byte (hand computation) with its source said."""
import json

import numpy as np
import pytest

from dwdp_trtllm.cli import main
from dwdp_trtllm.perf import planner as pl
from dwdp_trtllm.perf.bench_work import IterationLoad
from dwdp_trtllm.perf.flops import core_flops
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.spec.models import PRESETS

R1 = PRESETS["deepseek-r1"]


def _load(tokens):
    tok = np.array([tokens], float)
    core = np.array([[float(core_flops(R1, t)) if t else 0.0 for t in tokens]])
    return IterationLoad(tok, tok, core, (tok > 0).astype(float))


@pytest.fixture(scope="module")
def spec():
    return pl.PlanSpec(model=R1, gpu=get_gpu("h200"), target="trtllm", mnt=16384)


def test_an_idle_rank_costs_nothing_and_one_token_is_busy(spec):
    load = _load([8192, 1, 0, 8192, 8192, 8192, 8192, 8192])
    it = pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192)
    assert it.dwdp_SR.shape == (1, 8) and it.dep_S.shape == (1,)
    assert it.dwdp_SR[0, 2] == 0.0 and not it.dwdp_prefetch_bound_SR[0, 2]
    assert it.dwdp_SR[0, 1] > 0.0 and it.dwdp_prefetch_bound_SR[0, 1]  # one token cannot hide a layer's copy
    assert it.dwdp_SR[0, 1] < it.dwdp_SR[0, 0]
    assert (it.dep_S > it.dwdp_SR.max() * 0.5).all()


def test_dep_communication_share_is_predicts_all_to_all_times_the_moe_layers(spec):
    load = _load([8192, 4096, 0, 8192, 2048, 8192, 8192, 8192])
    it = pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192)
    row = pl.predict(spec, 8, 0, 2 << 20, 8192, load=load)
    assert R1.num_moe_layers == 58
    assert it.dep_comm_S.tolist() == pytest.approx([58 * row.t_all2all_us], rel=1e-12)
    assert float(it.dep_S[0]) == pytest.approx(row.t_iteration_dep_us, rel=1e-9)  # one sample: its time


def test_isl_is_rounded_to_whole_tokens(spec):
    load = _load([8192] * 8)
    at = pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192).dep_S
    assert pl.iteration_times(spec, load, 8, 0, 2 << 20, 8191.6).dep_S == pytest.approx(at, rel=1e-15)
    assert pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192.4).dep_S == pytest.approx(at, rel=1e-15)
    assert pl.iteration_times(spec, load, 8, 0, 2 << 20, 1024).dep_S[0] != pytest.approx(at[0], rel=1e-3)


def test_scenario_and_variant_reach_the_price(spec):
    load = _load([8192] * 8)
    nominal = pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192)
    assert pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192, which="high").dep_S[0] != pytest.approx(
        nominal.dep_S[0], rel=1e-3)
    assert pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192, variant="deepep_deepgemm").dep_S[0] != pytest.approx(
        nominal.dep_S[0], rel=1e-3)
    assert pl.iteration_times(spec, load, 8, 0, 0, 8192).dwdp_SR[0, 0] != pytest.approx(
        nominal.dwdp_SR[0, 0], rel=1e-3)  # the slice size reaches the prefetch


def _row(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["rows"][0]


@pytest.mark.parametrize("gbps", [100.0, 1000.0])
def test_measured_all_to_all_bandwidth_prices_allgather_reducescatter(capsys, tmp_path, gbps):
    """Each of 8 ranks gathers the other 7 ranks' 16,384 tokens of 7168 BF16 values and reduce-scatters as many
    back, at the measured rate, plus the GPU's 20 us fixed cost twice (h200.yaml a2a_latency_us)."""
    cal = tmp_path / "a2a.json"
    cal.write_text(json.dumps({"gpu": "h200", "all_to_all_gbps": gbps}))
    row = _row(capsys, ["plan", "--model", "deepseek-r1", "--gpu", "h200", "--dwdp-size", "8", "--isl", "8192",
                        "--mnt", "16384", "--dep", "trtllm", "--dep-comm", "allgather_reducescatter",
                        "--calibration", str(cal)])
    assert row["t_all2all_us"] == pytest.approx(2 * 7 * 16384 * 7168 * 2 / (gbps * 1e9) * 1e6 + 2 * 20.0, rel=1e-9)
    assert row["dep_comm"] == f"allgather_reducescatter: the measured all-to-all bandwidth {gbps:g} GB/s (calibration)"


def test_deepep_deepgemm_rows_scaled_by_the_tables_skewed_over_balanced_moe():
    """Routing power_law 1.2 (a table distribution): DeepEP + DeepGEMM's busiest rank holds the balanced share of the
    group's 65,536 x 8 rows times TensorRT-LLM's own skewed / balanced MoE time at that size (16.73 / 10.00 ms in
    the H200 table): DeepGEMM's padded grouped GEMM (1346 / 1214 TFLOPS) over those rows and 32 local experts."""
    from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig

    skewed_spec = pl.PlanSpec(model=R1, gpu=get_gpu("h200"), target="trtllm", mnt=16384,
                              routing_skew=RoutingSkewConfig(kind="power_law", alpha=1.2))
    load = _load([8192] * 8)
    sk = pl.routing_skew(skewed_spec, 8, 8192.0)
    assert sk.dist == "power_law_1.2" and sk.dep_expert == 1.0
    t = skewed_spec.tables
    ratio = float(t.moe_ms("fp8", 8, "power_law_1.2", np.array([65536.0]))[0][0]
                  / t.moe_ms("fp8", 8, "balanced", np.array([65536.0]))[0][0])
    assert ratio == pytest.approx(16.7296 / 9.9968, rel=1e-6)  # the table's rows, read here
    padded = 65536 * 8 / 8 * ratio + 32 * 127 / 2
    want = (2 * padded * 7168 * 4096 / 1346e12 + 2 * padded * 2048 * 7168 / 1214e12) * 1e6
    ph = pl.phases(skewed_spec, load, 8, 8192, sk, "deepep_deepgemm")
    assert ph.experts_dep_S.tolist() == pytest.approx([want], rel=1e-9)
    balanced = pl.phases(skewed_spec, load, 8, 8192, pl.Skew(), "deepep_deepgemm")
    padded_b = 65536 + 32 * 127 / 2
    assert balanced.experts_dep_S.tolist() == pytest.approx(
        [(2 * padded_b * 7168 * 4096 / 1346e12 + 2 * padded_b * 2048 * 7168 / 1214e12) * 1e6], rel=1e-9)


def test_each_sample_is_its_own_lock_step(spec):
    one, two = [8192] * 8, [4096] * 7 + [0]
    a, b = _load(one), _load(two)
    both = IterationLoad(*(np.concatenate([x, y]) for x, y in zip(
        (a.tokens_SR, a.kv_tokens_SR, a.core_flops_SR, a.segments_SR),
        (b.tokens_SR, b.kv_tokens_SR, b.core_flops_SR, b.segments_SR))))
    it = pl.iteration_times(spec, both, 8, 0, 2 << 20, 8192)
    alone = [pl.iteration_times(spec, x, 8, 0, 2 << 20, 8192).dep_S[0] for x in (a, b)]
    assert it.dep_S.tolist() == pytest.approx(alone, rel=1e-12)  # the lighter sample is not priced at the heavier


@pytest.mark.parametrize("group", [2, 4])
def test_measured_all_to_all_bandwidth_in_small_groups(capsys, tmp_path, group):
    """DeepEP at a measured 100 GB/s on 2 and 4 ranks: each rank's 16,384 tokens sent once per remote rank holding
    one of their 8 experts (256 / G experts per rank), FP8 + BF16, plus 20 us."""
    import math

    cal = tmp_path / "a2a.json"
    cal.write_text(json.dumps({"gpu": "h200", "all_to_all_gbps": 100.0}))
    row = _row(capsys, ["plan", "--model", "deepseek-r1", "--gpu", "h200", "--dwdp-size", str(group), "--isl",
                        "8192", "--mnt", "16384", "--dep", "trtllm", "--dep-comm", "deepep", "--calibration", str(cal)])
    remote = (group - 1) * (1 - math.comb(256 - 256 // group, 8) / math.comb(256, 8))
    assert row["t_all2all_us"] == pytest.approx(16384 * remote * 7168 * 3 / 100e9 * 1e6 + 20.0, rel=1e-9)
