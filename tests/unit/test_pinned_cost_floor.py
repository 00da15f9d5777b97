"""perf/cost_model.py's calibrated compute phases pinned to hand computations: a floor calibration (`dwdp bench
--floor` runs) stood in by a fake floor whose rates and engine factors are plain formulas written here, so every
priced phase has a known answer (FLOPs / the floor rate at this size x the engine's measured / floor at this size);
the attention core from a measured time per request (`attention_us_by_isl`); the memory-bound BF16 rooflines; and
the all-to-all / all-gather on batches of samples (any leading shape, the last axis the rank).

Units: TFLOP/s = 1e12 FLOP/s and ms = 1e3 us exactly, so the pins that check them hold to 1e-13 (a unit off by
one part in 1e12 is seen); the others to 1e-12."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dwdp_trtllm.perf import cost_model as cm
from dwdp_trtllm.perf.calibration import Calibration
from placement_fake import FakePlacement  # noqa: E402  (tests/unit is on sys.path)

# an MLA stand-in (kv_b runs over prefix + chunk keys); 64 experts top-8, H 1000, I 300
MLA = SimpleNamespace(attention="mla", hidden_size=1000, num_heads=4, qk_nope_head_dim=32, qk_rope_head_dim=16,
                      v_head_dim=32, kv_lora_rank=64, attention_params=lambda: 2_000_000, moe_intermediate=300,
                      num_experts=64, top_k=8, num_shared_experts=1, expert_params=900_000, dense_intermediate=4000,
                      expert_bytes=lambda dtype: {"fp8": 900_000, "bf16": 1_800_000}[dtype])
# MLA's kv_b FLOPs per extra key: 2 x kv_lora 64 x 4 heads x (nope 32 + v 32)
KV_B = 2 * 64 * 4 * 64


class _Gpu:
    hbm_bytes_per_s = 3e12
    a2a_latency_us = 7.0
    attention_flops_per_s = 500e12

    def a2a_bytes_per_s_for(self, group):
        return 50e9 * group

    def matmul_tflops(self, dtype):
        return {"fp8": 800.0, "bf16": 400.0}[dtype]


class _Floor:
    """A floor calibration whose answers are formulas (the interface of perf/floor_calibration.FloorCalibration):
    - dense floor rate (TFLOP/s) of attention_proj 300 / other 600, x tokens / (tokens + 1000) (small iterations
      run slower), x 2048 / ISL, x 1 for FP8 linear layers, 0.5 for BF16, 0.75 for every point (no dtype asked);
    - attention core: FLOPs / 400 TFLOP/s + 0.02 ms per call; routed experts: R 500 (FP8) / 250 (BF16) TFLOP/s,
      k = 2 rows per expert;
    - engine / floor: attention 1.1 + tokens / 1e5 + ISL / 1e6 (every point: no dtype); other 1.2 + the same, x 1 /
      1.1 / 1.05 for FP8 / BF16 / every point's linear layers; expert_gemm 1.05 + size / 1e5 + ISL / 1e6, x 1 / 1.2
      / 1.1 for FP8 / BF16 / every point's weights."""

    core = (400.0, 0.02)
    experts = ({"fp8": 500.0, "bf16": 250.0}, 2.0)

    @staticmethod
    def rate(key, tokens, isl, linear_dtype=None):
        t = np.asarray(tokens, float)
        return ({"attention_proj": 300.0, "other": 600.0}[key] * t / (t + 1000) * 2048 / np.asarray(isl, float)
                * {"fp8": 1.0, "bf16": 0.5, None: 0.75}[linear_dtype])

    @staticmethod
    def factor(phase, tokens, isl, dtype=None, linear_dtype=None):
        base = {"attention": 1.1, "other": 1.2, "expert_gemm": 1.05}[phase]
        f = base + np.asarray(tokens, float) / 1e5 + np.asarray(isl, float) / 1e6
        if phase == "other":
            f = f * {"fp8": 1.0, "bf16": 1.1, None: 1.05}[linear_dtype]
        if phase == "expert_gemm":
            f = f * {"fp8": 1.0, "bf16": 1.2, None: 1.1}[dtype]
        return f


def _floor(**kw):
    return cm.CostParams(gpu=_Gpu(), calibration=Calibration(floor=_Floor()), **kw)


T = np.array([512.0, 8192.0])  # tokens per iteration
ISL = np.array([1024.0, 8192.0])


def _rate(base, dt=1.0):  # the fake floor's rate, written out
    return base * T / (T + 1000) * 2048 / ISL * dt


