"""deploy/memory.py's per-rank prices pinned to hand computations on DeepSeek-R1's published shapes (hidden 7168,
expert intermediate 2048, 256 experts top-8, 61 layers of which 3 dense, one MTP layer, MLA kv_lora 512 + rope 64,
128 heads of 128 + 64 / 128, q_lora 1536, one shared expert) and Qwen3-30B-A3B's GQA KV (48 layers, 4 KV heads of
128): the KV-cache floor, a generation rank's batch, DEP's all-to-all buffers, one layer's activations, DEP's
experts held, the context server's KV fraction."""
import math

import pytest

from dwdp_trtllm.deploy import memory as mem
from dwdp_trtllm.spec.models import PRESETS

R1 = PRESETS["deepseek-r1"]
EXPERT_FP8 = 3 * 7168 * 2048 + 3 * (7168 // 128) * (2048 // 128) * 4  # FP8 weights + one fp32 scale per 128x128


def test_kv_cache_floor_mla_and_gqa():
    assert mem.kv_cache_floor_bytes(R1, 1000) == 1000 * 61 * (512 + 64) * 2
    assert mem.kv_cache_floor_bytes(PRESETS["qwen3-30b-a3b"], 1000) == 1000 * 48 * 2 * 4 * 128 * 2


def test_generation_batch_is_three_quarters_of_the_room():
    per_token = 61 * 576 * 2
    assert mem.kv_batch_fit(100e9, per_token, 9216) == int(75e9) // (per_token * 9216)
    assert mem.kv_batch_fit(-5e9, per_token, 9216) == 0
    assert mem.GEN_KV_FRACTION == 0.75


def test_all_to_all_buffers_and_activations():
    assert mem.all_to_all_bytes(R1, 16384) == 2 * 16384 * 8 * 7168 * 2
    # per token: 3H residual/norm/output + the larger of attention (q, k: 128 x 192 each way; v, out: 128 x 128;
    # latents 1536 + 512 + 64) and MoE (8 x (2H + 3I) + 3I shared), BF16; router logits 256 x 4 + top-8 ids 12 x 8
    attn = 2 * 128 * 192 + 2 * 128 * 128 + 1536 + 512 + 64
    moe = 8 * (2 * 7168 + 3 * 2048) + 3 * 2048
    per = 2 * (3 * 7168 + max(attn, moe)) + 4 * 256 + 12 * 8
    assert mem.activation_bytes(R1, 100) == 100 * per
    assert mem.activation_bytes(R1, 100, act_bytes=4) == 100 * (4 * (3 * 7168 + moe) + 4 * 256 + 12 * 8)
    assert mem.activation_bytes(R1, 0) == 0
    with pytest.raises(ValueError, match="max_num_tokens must be >= 0, got -1"):
        mem.activation_bytes(R1, -1)


def test_dep_rank_holds_its_share_of_experts_in_every_moe_layer():
    assert R1.expert_bytes("fp8") == EXPERT_FP8
    r8 = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=16384, group_size=8)
    assert (r8.num_experts_held, r8.routed_experts) == (32, 32 * (58 + 1) * EXPERT_FP8)  # trunk + MTP layer
    assert r8.all_to_all == 2 * 16384 * 8 * 7168 * 2 and r8.prefetch_slots == 0
    assert r8.kv_cache_floor == 16384 * 61 * 576 * 2 and r8.activations == mem.activation_bytes(R1, 16384)
    eng = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=16384, group_size=8, engine_dense=True)
    assert eng.routed_experts == 32 * 58 * EXPERT_FP8 and eng.kv_cache_floor == 0  # the embedded engine: trunk only
    r3 = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=100, group_size=3, kv_tokens=9000)
    assert r3.num_experts_held == 86 and r3.kv_cache_floor == 9000 * 61 * 576 * 2  # ceil(256 / 3); the KV asked
    assert mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=100, group_size=1).all_to_all == 0
    assert r8.total == sum(getattr(r8, p) for p in mem.PARTS)
    for kw, msg in (({"group_size": 0}, "group_size must be >= 1, got 0"), ({}, "rank_memory needs group_size or dwdp")):
        with pytest.raises(ValueError, match=msg):
            mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=100, **kw)
    with pytest.raises(ValueError, match="mode 'tp': expected one of"):
        mem.rank_memory(R1, "tp", weight_dtype="fp8", max_num_tokens=100, group_size=8)


