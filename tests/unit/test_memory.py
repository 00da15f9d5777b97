"""The one memory model (memory.rank_memory) against hand-computed numbers and the models' published counts."""
from __future__ import annotations

import math

import pytest

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.deploy.memory import (GB, PARTS, MemoryBudgetError, activation_bytes, all_to_all_bytes, dense_param_groups,
                                dense_weight_bytes, dwdp_ranks, estimate_group_memory, fit_deployment,
                                kv_cache_floor_bytes, over_budget, rank_memory, smallest_fitting)
from dwdp_trtllm.spec.models import PRESETS, get_model
from dwdp_trtllm.core.placement import make_placement
from dwdp_trtllm.spec.schema import ConfigError
from dwdp_trtllm.spec.weight_formats import linear_bytes

H, I, V = 7168, 2048, 129280
# DeepSeek-R1, one routed expert in fp8: 3*7168*2048 e4m3 bytes + fp32 128x128 block scales
# w13_scale [4096/128, 7168/128] = [32, 56], w2_scale [56, 16]
R1_EXPERT_FP8 = 3 * H * I + 4 * (32 * 56 + 56 * 16)
R1 = PRESETS["deepseek-r1"]


def r1_non_routed_params() -> tuple[int, int, int]:
    """(linear, embedding + head, norms + routers) parameters of DeepSeek-R1 counted from its config.json dims,
    independently of models.py: MLA q_a [1536, 7168], q_b [128*192, 1536], kv_a [576, 7168], kv_b [128*256, 512],
    o [7168, 128*128]; 3 dense MLPs of 18432; 58 shared experts of 2048; routers [256, 7168]; norms."""
    attn = 1536 * H + 128 * 192 * 1536 + 576 * H + 128 * 256 * 512 + H * 128 * 128
    linear = 61 * attn + 3 * 3 * H * 18432 + 58 * 3 * H * I
    emb = 2 * V * H
    norms_routers = 61 * (2 * H + 1536 + 512) + H + 58 * (256 * H + 256)  # + q_a/kv_a norms, final norm, bias
    return linear, emb, norms_routers


def test_r1_dense_weights_agree_with_the_published_parameter_count():
    """DeepSeek-R1: 671 B parameters of which 58 x 256 routed experts hold 653.9 B: about 17.1 B non-routed;
    the FP8 release (linear layers e4m3 + 128x128 fp32 scales, embeddings/head/norms/routers bf16) ~19 GB."""
    linear, emb, small = r1_non_routed_params()
    routed = 58 * 256 * 3 * H * I
    assert routed == pytest.approx(653.9e9, rel=1e-3)
    assert 16.9e9 < linear + emb + small < 17.3e9
    assert R1.dense_params() == pytest.approx(linear + emb + small, rel=1e-4)  # models.py leaves out ~0.1 M of norms
    groups = dense_param_groups(R1)
    assert sum(c * o * i for o, i, c in groups["linear"]) == linear
    assert sum(c * o * i for g in groups.values() for o, i, c in g) == R1.dense_params()
    scales = 4 * (61 * (12 * 56 + 192 * 12 + 5 * 56 + 256 * 4 + 56 * 128) + 3 * 3 * 56 * 144 + 58 * 3 * 56 * 16)
    fp8 = dense_weight_bytes(R1, "fp8")
    assert fp8 == pytest.approx(linear + scales + 2 * (emb + small), rel=1e-4)
    assert 18.9e9 < fp8 < 19.3e9
    assert dense_weight_bytes(R1, "bf16") == 2 * R1.dense_params()
    assert dense_weight_bytes(R1, "fp8", engine_dense=True) == 2 * R1.dense_params()  # our engine: bf16 dense


def test_expert_bytes_per_format_with_scales():
    n = 3 * H * I
    assert R1.expert_bytes("fp8") == R1_EXPERT_FP8 == 44_050_944
    assert R1.expert_bytes("bf16") == 2 * n
    assert R1.expert_bytes("mxfp4") == n // 2 + (2 * I * H + H * I) // 32  # E8M0 per 32
    assert R1.expert_bytes("nvfp4") == n // 2 + (2 * I * H + H * I) // 16  # E4M3 per 16
    assert linear_bytes(100, 200, "fp8") == 20000 + 4 * 1 * 2 and linear_bytes(3, 33, "mxfp4") == math.ceil(99 / 2) + 3 * 2
    with pytest.raises(ValueError, match="int4"):
        R1.expert_bytes("int4")


