"""Per-rank memory estimates against hand-computed numbers, and the fit check's error message."""
from __future__ import annotations

import pytest

from dwdp_trtllm.config import DwdpConfig
from dwdp_trtllm.memory import (GiB, MemoryBudgetError, activation_bytes, check_memory, estimate_group_memory,
                                estimate_rank_memory)
from dwdp_trtllm.models import get_model
from dwdp_trtllm.placement import make_placement
from dwdp_trtllm.schema import ConfigError

# DeepSeek-R1, one routed expert in fp8: 3*7168*2048 e4m3 bytes + fp32 128x128 block scales
# w13_scale [4096/128, 7168/128] = [32, 56], w2_scale [56, 16]
R1_EXPERT_FP8 = 3 * 7168 * 2048 + 4 * (32 * 56 + 56 * 16)
# replicated params of R1 truncated to 5 layers (3 dense + 2 MoE)
R1_ATTN = (7168 * 1536 + 1536 * 128 * 192) + (7168 * (512 + 64) + 512 * 128 * (128 + 128)) + 128 * 128 * 7168
R1_5L_DENSE_PARAMS = (2 * 129280 * 7168 + 5 * (R1_ATTN + 2 * 7168) + 3 * (3 * 7168 * 18432)
                      + 2 * (3 * 7168 * 2048 + 7168 * 256))


def r1(num_layers=5):
    return get_model("deepseek-r1", num_layers)


def test_deepseek_r1_truncated_g4_fp8_by_hand():
    spec = r1()
    cfg = DwdpConfig(dwdp_size=4, weight_dtype="fp8")
    p = make_placement(cfg, 256)
    assert R1_EXPERT_FP8 == 44_050_944
    ests = estimate_group_memory(spec, cfg, p)
    for m in ests:
        assert (m.num_local_experts, m.num_fetched_experts, m.num_moe_layers, m.num_slots) == (64, 192, 2, 2)
        assert m.expert_bytes == R1_EXPERT_FP8
        assert m.local_expert_bytes == 64 * 2 * R1_EXPERT_FP8 == 5_638_520_832
        assert m.prefetch_bytes == 2 * 192 * R1_EXPERT_FP8 == 16_915_562_496
        assert m.dense_bytes == 2 * R1_5L_DENSE_PARAMS  # dense weights stay bf16 with fp8 experts
        assert m.activation_bytes == 0
        assert m.total_bytes == m.local_expert_bytes + m.prefetch_bytes + m.dense_bytes
        assert m.breakdown()["total"] == m.total_bytes


def test_activation_estimate_by_hand():
    spec = r1()
    attn = 2 * 128 * 192 + 2 * 128 * 128 + 1536 + 512 + 64
    moe = 8 * (2 * 7168 + 3 * 2048) + 3 * 2048
    assert moe > attn
    per_token = 2 * (3 * 7168 + moe) + 4 * 256 + 12 * 8
    assert activation_bytes(spec, 1024) == 1024 * per_token == 393_314_304
    cfg = DwdpConfig(dwdp_size=4, weight_dtype="fp8")
    m = estimate_rank_memory(spec, cfg, make_placement(cfg, 256), 0, max_num_tokens=1024)
    assert m.activation_bytes == 1024 * per_token
    # float32 weights: activations and dense weights in fp32
    m32 = estimate_rank_memory(spec, cfg, make_placement(cfg, 256), 0, weight_dtype="float32", max_num_tokens=2)
    assert m32.activation_bytes == 2 * (4 * (3 * 7168 + moe) + 4 * 256 + 12 * 8)
    assert m32.dense_bytes == 4 * R1_5L_DENSE_PARAMS and m32.expert_bytes == 4 * 3 * 7168 * 2048


def test_gqa_activation_uses_kv_heads():
    spec = get_model("qwen3-30b-a3b", 2)  # GQA 32/4 x 128, 128 experts top-8, no shared
    attn = 32 * 128 * 2 + 2 * 4 * 128
    moe = 8 * (2 * 2048 + 3 * 768)
    assert activation_bytes(spec, 3, act_bytes=2) == 3 * (2 * (3 * 2048 + max(attn, moe)) + 4 * 128 + 12 * 8)