def test_dwdp_rank_holds_its_experts_and_the_slots_of_its_path():
    # DWDP8, no redundancy: 32 local experts per layer, 224 fetched into each prefetch slot
    r = mem.rank_memory(R1, "dwdp", weight_dtype="fp8", max_num_tokens=16384, group_size=8)
    assert (r.num_experts_held, r.num_fetched_experts) == (32, 224)
    assert r.routed_experts == 32 * 59 * EXPERT_FP8 and r.all_to_all == 0
    assert r.prefetch_slots == r.num_slots * 224 * EXPERT_FP8
    merge = mem.rank_memory(R1, "dwdp", weight_dtype="fp8", max_num_tokens=16384, group_size=8, gemm="merge")
    assert merge.prefetch_slots == merge.num_slots * 256 * EXPERT_FP8  # merge: full [E] slots
    assert mem.slot_experts("multi_buffer", 224, 256) == 224 and mem.slot_experts(None, 224, 256) == 224
    with pytest.raises(ValueError, match="gemm 'fused': expected one of"):
        mem.slot_experts("fused", 224, 256)


def test_fits_at_the_budget_and_the_json_in_gb():
    r = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=16384, group_size=8)
    at = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=16384, group_size=8, gpu_bytes=r.total)
    below = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=16384, group_size=8, gpu_bytes=r.total - 1)
    assert r.fits is None and at.fits is True and below.fits is False
    d = at.to_dict()
    assert d["unit"] == "GB" and d["total_gb"] == round(r.total / 1e9, 6) and d["gpu_gb"] == round(r.total / 1e9, 6)
    assert d["all_to_all_gb"] == round(2 * 16384 * 8 * 7168 * 2 / 1e9, 6) and d["fits"] is True
    assert d["num_experts_held"] == 32 and d["mode"] == "dep" and d["group_size"] == 8 and d["gemm"] is None


def test_context_kv_fraction_rounds_up_to_a_hundredth():
    assert mem.context_kv_fraction(30, 100) == 0.3
    assert mem.context_kv_fraction(304, 1000) == 0.31
    assert mem.context_kv_fraction(1, 10**6) == 0.01 and mem.context_kv_fraction(0, 100) == 0.01
    assert mem.context_kv_fraction(150, 100) == 1.5
    assert mem.context_kv_fraction(1, 0) == math.inf


def test_context_kv_of_a_rank():
    r = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=16384, group_size=8, gpu_bytes=141 * 10**9)
    kv = mem.context_kv(R1, r, max_batch_size=4, max_seq_len=10000)  # FP8 KV: 1 byte per element
    assert kv.need == 4 * 10000 * 61 * 576 * 1
    assert kv.free == 141 * 10**9 - (r.total - r.kv_cache_floor)
    assert kv.batch_that_fits == kv.free // (10000 * 61 * 576) and kv.fits
    auto = mem.context_kv(R1, r, max_batch_size=4, max_seq_len=10000, kv_dtype="auto")
    assert auto.need == 2 * kv.need
    assert not mem.ContextKv(100, 0, 1, 10, "fp8").fits and mem.ContextKv(100, 100, 1, 10, "fp8").fits
    assert not mem.ContextKv(100, 101, 1, 10, "fp8").fits and mem.ContextKv(-5, 10, 1, 10, "fp8").batch_that_fits == 0
    with pytest.raises(ValueError, match="kv_dtype 'int8': expected one of"):
        mem.context_kv(R1, r, max_batch_size=4, max_seq_len=10000, kv_dtype="int8")


def test_gpu_count_lines():
    assert mem.gpu_count_text(7) == "7 GPUs" and mem.gpu_count_text(None) == "none up to 64 GPUs"
    assert mem.smallest_line(7, None) == "smallest GPU count that fits: DWDP 7 GPUs, DEP none up to 64 GPUs"
    assert mem.smallest_line("7 GPUs at ISL 4096", 6) == "smallest GPU count that fits: DWDP 7 GPUs at ISL 4096, DEP 6 GPUs"


