"""Cost model: FLOPs and bytes of one DeepSeek-V3 layer checked against hand-computed numbers."""
import dataclasses

import numpy as np
import pytest

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.perf import cost_model as cm
from dwdp_trtllm.perf.calibration import Calibration
from dwdp_trtllm.perf.contention import expected_slowdown
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.core.placement import make_placement

V3 = get_model("deepseek-v3")


def test_expert_gemm_flops_by_hand():
    # 4096 tokens x top-8 x (gate + up + down = 3 GEMMs of 7168 x 2048) x 2 FLOPs per MAC
    assert cm.routed_expert_flops(V3, 4096) == 4096 * 8 * 3 * 7168 * 2048 * 2 == 2_886_218_022_912
    # shared expert (1) + router (7168 x 256) per token
    assert cm.shared_and_router_flops(V3, 10) == 10 * (6 * 7168 * 2048 + 2 * 7168 * 256)


def test_attention_flops_by_hand():
    # MLA projections: q_a 7168x1536, q_b 1536x(128*192), kv_a 7168x(512+64), kv_b 512x(128*256), o 16384x7168
    params = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert params == 187_105_280 == V3.attention_params()
    assert cm.attention_proj_flops(V3, 3) == 2 * params * 3
    # causal SDPA of one 1000-token request: heads * (d_qk + d_v) * isl^2 = 128 * (192 + 128) * 1e6
    assert cm.core_flops(V3, 1000) == 40_960_000_000
    gqa = get_model("qwen3-30b-a3b")
    assert cm.core_flops(gqa, 100) == 32 * (128 + 128) * 100 * 100


def test_fetch_bytes_g4_fp8_is_192_experts():
    # one FP8 expert: 3*7168*2048 bytes + fp32 128x128 block scales (32x56 for w13, 56x16 for w2)
    eb = 3 * 7168 * 2048 + 4 * (32 * 56 + 56 * 16)
    assert eb == 44_050_944 == V3.expert_bytes("fp8")
    placement = make_placement(DwdpConfig(dwdp_size=4), V3.num_experts)
    assert cm.fetch_bytes(V3, placement, "fp8") == (192 * eb, 192 * eb) == (8_457_781_248, 8_457_781_248)
    # redundancy shrinks the pull: with 16 extra local experts each rank pulls 176
    red = make_placement(DwdpConfig(dwdp_size=4, redundant_experts=16), V3.num_experts)
    assert cm.fetch_bytes(V3, red, "fp8")[0] == 176 * eb


def test_prefetch_time_is_bytes_over_peer_bandwidth_times_contention():
    gpu = get_gpu("h200")
    p = cm.CostParams(gpu=gpu, weight_dtype="fp8")
    placement = make_placement(DwdpConfig(dwdp_size=4), V3.num_experts)
    want = 8_457_781_248 / (450e9 * 375 / 450) * (1 + 0.5 / 81) * 1e6  # sliced: both slices C=3 w.p. 1/81
    assert cm.prefetch_us(V3, p, placement, 2 << 20) == pytest.approx(want, rel=1e-9)
    unsliced = cm.prefetch_us(V3, p, placement, 0)
    assert unsliced == pytest.approx(8_457_781_248 / 375e9 * expected_slowdown(4, False) * 1e6)
    assert unsliced > cm.prefetch_us(V3, p, placement, 2 << 20)
    # a measured peer bandwidth and slice efficiency override the datasheet
    cal = Calibration(peer_copy_gbps=187.5, slice_efficiency=((1 << 20, 0.5), (4 << 20, 1.0)))
    pc = dataclasses.replace(p, calibration=cal)
    assert cm.prefetch_us(V3, pc, placement, 2 << 20) == pytest.approx(want * 2 / 0.75, rel=1e-9)


def test_all_to_all_bytes_by_hand():
    gpu = get_gpu("h200")
    p = cm.CostParams(gpu=gpu, weight_dtype="fp8", dispatch_dtype="fp8")
    tokens = np.array([[1000.0, 1000.0, 1000.0, 1000.0]])
    # each rank sends 1000 tokens x 8 destinations x 3/4 remote x 7168 values, 1 B (FP8) out + 2 B (BF16) back
    nbytes = 1000 * 8 * 0.75 * 7168 * (1 + 2)
    assert cm.all_to_all_us(V3, p, tokens, 4)[0] == pytest.approx(nbytes / (450e9 * 0.77) * 1e6 + gpu.a2a_latency_us)
    # an imbalanced group is paced by the busiest sender or receiver
    skew = np.array([[4000.0, 0.0, 0.0, 0.0]])
    assert cm.all_to_all_us(V3, p, skew, 4)[0] > cm.all_to_all_us(V3, p, tokens, 4)[0]
    assert cm.all_to_all_us(V3, p, tokens[:, :1], 1)[0] == 0