def test_attention_core_floor_is_flops_over_r_plus_a_cost_per_call():
    p = _floor()
    # 4 TFLOP at 400 TFLOP/s = 10 ms, plus 3 calls x 0.02 ms; 8 TFLOP in one call
    got = cm.core_us(MLA, p, np.array([4e12, 8e12]), np.array([3.0, 1.0]), ISL)
    assert got == pytest.approx([10_000.0 + 60.0, 20_000.0 + 20.0], rel=1e-13)
    assert cm.core_rate(MLA, p) == 400e12  # the floor's R (exactly: TFLOP/s x 1e12)


def test_attention_core_from_a_measured_time_per_request():
    # a GQA stand-in with sliding-window layers: a measured time is stated for full causal attention on every layer,
    # so one request of ISL n costs 2 x 8 heads x (64 + 64) x n^2 / 2 = 1024 n^2 FLOPs here, windows or not
    gqa = SimpleNamespace(attention="gqa", num_heads=8, head_dim=64, num_layers=4, sliding_window=128,
                          sliding_window_layers=2)
    p = cm.CostParams(gpu=_Gpu(), calibration=Calibration(attention_us_by_isl=((1024.0, 100.0), (4096.0, 1000.0))))
    one = lambda n: 1024.0 * n * n  # noqa: E731
    assert cm.core_us(gqa, p, np.array([one(1024), 2 * one(1024)]), 1, 1024) == pytest.approx([100.0, 200.0],
                                                                                              rel=1e-12)
    assert cm.core_us(gqa, p, np.array([one(4096)]), 1, 4096) == pytest.approx([1000.0], rel=1e-12)
    # ISL 2048 lies half-way (in log ISL) between the two measured ISLs: 550 us per request
    assert cm.core_us(gqa, p, np.array([one(2048), 0.5 * one(2048)]), 1, 2048) == pytest.approx([550.0, 275.0],
                                                                                                 rel=1e-12)


def test_attention_core_at_the_gpus_rate_in_microseconds():
    got = cm.core_us(MLA, cm.CostParams(gpu=_Gpu()), np.array([1e12]), 1, 1024)
    assert got == pytest.approx([2000.0], rel=1e-12)  # 1 TFLOP at 500 TFLOP/s


def test_floor_calibrated_attention_is_projections_over_the_floor_rate_plus_core_times_the_engine_factor():
    kv = T + np.array([0.0, 4096.0])  # the second iteration's chunk follows a 4096-token prefix
    flops = 2 * 2_000_000 * T + KV_B * (kv - T)
    fac = 1.1 + T / 1e5 + ISL / 1e6
    want = (flops / (_rate(300.0) * 1e12) * 1e6 + 50.0) * fac
    got = cm.attention_us(MLA, _floor(), T, 50.0, isl=ISL, kv_tokens=kv)
    assert got == pytest.approx(want, rel=1e-13)
    # BF16 linear layers (BF16 experts): the BF16 floor rate; the attention factor is every point's
    bf16 = cm.attention_us(MLA, _floor(weight_dtype="bf16"), T, 50.0, isl=ISL, kv_tokens=kv)
    assert bf16 == pytest.approx((flops / (_rate(300.0, 0.5) * 1e12) * 1e6 + 50.0) * fac, rel=1e-13)


def test_floor_calibrated_other_and_dense_mlp_times_the_engine_factor():
    fac = 1.2 + T / 1e5 + ISL / 1e6
    shared = (6 * 1000 * 300 * 1 + 2 * 1000 * 64) * T  # one shared expert + the router
    assert cm.other_us(MLA, _floor(), T, isl=ISL) == pytest.approx(shared / (_rate(600.0) * 1e12) * 1e6 * fac,
                                                                   rel=1e-13)
    mlp = 6 * 1000 * 4000 * T
    assert cm.dense_mlp_us(MLA, _floor(), T, isl=ISL) == pytest.approx(mlp / (_rate(600.0) * 1e12) * 1e6 * fac,
                                                                       rel=1e-13)
    # BF16 linear layers: the BF16 floor rate and the factor of the runs whose linear layers were BF16
    got = cm.dense_mlp_us(MLA, _floor(weight_dtype="fp8", linear_dtype="bf16"), T, isl=ISL)
    assert got == pytest.approx(mlp / (_rate(600.0, 0.5) * 1e12) * 1e6 * fac * 1.1, rel=1e-13)