def test_dwdp_and_dep_parts_by_hand_r1_fp8_g8():
    kw = dict(weight_dtype="fp8", max_num_tokens=16384, gpu_bytes=int(141e9))
    dw = rank_memory(R1, "dwdp", group_size=8, **kw)
    dep = rank_memory(R1, "dep", group_size=8, **kw)
    assert (dw.num_experts_held, dw.num_fetched_experts, dw.num_slots) == (32, 224, 2)
    # 58 trunk MoE layers + the release's MTP layer (a TensorRT-LLM server builds it as one more MoE layer)
    assert dw.routed_experts == dep.routed_experts == 32 * (58 + 1) * R1_EXPERT_FP8
    assert dw.prefetch_slots == 2 * 224 * R1_EXPERT_FP8 and dep.prefetch_slots == 0
    assert dep.all_to_all == 2 * 16384 * 8 * H * 2 and dw.all_to_all == 0
    for part in ("dense_weights", "activations", "kv_cache_floor"):
        assert getattr(dw, part) == getattr(dep, part)
    assert dw.kv_cache_floor == kv_cache_floor_bytes(R1, 16384) == 16384 * 61 * 576 * 2
    assert dw.activations == activation_bytes(R1, 16384)
    assert dw.total == sum(dw.parts().values()) and dw.fits and dep.fits
    d = dw.to_dict()
    assert d["unit"] == "GB" and d["total_gb"] == pytest.approx(dw.total / 1e9)
    assert set(d) >= {f"{p}_gb" for p in PARTS} and d["gpu_gb"] == 141.0
    assert "DWDP8 per rank 129.4 GB of 141.0 GB (fits)" in dw.describe()


def test_nothing_fits_4xh200_r1_fp8_and_the_smallest_count_per_mode():
    fit = fit_deployment(R1, DwdpConfig(dwdp_size=4), 141 * GB, weight_dtype="fp8", max_num_tokens=16384)
    assert not fit.fits and not fit.dep.fits and fit.dwdp.gpu_bytes == 141 * GB
    assert fit.dwdp.routed_experts / GB == pytest.approx(166.3, abs=0.05)  # 64 experts x 59 MoE layers (MTP's included)
    g_dw, g_dep = fit.smallest_fitting_dwdp_size, fit.smallest_fitting_dep_size
    kw = dict(weight_dtype="fp8", max_num_tokens=16384, gpu_bytes=141 * GB)
    assert rank_memory(R1, "dwdp", group_size=g_dw, **kw).fits and not rank_memory(R1, "dwdp", group_size=g_dw - 1, **kw).fits
    assert rank_memory(R1, "dep", group_size=g_dep, **kw).fits and not rank_memory(R1, "dep", group_size=g_dep - 1, **kw).fits
    assert 4 < g_dep <= g_dw <= 8
    assert fit.smallest_line() == f"smallest GPU count that fits: DWDP {g_dw} GPUs, DEP {g_dep} GPUs"
    assert smallest_fitting(R1, "dep", 10 * GB, weight_dtype="fp8", max_num_tokens=16384) is None


def test_worst_rank_redundancy_and_slots():
    cfg = DwdpConfig(dwdp_size=3, redundant_experts=8)
    ranks = dwdp_ranks(R1, cfg, weight_dtype="bf16", max_num_tokens=0)
    worst = rank_memory(R1, "dwdp", dwdp=cfg, weight_dtype="bf16", max_num_tokens=0)
    assert worst.total == max(m.total for m in ranks)
    base = rank_memory(R1, "dwdp", dwdp=DwdpConfig(dwdp_size=4), weight_dtype="bf16", max_num_tokens=0)
    red = rank_memory(R1, "dwdp", dwdp=DwdpConfig(dwdp_size=4, redundant_experts=8), weight_dtype="bf16", max_num_tokens=0)
    eb = 2 * 3 * H * I
    assert red.routed_experts - base.routed_experts == 8 * (58 + 1) * eb and base.prefetch_slots - red.prefetch_slots == 2 * 8 * eb
    five = get_model("deepseek-r1", 5)  # 2 MoE layers (no MTP layer when cut short): prefetch_depth 3 gives 2 slots, not 4
    assert rank_memory(five, "dwdp", dwdp=DwdpConfig(dwdp_size=2, prefetch_depth=3), weight_dtype="fp8", max_num_tokens=0).num_slots == 2
    assert rank_memory(get_model("deepseek-r1", 10), "dwdp", dwdp=DwdpConfig(dwdp_size=2, prefetch_depth=3),
                       weight_dtype="fp8", max_num_tokens=0).num_slots == 4
    assert rank_memory(R1, "dep", group_size=1, weight_dtype="fp8", max_num_tokens=8).all_to_all == 0  # EP1: no exchange
    assert all_to_all_bytes(R1, 1) == 2 * 8 * H * 2