def test_roofline_memory_bound_at_few_tokens_and_compute_bound_at_many():
    p = cm.CostParams(gpu=get_gpu("h200"), weight_dtype="fp8")
    eb = V3.expert_bytes("fp8")
    few = cm.experts_us(V3, p, 64 * 8, 256)  # 64 tokens: reading 256 experts dominates
    assert few == pytest.approx((256 * eb + cm.expert_activation_bytes(V3, 512, "fp8")) / p.hbm_bps * 1e6)
    many = cm.experts_us(V3, p, 65536 * 8, 256)
    assert many == pytest.approx(cm.routed_expert_flops(V3, 65536) / p.gemm_flops_per_s("fp8") * 1e6)


def test_calibrated_grouped_gemm_rate_is_interpolated_by_tokens():
    cal = Calibration(grouped_gemm_tflops={"bf16": ((2048.0, 400.0), (16384.0, 760.0))})
    p = cm.CostParams(gpu=get_gpu("h200"), weight_dtype="bf16", calibration=cal)
    # tokens = rows_per_expert * 32 for the top-8 / 256-expert shape the benchmark measures
    assert p.gemm_flops_per_s("bf16", 16384 / 32) == pytest.approx(760e12)
    assert p.gemm_flops_per_s("bf16", 2048 / 32) == pytest.approx(400e12)
    assert p.gemm_flops_per_s("bf16", 1e6) == pytest.approx(760e12)  # clamped
    mid = p.gemm_flops_per_s("bf16", 8192 / 32)  # log-linear: 2/3 of the way from 2048 to 16384
    assert mid == pytest.approx((400 + (760 - 400) * 2 / 3) * 1e12)


def test_overlap_hides_or_exposes_the_copy():
    f = 1.15
    assert cm.overlapped_us(10.0, 5.0, f) == pytest.approx(10 + 5 * (1 - 1 / f))
    assert cm.overlapped_us(1.0, 5.0, f) == pytest.approx(5.0)
    assert cm.overlapped_us(3.0, 0.0, f) == pytest.approx(3.0)


def test_bad_dtypes_rejected():
    with pytest.raises(ValueError, match="weight_dtype"):
        cm.CostParams(gpu=get_gpu("h200"), weight_dtype="int4")
    with pytest.raises(ValueError, match="dispatch_dtype"):
        cm.CostParams(gpu=get_gpu("h200"), dispatch_dtype="mxfp4")  # nvfp4 is a dispatch dtype (post-quant)
    with pytest.raises(ValueError, match="unknown GPU"):
        get_gpu("a100")


def test_hopper_has_no_fp4_and_falls_back_to_fp8_rate():
    h = get_gpu("h200")
    assert h.matmul_tflops("nvfp4") == h.matmul_tflops("fp8")
    b = get_gpu("gb200")
    assert b.matmul_tflops("nvfp4") == pytest.approx(2 * b.matmul_tflops("fp8"))
    # the efficiencies measured on our H200 are the defaults there
    assert h.matmul_tflops("bf16") == pytest.approx(760.0)
    assert h.matmul_tflops("fp8") == pytest.approx(1091.0)


def test_dedup_sends_once_per_remote_rank():
    from math import comb
    p = cm.CostParams(gpu=get_gpu("h200"), weight_dtype="fp8")
    pd = dataclasses.replace(p, a2a_dedup=True)
    # DSv3 on 4 ranks: a token misses a given rank's 64 experts with probability C(192,8)/C(256,8)
    ranks = 3 * (1 - comb(192, 8) / comb(256, 8))
    assert cm.remote_ranks_per_token(V3, 4) == pytest.approx(ranks)
    tokens = np.array([[1000.0] * 4])
    lat = p.gpu.a2a_latency_us
    full, dedup = cm.all_to_all_us(V3, p, tokens, 4)[0] - lat, cm.all_to_all_us(V3, pd, tokens, 4)[0] - lat
    assert dedup / full == pytest.approx(ranks / 6.0)  # 6 = 8 top-k x 3/4 remote