def test_floor_calibrated_dense_layer_is_its_attention_and_mlp_at_the_same_size():
    kv = T + 2048.0
    attn = (2 * 2_000_000 * T + KV_B * 2048.0) / (_rate(300.0) * 1e12) * 1e6
    want = ((attn + 50.0) * (1.1 + T / 1e5 + ISL / 1e6)
            + 6 * 1000 * 4000 * T / (_rate(600.0) * 1e12) * 1e6 * (1.2 + T / 1e5 + ISL / 1e6))
    assert cm.dense_layer_us(MLA, _floor(), T, 50.0, isl=ISL, kv_tokens=kv) == pytest.approx(want, rel=1e-13)


def test_floor_calibrated_experts_carry_the_tile_overhead_and_the_engine_factor_at_a_one_rank_layers_size():
    # a DEP rank holding 16 of 64 experts with 640 / 6400 rows: m = 40 / 400 rows per expert; a one-rank layer with
    # the same rows per expert has m x 64 / 8 = 320 / 3200 tokens
    rows = np.array([640.0, 6400.0])
    m, size = rows / 16, rows / 16 * 64 / 8
    flops = 6 * 1000 * 300 * rows
    overhead = 1 + 2.0 * (1 - np.exp(-m)) / m
    for dtype, r, dt in (("fp8", 500.0, 1.0), ("bf16", 250.0, 1.2)):
        want = flops / (r * 1e12) * 1e6 * overhead * (1.05 + size / 1e5 + ISL / 1e6) * dt
        assert cm.experts_us(MLA, _floor(weight_dtype=dtype), rows, 16, isl=ISL) == pytest.approx(want, rel=1e-13)


def test_expert_gemm_at_the_calibrated_rate_of_its_rows_per_expert():
    # the calibration layer has 256 experts top-8: r rows per expert = 32 r tokens. 1000 rows over 10 experts: 100
    # rows per expert = 3200 tokens, half-way (in log) from 320 to 32000 tokens: 300 TFLOP/s; 20000 rows over 10
    # experts: 64000 tokens, past the last point: 500 TFLOP/s (both compute-bound: 0.9 MB of weights per expert)
    cal = Calibration(grouped_gemm_tflops={"fp8": ((320.0, 100.0), (32000.0, 500.0))})
    p = cm.CostParams(gpu=_Gpu(), calibration=cal)
    for rows, tflops in ((1000.0, 300.0), (20000.0, 500.0)):
        flops = 6 * 1000 * 300 * rows
        nbytes = 10 * 900_000 + rows * (1000 + 2 * 300 * 2 + 300 + 1000 * 2)
        assert flops / (tflops * 1e12) > nbytes / 3e12
        assert cm.experts_us(MLA, p, np.array([rows]), 10) == pytest.approx([flops / (tflops * 1e12) * 1e6],
                                                                            rel=1e-12)
    # fewer rows than one calibration token: the rate at one token (the first point here)
    one = cm.CostParams(gpu=_Gpu(), calibration=Calibration(grouped_gemm_tflops={"fp8": ((1.0, 50.0), (32.0, 100.0))}))
    assert one.gemm_flops_per_s("fp8", 0.01) == 50e12 and one.gemm_flops_per_s("fp8", 1.0) == 100e12


def test_memory_bound_phases_read_two_bytes_per_bf16_weight():
    p = cm.CostParams(gpu=_Gpu(), weight_dtype="bf16")  # BF16 dense GEMMs: 400 TFLOP/s, 2 bytes per weight
    t = np.array([4.0])
    attn = (2_000_000 * 2 + 4 * 1000 * 2 * 4) / 3e12 * 1e6  # weights + q/kv/o BF16 vectors: memory-bound
    assert cm.attention_us(MLA, p, t, 0.0) == pytest.approx([attn], rel=1e-12)
    other = (900_000 * 1 * 2 + 1000 * 64 * 2) / 3e12 * 1e6
    assert cm.other_us(MLA, p, t) == pytest.approx([other], rel=1e-12)
    # 8 rows over 8 experts: 8 x 1.8 MB of BF16 weights + the activations in and out in BF16
    experts = (8 * 1_800_000 + 8 * (1000 * 2 + 2 * 300 * 2 + 300 * 2 + 1000 * 2)) / 3e12 * 1e6
    assert cm.experts_us(MLA, p, np.array([8.0]), 8) == pytest.approx([experts], rel=1e-12)
    assert cm.CostParams(gpu=_Gpu(), weight_dtype="bf16", linear_dtype="fp8").dense_dtype == "fp8"