def test_redundancy_moves_bytes_from_prefetch_to_local():
    spec = r1(61)
    base = estimate_rank_memory(spec, DwdpConfig(dwdp_size=4), make_placement(DwdpConfig(dwdp_size=4), 256), 1)
    cfg = DwdpConfig(dwdp_size=4, redundant_experts=8)
    red = estimate_rank_memory(spec, cfg, make_placement(cfg, 256), 1)
    eb = spec.expert_bytes("bf16")
    assert eb == 2 * 3 * 7168 * 2048
    assert red.local_expert_bytes - base.local_expert_bytes == 8 * 58 * eb
    assert base.prefetch_bytes - red.prefetch_bytes == 2 * 8 * eb
    assert red.dense_bytes == base.dense_bytes


def test_prefetch_depth_and_single_moe_layer_slots():
    spec = r1(5)
    cfg = DwdpConfig(dwdp_size=2, prefetch_depth=3)  # 4 slots but only 2 MoE layers
    assert estimate_rank_memory(spec, cfg, make_placement(cfg, 256), 0).num_slots == 2
    cfg = DwdpConfig(dwdp_size=2, prefetch_depth=3)
    assert estimate_rank_memory(r1(10), cfg, make_placement(cfg, 256), 0).num_slots == 4


def test_check_memory_fits_at_exact_total_and_fails_one_byte_below():
    spec = r1()
    cfg = DwdpConfig(dwdp_size=4, weight_dtype="fp8")
    p = make_placement(cfg, 256)
    total = estimate_rank_memory(spec, cfg, p, 0, max_num_tokens=4096).total_bytes
    assert len(check_memory(spec, cfg, p, total, max_num_tokens=4096)) == 4
    with pytest.raises(MemoryBudgetError) as ei:
        check_memory(spec, cfg, p, total - 1, max_num_tokens=4096, file="bench.yaml")
    e = ei.value
    assert isinstance(e, ConfigError) and e.file == "bench.yaml"
    msg = str(e)
    for frag in (f"dwdp_rank 0 needs about {total / GiB:.2f} GiB ({total} bytes)",
                 "local experts 64 x 2 MoE layers", "prefetch slots 2 x 192 experts",
                 f"GPU memory of {(total - 1) / GiB:.2f} GiB ({total - 1} bytes)",
                 "dwdp.dwdp_size=4", "dwdp.redundant_experts=0", "dwdp.prefetch_depth=1", "dwdp.weight_dtype=fp8",
                 "model.num_layers=5", "workload.max_num_tokens=4096"):
        assert frag in msg, (frag, msg)


def test_check_memory_full_r1_on_h200_names_upstream_keys():
    """Full R1 at G=3 in bf16 cannot fit 141 GiB; the worst rank is reported with the upstream keys."""
    spec = r1(61)
    cfg = DwdpConfig(dwdp_size=3, num_experts_per_worker=88, num_prefetch_experts=84)
    p = make_placement(cfg, 256)
    with pytest.raises(MemoryBudgetError) as ei:
        check_memory(spec, cfg, p, 141 * GiB)
    msg = str(ei.value)
    assert "dwdp.num_experts_per_worker=88" in msg and "141.00 GiB" in msg and "local experts 88 x 58" in msg


def test_bad_arguments():
    spec = r1()
    cfg = DwdpConfig(dwdp_size=2)
    p = make_placement(cfg, 256)
    with pytest.raises(ValueError, match="dwdp_rank 2"):
        estimate_rank_memory(spec, cfg, p, 2)
    with pytest.raises(ValueError, match="weight_dtype 'int4'"):
        estimate_rank_memory(spec, cfg, p, 0, weight_dtype="int4")
    with pytest.raises(ValueError, match="16 experts"):
        estimate_rank_memory(get_model("tiny"), cfg, p, 0)
    with pytest.raises(ValueError, match="gpu_memory_bytes"):
        check_memory(spec, cfg, p, 0)
