"""perf/cost_model.py's communication, prefetch and overlap pinned to hand computations on stand-in models and GPUs
whose numbers are written here: DEP's all-to-all (busiest rank's send or receive, DeepEP dedup, dispatch + BF16
combine bytes, fixed latency), the all-gather + reduce-scatter path, the DWDP prefetch (bytes of the busiest
destination or source, calibrated slice efficiency and contention), the overlap of compute and copy, and the units
of every measured bandwidth (GB/s = 1e9, TB/s = 1e12, TFLOP/s = 1e12)."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dwdp_trtllm.perf import cost_model as cm
from dwdp_trtllm.perf.calibration import Calibration
from dwdp_trtllm.perf.contention import expected_slowdown
from placement_fake import FakePlacement  # noqa: E402  (tests/unit is on sys.path)

MODEL = SimpleNamespace(top_k=8, hidden_size=1000, num_experts=64, moe_intermediate=300,
                        expert_bytes=lambda dtype: {"fp8": 1000, "bf16": 2000}[dtype])


class _Gpu:
    hbm_bytes_per_s = 3e12
    a2a_latency_us = 7.0

    def peer_bytes_per_s_for(self, group):
        return 100e9 * group  # grows with the group: a test that passes the wrong group sees it

    def a2a_bytes_per_s_for(self, group):
        return 50e9 * group

    def matmul_tflops(self, dtype):
        return {"fp8": 800.0, "bf16": 400.0}[dtype]


def _p(**kw):
    return cm.CostParams(gpu=_Gpu(), **kw)


def test_measured_bandwidths_are_read_in_their_units():
    cal = Calibration(hbm_tbps=2.5, peer_copy_gbps=300.0, all_to_all_gbps=120.0,
                      grouped_gemm_tflops={"fp8": ((32.0, 100.0), (3200.0, 500.0))})
    p = _p(calibration=cal)
    assert p.hbm_bps == 2.5e12 and p.peer_bps_for(4) == 300e9 and p.a2a_bps_for(4) == 120e9
    assert p.gemm_flops_per_s("fp8", 1.0) == pytest.approx(100e12)  # 1 row/expert = 32 tokens: the first point
    assert p.gemm_flops_per_s("fp8", 100.0) == pytest.approx(500e12)  # clamped at the last
    assert p.gemm_flops_per_s("bf16", 1.0) == 400e12 and p.gemm_flops_per_s("fp8") == 800e12
    q = _p()  # nothing measured: the GPU's
    assert q.hbm_bps == 3e12 and q.peer_bps_for(4) == 400e9 and q.a2a_bps_for(4) == 200e9


def test_cost_params_refuse_unknown_dtypes():
    for kw, msg in (({"weight_dtype": "int4"}, "weight_dtype 'int4': expected one of bf16, fp8, mxfp4, nvfp4"),
                    ({"dispatch_dtype": "mxfp4"}, "dispatch_dtype 'mxfp4': expected one of bf16, fp8, nvfp4"),
                    ({"linear_dtype": "fp4"}, "linear_dtype 'fp4': expected bf16 or fp8")):
        with pytest.raises(ValueError) as e:
            _p(**kw)
        assert str(e.value) == msg
    assert _p(weight_dtype="nvfp4").dense_dtype == "fp8" and _p(weight_dtype="bf16").dense_dtype == "bf16"
    assert _p(weight_dtype="fp8", linear_dtype="bf16").dense_dtype == "bf16"


def test_roofline_is_the_slower_of_compute_and_memory():
    assert cm.roofline_us(2e12, 1e9, 1e15, 1e12) == pytest.approx(2000.0)  # compute 2 ms, memory 1 ms
    assert cm.roofline_us(1e12, 3e9, 1e15, 1e12) == pytest.approx(3000.0)


def test_all_to_all_busiest_rank_send_or_receive():
    # 4 ranks with 100, 400, 100, 100 tokens; top-8, H 1000, FP8 dispatch + BF16 combine = 3 bytes per element.
    # rank 1 sends 3/4 of its 8 copies of each token: 400 x 6 x 1000; the others receive 1/4 of the other ranks'
    # copies: at most 600 x 2 x 1000. (A receive never exceeds the busiest send: it is at most (G - 1) x the
    # busiest rank's tokens x k / G.)
    tokens = np.array([[100.0, 400.0, 100.0, 100.0]])
    want = 400 * 6 * 1000 * 3 / (50e9 * 4) * 1e6 + 7.0
    assert cm.all_to_all_us(MODEL, _p(), tokens, 4) == pytest.approx([want], rel=1e-12)
    # two samples of 2 ranks, BF16 dispatch (2 + 2 bytes): the busiest rank sends half of its 8 copies
    two = np.array([[100.0, 300.0], [200.0, 200.0]])
    assert cm.all_to_all_us(MODEL, _p(dispatch_dtype="bf16"), two, 2) == pytest.approx(
        [300 * 4 * 1000 * 4 / 100e9 * 1e6 + 7.0, 200 * 4 * 1000 * 4 / 100e9 * 1e6 + 7.0], rel=1e-12)
    nvfp4 = cm.all_to_all_us(MODEL, _p(weight_dtype="nvfp4", dispatch_dtype="nvfp4"), two, 2)
    assert nvfp4[0] == pytest.approx(300 * 4 * 1000 * (0.5 + 1 / 16 + 2) / 100e9 * 1e6 + 7.0, rel=1e-12)
    assert cm.all_to_all_us(MODEL, _p(), two, 1).tolist() == [0.0, 0.0]


def test_all_to_all_deduplicated_sends_once_per_remote_rank():
    tokens = np.array([[100.0, 100.0, 100.0, 100.0]])
    remote = 3 * (1 - math.comb(64 - 16, 8) / math.comb(64, 8))  # other ranks holding one of a token's 8 experts
    assert cm.remote_ranks_per_token(MODEL, 4) == pytest.approx(remote, rel=1e-12)
    send = 100 * remote * 1000
    recv = 300 * remote / 3 * 1000  # each other rank sends a token here with probability remote / 3
    want = max(send, recv) * 3 / 200e9 * 1e6 + 7.0
    got = cm.all_to_all_us(MODEL, _p(a2a_dedup=True, calibration=Calibration(all_to_all_gbps=200.0)), tokens, 4)
    assert got == pytest.approx([want], rel=1e-12)


def test_allgather_reducescatter_moves_the_others_tokens_twice():
    tokens = np.array([[100.0, 400.0, 100.0, 100.0]])
    others = 600.0  # ranks 0, 2, 3 gather the other 600 tokens
    want = 2 * others * 1000 * 2 / 200e9 * 1e6 + 2 * 7.0
    assert cm.allgather_reducescatter_us(MODEL, _p(), tokens, 4) == pytest.approx([want], rel=1e-12)
    assert cm.allgather_reducescatter_us(MODEL, _p(), tokens, 1).tolist() == [0.0]


_Placement = FakePlacement  # tests/unit/placement_fake.py


def test_prefetch_is_the_busiest_side_over_the_calibrated_link():
    pl = _Placement(4, [48, 40, 48, 44], 50)  # a source serving 50 experts binds over any rank's 48 pulled
    assert cm.fetch_bytes(MODEL, pl, "fp8") == (48 * 1000, 50 * 1000)
    cal = Calibration(peer_copy_gbps=200.0, slice_efficiency=((1 << 20, 0.5), (4 << 20, 0.8)),
                      contention_slowdown={"sliced": 1.1, "unsliced": 2.0})
    p = _p(calibration=cal)
    assert cm.prefetch_us(MODEL, p, pl, 4 << 20) == pytest.approx(50e3 / (200e9 * 0.8) * 1.1 * 1e6, rel=1e-12)
    assert cm.prefetch_us(MODEL, p, pl, 1 << 20) == pytest.approx(50e3 / (200e9 * 0.5) * 1.1 * 1e6, rel=1e-12)
    assert cm.prefetch_us(MODEL, p, pl, 0) == pytest.approx(50e3 / 200e9 * 2.0 * 1e6, rel=1e-12)
    # no calibration: the GPU's link at this group, the model's expected contention, no slice efficiency
    assert cm.prefetch_us(MODEL, _p(), pl, 1 << 20) == pytest.approx(
        50e3 / 400e9 * expected_slowdown(4, True) * 1e6, rel=1e-12)
    assert cm.prefetch_us(MODEL, _p(weight_dtype="bf16"), pl, 0) == pytest.approx(
        100e3 / 400e9 * expected_slowdown(4, False) * 1e6, rel=1e-12)
    assert cm.prefetch_us(MODEL, p, _Placement(1, [0], 0), 4 << 20) == 0.0


def test_contention_factor_calibrated_or_expected():
    cal = _p(calibration=Calibration(contention_slowdown={"sliced": 1.3}))
    assert cm.contention_factor(cal, 8, True) == 1.3
    assert cm.contention_factor(cal, 8, False) == expected_slowdown(8, False)
    assert expected_slowdown(8, False) != expected_slowdown(8, True)


def test_overlap_hides_the_copy_under_slowed_compute_or_exposes_it():
    # compute 100 us slowed 1.25x covers a 120 us copy: 100 + 120 x (1 - 1/1.25) = 124; a 130 us copy is exposed
    assert cm.overlapped_us(np.array([100.0]), 120.0, 1.25).tolist() == pytest.approx([124.0])
    assert cm.overlapped_us(np.array([100.0]), 125.0, 1.25).tolist() == pytest.approx([125.0])  # the edge: hidden
    assert cm.overlapped_us(np.array([100.0]), 130.0, 1.25).tolist() == [130.0]
    assert cm.overlapped_us(np.array([100.0, 7.0]), 0.0, 1.25).tolist() == [100.0, 7.0]


def test_expert_gemm_roofline_without_a_floor():
    rows = np.array([6400.0])  # 100 rows per expert over 64 experts
    flops = 6.0 * 1000 * 300 * 6400
    act = 6400 * (1000 * 1 + 2 * 300 * 2 + 300 * 1 + 1000 * 2)  # FP8 inputs, BF16 outputs
    assert cm.expert_activation_bytes(MODEL, rows, "fp8") == pytest.approx([act])
    assert cm.expert_activation_bytes(MODEL, rows, "bf16") == pytest.approx([6400 * (2000 + 1200 + 600 + 2000)])
    nbytes = 64 * 1000 + act
    assert cm.experts_us(MODEL, _p(), rows, 64) == pytest.approx([max(flops / 800e12, nbytes / 3e12) * 1e6])


def test_ceil_div():
    assert (cm.ceil_div(7, 2), cm.ceil_div(8, 2), cm.ceil_div(5, 0)) == (4, 4, 0)


DENSE = SimpleNamespace(hidden_size=1000, moe_intermediate=300, num_experts=64, top_k=8, num_shared_experts=2,
                        dense_intermediate=4000, expert_params=3 * 1000 * 300, attention="gqa",
                        attention_params=lambda: 5_000_000)


class _AttnGpu(_Gpu):
    attention_flops_per_s = 500e12


def test_replicated_phases_are_rooflines_at_the_dense_dtype():
    p = cm.CostParams(gpu=_AttnGpu())  # FP8 experts: dense GEMMs FP8 (800 TFLOP/s, 1 byte per weight)
    t = np.array([10.0, 1000.0])  # memory-bound, then compute-bound
    # shared experts (2 of 3 x 1000 x 300) + router (1000 x 64, BF16)
    flops = (6 * 1000 * 300 * 2 + 2 * 1000 * 64) * t
    wbytes = 900_000 * 2 * 1 + 1000 * 64 * 2
    assert cm.other_us(DENSE, p, t) == pytest.approx(np.maximum(flops / 800e12, wbytes / 3e12) * 1e6, rel=1e-12)
    mlp = 6 * 1000 * 4000 * t
    assert cm.dense_mlp_us(DENSE, p, t) == pytest.approx(np.maximum(mlp / 800e12, 3 * 1000 * 4000 / 3e12) * 1e6,
                                                         rel=1e-12)
    bf16 = cm.CostParams(gpu=_AttnGpu(), weight_dtype="bf16")  # BF16: 400 TFLOP/s, 2 bytes per weight
    assert cm.dense_mlp_us(DENSE, bf16, t) == pytest.approx(
        np.maximum(mlp / 400e12, 2 * 3 * 1000 * 4000 / 3e12) * 1e6, rel=1e-12)
    # attention projections: 2 x 5M FLOPs per token, 5 MB of FP8 weights + 8 BF16 vectors of H per token; + core
    proj = np.maximum(2 * 5e6 * t / 800e12, (5e6 + t * 1000 * 2 * 4) / 3e12) * 1e6
    assert cm.attention_us(DENSE, p, t, 7.0) == pytest.approx(proj + 7.0, rel=1e-12)
    assert cm.dense_layer_us(DENSE, p, t, 7.0) == pytest.approx(
        proj + 7.0 + np.maximum(mlp / 800e12, 3 * 1000 * 4000 / 3e12) * 1e6, rel=1e-12)


def test_attention_core_at_the_gpus_or_the_measured_rate():
    flops = np.array([1e12, 4e12])
    assert cm.core_us(DENSE, cm.CostParams(gpu=_AttnGpu()), flops, 1, 1024) == pytest.approx([2000.0, 8000.0])
    measured = cm.CostParams(gpu=_AttnGpu(), calibration=Calibration(attention_tflops=250.0))
    assert cm.core_rate(DENSE, measured) == 250e12
    assert cm.core_us(DENSE, measured, flops, 1, 1024) == pytest.approx([4000.0, 16000.0])


def test_a_sub_microsecond_copy_and_a_two_rank_group_are_priced():
    # a 0.5 us copy under 100 us of compute slowed 1.25x: 100 + 0.5 x 0.2
    assert cm.overlapped_us(np.array([100.0]), 0.5, 1.25).tolist() == pytest.approx([100.1])
    pl = _Placement(2, [32, 32], 32)  # two ranks: each pulls the other's 32 experts
    assert cm.prefetch_us(MODEL, _p(), pl, 0) == pytest.approx(32e3 / 200e9 * expected_slowdown(2, False) * 1e6)