def test_engine_ranks_keep_bf16_dense_and_no_kv_floor():
    spec = get_model("deepseek-r1", 5)
    cfg = DwdpConfig(dwdp_size=4, weight_dtype="fp8")
    for m in estimate_group_memory(spec, cfg, make_placement(cfg, 256), max_num_tokens=1024):
        assert m.dense_weights == 2 * spec.dense_params() and m.kv_cache_floor == 0
        assert m.routed_experts == 64 * 2 * R1_EXPERT_FP8 and m.prefetch_slots == 2 * 192 * R1_EXPERT_FP8
        assert m.activations == activation_bytes(spec, 1024)


def test_activation_estimate_by_hand():
    spec = get_model("deepseek-r1", 5)
    attn = 2 * 128 * 192 + 2 * 128 * 128 + 1536 + 512 + 64
    moe = 8 * (2 * H + 3 * I) + 3 * I
    assert moe > attn
    assert activation_bytes(spec, 1024) == 1024 * (2 * (3 * H + moe) + 4 * 256 + 12 * 8) == 393_314_304
    q = get_model("qwen3-30b-a3b", 2)  # GQA 32/4 x 128, 128 experts top-8, no shared
    assert activation_bytes(q, 3) == 3 * (2 * (3 * 2048 + max(32 * 128 * 2 + 2 * 4 * 128, 8 * (2 * 2048 + 3 * 768)))
                                          + 4 * 128 + 12 * 8)


def test_over_budget_error_and_bad_arguments():
    m = rank_memory(R1, "dwdp", group_size=4, weight_dtype="fp8", max_num_tokens=16384, gpu_bytes=141 * GB)
    e = over_budget(m, ["dwdp.dwdp_size=4"], file="x.yaml")
    assert isinstance(e, MemoryBudgetError) and isinstance(e, ConfigError) and e.file == "x.yaml"
    assert "DWDP4 per rank 209.8 GB of 141.0 GB (does NOT fit)" in str(e) and "dwdp.dwdp_size=4" in str(e)
    with pytest.raises(ValueError, match="mode 'tp'"):
        rank_memory(R1, "tp", group_size=2, weight_dtype="fp8", max_num_tokens=1)
    with pytest.raises(ValueError, match="weight_dtype 'int4'"):
        rank_memory(R1, "dep", group_size=2, weight_dtype="int4", max_num_tokens=1)
    with pytest.raises(ValueError, match="16 experts"):
        dwdp_ranks(get_model("tiny"), DwdpConfig(dwdp_size=2), weight_dtype="bf16", max_num_tokens=0,
                   placement=make_placement(DwdpConfig(dwdp_size=2), 256))


def test_prefetch_slots_are_priced_for_the_path_that_runs():
    """The adapter's merge fallback holds every expert in each slot ([E, ...], integration/full_slot.py), the other
    paths (and the embedded engine, gemm None) only the fetched ones: R1 FP8 at DWDP8 (32 local, 224 fetched, 2 slots)
    is 2 x 32 experts = 2.82 GB more per rank on merge; every other number is unchanged. Before: no gemm input, every
    path priced at the fetched experts."""
    from dwdp_trtllm.deploy.memory import slot_experts
    cfg = DwdpConfig(dwdp_size=8)
    base = rank_memory(R1, "dwdp", dwdp=cfg, weight_dtype="fp8", max_num_tokens=16384)
    for g in ("multi_buffer", "composite_view"):
        m = rank_memory(R1, "dwdp", dwdp=cfg, weight_dtype="fp8", max_num_tokens=16384, gemm=g)
        assert m.prefetch_slots == base.prefetch_slots == 2 * 224 * R1_EXPERT_FP8 and m.gemm == g
    merge = rank_memory(R1, "dwdp", dwdp=cfg, weight_dtype="fp8", max_num_tokens=16384, gemm="merge")
    assert merge.prefetch_slots == 2 * 256 * R1_EXPERT_FP8
    assert merge.total - base.total == 2 * 32 * R1_EXPERT_FP8 and round((merge.total - base.total) / GB, 2) == 2.82
    assert merge.to_dict()["gemm"] == "merge" and base.to_dict()["gemm"] is None
    assert slot_experts("merge", 224, 256) == 256 and slot_experts("multi_buffer", 224, 256) == 224
    assert slot_experts(None, 224, 256) == 224
    with pytest.raises(ValueError, match="gemm 'fused'"):
        slot_experts("fused", 224, 256)
    # the fit and the smallest size follow the priced path (a budget between the two totals)
    budget = (base.total + merge.total) // 2
    assert fit_deployment(R1, cfg, budget, weight_dtype="fp8", max_num_tokens=16384).fits
    assert not fit_deployment(R1, cfg, budget, weight_dtype="fp8", max_num_tokens=16384, gemm="merge").fits