def test_measured_gemm_and_core_rates_are_tflops_times_1e12():
    cal = Calibration(grouped_gemm_tflops={"fp8": ((32.0, 100.0), (3200.0, 500.0))}, attention_tflops=250.0)
    p = cm.CostParams(gpu=_Gpu(), calibration=cal)
    assert p.gemm_flops_per_s("fp8", 1.0) == 100e12 and cm.core_rate(MLA, p) == 250e12


# ---- communication on batches of samples ------------------------------------------------------------------------
A2A = SimpleNamespace(top_k=8, hidden_size=1000, num_experts=64)
# 2 x 3 samples of 2 ranks (the last axis): each sample's busiest rank sends half of its 8 copies of each token
BATCH = np.array([[[100.0, 300.0], [200.0, 200.0], [50.0, 10.0]],
                  [[400.0, 0.0], [30.0, 60.0], [100.0, 100.0]]])


def test_all_to_all_prices_each_sample_of_a_batch_by_its_busiest_rank():
    p = cm.CostParams(gpu=_Gpu())
    busiest = BATCH.max(-1)
    want = busiest * 8 * 0.5 * 1000 * (1.0 + 2.0) / 100e9 * 1e6 + 7.0  # FP8 dispatch + BF16 combine
    got = cm.all_to_all_us(A2A, p, BATCH, 2)
    assert got.shape == (2, 3) and got == pytest.approx(want, rel=1e-12)
    # 4 ranks, 2 samples: the second's rank 0 holds every token
    four = np.array([[100.0, 400.0, 100.0, 100.0], [800.0, 0.0, 0.0, 0.0]])
    want4 = np.array([400.0, 800.0]) * 8 * 0.75 * 1000 * 3.0 / 200e9 * 1e6 + 7.0
    assert cm.all_to_all_us(A2A, p, four, 4) == pytest.approx(want4, rel=1e-12)
    alone = cm.all_to_all_us(A2A, p, BATCH[..., :1], 1)
    assert alone.shape == (2, 3) and not alone.any()


def test_allgather_reducescatter_prices_each_sample_by_the_rank_that_gathers_most():
    p = cm.CostParams(gpu=_Gpu())
    # two ranks: each gathers the other's tokens; the busiest gathers the larger of the two
    others = BATCH.max(-1)
    want = 2 * others * 1000 * 2.0 / 100e9 * 1e6 + 2 * 7.0
    got = cm.allgather_reducescatter_us(A2A, p, BATCH, 2)
    assert got.shape == (2, 3) and got == pytest.approx(want, rel=1e-12)
    alone = cm.allgather_reducescatter_us(A2A, p, BATCH[..., :1], 1)
    assert alone.shape == (2, 3) and not alone.any()


# ---- prefetch beside the KV-cache transfer ----------------------------------------------------------------------
A2A_EXPERTS = SimpleNamespace(expert_bytes=lambda dtype: {"fp8": 1000}[dtype])  # 1000 bytes per expert


_Placement = FakePlacement  # tests/unit/placement_fake.py


def test_prefetch_counts_the_sources_kv_transfer_on_its_links():
    cal = Calibration(peer_copy_gbps=200.0, contention_slowdown={"sliced": 1.1, "unsliced": 2.0})
    p = cm.CostParams(gpu=_Gpu(), calibration=cal)
    pl = _Placement(4, [48, 40, 48, 44], 40)  # 48 experts of 1000 bytes pulled, 40 served
    assert cm.prefetch_us(A2A_EXPERTS, p, pl, 0) == pytest.approx(48e3 / 200e9 * 2.0 * 1e6, rel=1e-12)
    # the source also sends 20 kB of KV cache: it serves 60 kB, more than any rank pulls
    assert cm.prefetch_us(A2A_EXPERTS, p, pl, 0, extra_src_bytes=20e3) == pytest.approx(
        60e3 / 200e9 * 2.0 * 1e6, rel=1e-12)
    # one rank pulls nothing, whatever else its links carry
    assert cm.prefetch_us(A2A_EXPERTS, p, _Placement(1, [0], 0), 0, extra_src_bytes=20e3) == 0.0



def test_remote_ranks_per_token_closed_form():
    # 64 experts over 4 ranks, top-8: a given other rank misses a token's 8 experts with C(48, 8) / C(64, 8)
    assert cm.remote_ranks_per_token(A2A, 4) == pytest.approx(3 * (1 - math.comb(48, 8) / math.comb(64, 8)))