def test_activations_where_attention_dominates_and_for_a_dense_model():
    from types import SimpleNamespace as NS

    gqa = NS(attention="gqa", hidden_size=1024, moe_intermediate=128, top_k=2, num_heads=64, head_dim=128,
             num_kv_heads=8, num_shared_experts=0, num_experts=8, num_moe_layers=1, dense_intermediate=0)
    # q and output 64 x 128 each, k and v 8 x 128 each: 18,432 > MoE 2 x (2048 + 384) = 4,864
    assert mem.activation_bytes(gqa, 10) == 10 * (2 * (3 * 1024 + 64 * 128 * 2 + 2 * 8 * 128) + 4 * 8 + 12 * 2)
    mla = NS(attention="mla", hidden_size=1024, moe_intermediate=128, top_k=2, num_heads=128, qk_nope_head_dim=128,
             qk_rope_head_dim=64, v_head_dim=128, q_lora_rank=1536, kv_lora_rank=512, num_shared_experts=1,
             num_experts=8, num_moe_layers=1, dense_intermediate=0)
    attn = 2 * 128 * 192 + 2 * 128 * 128 + 1536 + 512 + 64
    assert mem.activation_bytes(mla, 10) == 10 * (2 * (3 * 1024 + attn) + 4 * 8 + 12 * 2)
    dense = NS(**{**vars(gqa), "num_moe_layers": 0, "num_heads": 1, "num_kv_heads": 1, "dense_intermediate": 20000})
    assert mem.activation_bytes(dense, 10) == 10 * (2 * (3 * 1024 + 3 * 20000))  # no router, no top-k ids


def test_dep_rank_fields_and_two_ranks_exchange():
    r = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=4096, group_size=2)
    assert (r.mode, r.group_size, r.rank, r.weight_dtype, r.max_num_tokens) == ("dep", 2, 0, "fp8", 4096)
    assert (r.num_experts_held, r.num_fetched_experts, r.num_slots) == (128, 0, 0)
    assert r.all_to_all == 2 * 4096 * 8 * 7168 * 2  # two ranks already dispatch
    d = mem.rank_memory(R1, "dwdp", weight_dtype="fp8", max_num_tokens=4096, group_size=8)
    assert (d.weight_dtype, d.max_num_tokens, d.rank) == ("fp8", 4096, 0)  # every rank alike: the first is priced
    with pytest.raises(ValueError) as e:
        mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=100)
    assert str(e.value) == "rank_memory needs group_size or dwdp"
    with pytest.raises(ValueError) as e:
        mem.context_kv(R1, r, max_batch_size=1, max_seq_len=10)
    assert str(e.value) == "context_kv needs a rank priced against a GPU (rank_memory(gpu_bytes=...))"
    priced = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=4096, group_size=2, gpu_bytes=10**12)
    kv = mem.context_kv(R1, priced, max_batch_size=3, max_seq_len=777)
    assert (kv.max_batch_size, kv.max_seq_len, kv.kv_dtype) == (3, 777, "fp8") and isinstance(kv.need, int)
    assert mem.kv_batch_fit(0.5, 1, 1) == 0 and mem.context_kv_fraction(10, 1) == 10.0


def test_float32_activations_engine_dwdp_ranks_and_dep_sized_by_a_dwdp_config():
    from dwdp_trtllm.spec.config import DwdpConfig

    f32 = mem.rank_memory(R1, "dep", weight_dtype="float32", max_num_tokens=100, group_size=8)
    assert f32.activations == mem.activation_bytes(R1, 100, act_bytes=4)  # float32 activations: 4 bytes each
    eng = mem.rank_memory(R1, "dwdp", weight_dtype="fp8", max_num_tokens=4096, group_size=8, engine_dense=True)
    assert eng.kv_cache_floor == 0 and eng.routed_experts == 32 * 58 * EXPERT_FP8  # the engine: trunk only, no KV
    by_cfg = mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=100, dwdp=DwdpConfig(dwdp_size=4))
    assert (by_cfg.group_size, by_cfg.num_experts_held) == (4, 64)
    with pytest.raises(ValueError) as e:
        mem.rank_memory(R1, "dep", weight_dtype="fp8", max_num_tokens=-1, group_size=8)
    assert str(e.value) == "max_num_tokens must be >= 0, got -1"
