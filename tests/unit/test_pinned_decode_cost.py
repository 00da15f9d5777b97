"""sizing/decode_cost.py pinned to hand computations on stand-in tables whose numbers are written here: the MLA
module's bilinear interpolation in (log2 batch, log2 KV), its linear growth past the longest KV row (the core reads
every cached key: the decode step's KV length moves its price), the grid's hole filling, one step's composition
(MoE layers, dense layers, LM head, communication) and MTP's verify + draft passes over the expected tokens."""
import math
from types import SimpleNamespace

import pytest

from dwdp_trtllm.sizing import decode_cost as dc

# batch 1, 4 (log2 0, 2) x KV 1024, 4096 (log2 10, 12): ms per layer
ROWS = [[1, 1024, 1.0], [1, 4096, 3.0], [4, 1024, 2.0], [4, 4096, 7.0]]
MODEL = SimpleNamespace(name="stand-in", hidden_size=7168, num_shared_experts=1, num_moe_layers=3, first_k_dense=2,
                        num_experts=256, top_k=8, num_heads=128)


class _Tables:
    """gemm / MoE / NCCL prices of the stand-in: each a simple function of its size, written here."""

    def gemm_ms(self, op, dtype, m):
        return {"shared_fc1": 0.1, "shared_fc2": 0.2, "router": 0.01, "dense_fc1": 0.3, "dense_fc2": 0.4}[op] * m, 0

    def moe_ms(self, dtype, ep, dist, tokens):
        return (None, 0) if ep == 16 else (0.5 * tokens / ep, 0)

    def comm_ms(self, kind, tp, elements):
        return {"all_gather": 1e-6, "reduce_scatter": 2e-6}[kind] * elements, 0


def _cost(mtp=0, acceptance=0.85, lm=None, comm=None):
    gen = {"mla_generation_module": {"fp8_block/fp8": {"rows": ROWS}}}
    if lm:
        gen["gemm"] = {"lm_head": {"points": lm}}
    return dc.DecodeCost(MODEL, "h200", "fp8", _Tables(), gen, comm or {}, mtp, acceptance)


def test_module_is_bilinear_in_log_batch_and_log_kv():
    c = _cost()
    assert c.module_ms(1, 1024) == pytest.approx(1.0) and c.module_ms(4, 4096) == pytest.approx(7.0)
    assert c.module_ms(2, 1024) == pytest.approx(1.5)  # halfway in log2 batch
    assert c.module_ms(1, 2048) == pytest.approx(2.0)  # halfway in log2 KV
    assert c.module_ms(2, 2048) == pytest.approx((1 + 3 + 2 + 7) / 4)


def test_module_past_the_longest_kv_grows_linearly_with_it():
    c = _cost()
    assert c.module_ms(1, 8192) == pytest.approx(3.0 * 2)  # twice the longest row's KV: twice its time
    assert c.module_ms(4, 3 * 4096) == pytest.approx(7.0 * 3)
    assert c.module_ms(1, 512) == pytest.approx(1.0)  # below the grid: clamped, not extrapolated
    assert c.module_ms(1, 0.5) == pytest.approx(1.0)


def test_module_batch_past_the_grid_scales_and_below_clamps():
    c = _cost()
    assert c.module_ms(8, 1024) == pytest.approx(2.0 * 2)  # twice the largest batch
    assert c.module_ms(8, 8192) == pytest.approx(7.0 * 2 * 2)
    assert c.module_ms(0.5, 1024) == pytest.approx(1.0) and c.module_ms(0, 4096) == pytest.approx(3.0)


def test_grid_fills_a_missing_long_kv_row_at_the_last_rate():
    lb, lk, ms = dc._grid([[1, 1024, 1.0], [1, 4096, 3.0], [4, 1024, 2.0]])  # batch 4 lacks KV 4096
    assert lb.tolist() == [0.0, 2.0] and lk.tolist() == [10.0, 12.0]
    assert ms.tolist() == [[1.0, 3.0], [2.0, 2.0 * 4]]  # 2 ms at 1024 -> x 4096 / 1024
    _, _, first = dc._grid([[1, 1024, 5.0], [2, 1024, 6.0], [2, 4096, 9.0], [1, 4096, 8.0], [2, 256, 1.0]])
    assert first[0].tolist() == [5.0, 5.0, 8.0]  # batch 1 lacks KV 256: the nearest measured (1024), unscaled


def test_one_decode_step_composed_of_its_layers():
    c = _cost(lm=[[1, 0.5], [8, 1.5]])
    b, kv = 4.0, 1024
    module = 2.0
    # tp 1: EP1 MoE 0.5 x 4 tokens, shared 0.1 + 0.2 and router 0.01 per token, no communication
    moe1 = module + 0.5 * 4 + (0.1 + 0.2 + 0.01) * 4
    assert c.moe_layer_ms(1, b, kv) == pytest.approx(moe1)
    dense = module + (0.3 + 0.4) * 4
    head = 0.5 + (4 - 1) / 7 * 1.0
    assert c.forward_ms(1, b, kv) == pytest.approx(3 * moe1 + 2 * dense + head)
    assert c.step_ms(1, b, kv) == pytest.approx(3 * moe1 + 2 * dense + head)
    assert c.step_ms(1, 0.2, 1024) == pytest.approx(c.forward_ms(1, 1.0, 1024))  # a batch of at least one


def test_communication_from_nccl_rows_and_an_ep_size_without_moe_rows():
    c = _cost()
    assert c.comm_ms(1, 4.0) == (0.0, "none (one GPU)")
    el = 4 * 8 * 7168
    assert c.comm_ms(8, 4.0) == (pytest.approx(3e-6 * el), "NCCL all-gather + reduce-scatter rows (8 GPUs)")
    # EP 8: MoE 0.5 x (4 x 8) / 8 per rank; EP 16 has no rows: the EP1 op on this rank's 4 tokens
    assert c.moe_layer_ms(8, 4.0, 1024) == pytest.approx(2.0 + 0.5 * 4 + 0.31 * 4 + 3e-6 * el)
    assert c.moe_layer_ms(16, 4.0, 1024) == pytest.approx(2.0 + 0.5 * 4 + 0.31 * 4 + 3e-6 * 4 * 16 * 7168)


def test_deepep_low_latency_rows_when_the_ep_size_has_them():
    comm = {"deepep_ll": {"by_hidden": {"7168": {"fp8": {"8": {"dispatch": [[1, 0.02], [16, 0.05]]}},
                                                 "bfloat16": {"8": {"combine": [[1, 0.03], [16, 0.09]]}}}}}}
    c = _cost(comm=comm)
    ms, how = c.comm_ms(8, 6.0)
    assert ms == pytest.approx(0.02 + 5 / 15 * 0.03 + 0.03 + 5 / 15 * 0.06) and how == "DeepEP low-latency rows (EP8)"
    assert c.comm_ms(4, 6.0)[1] == "NCCL all-gather + reduce-scatter rows (4 GPUs)"  # no EP4 rows


class _Split(dc.DecodeCost):
    """forward / MoE layer replaced by linear prices, to see MTP's composition alone."""

    def forward_ms(self, tp, b, kv, attn_tp=1, moe_tp=1):
        return 10.0 + 2.0 * b + kv / 1000

    def moe_layer_ms(self, tp, b, kv, attn_tp=1, moe_tp=1):
        return 1.0 + 0.5 * b


def test_mtp_verifies_then_drafts_over_the_expected_tokens():
    c = _Split(MODEL, "h200", "fp8", _Tables(), {}, {}, 2, 0.8)
    assert c.tokens_per_step == pytest.approx(1 + 0.8 + 0.64)
    # verify: the target model at 4 x 3 tokens per rank; draft: 2 MoE-layer passes at 4; over 2.44 tokens
    step = (10 + 2 * 12 + 2.0) + 2 * (1 + 0.5 * 4)
    assert c.step_ms(8, 4.0, 2000) == pytest.approx(step / 2.44)
    plain = _Split(MODEL, "h200", "fp8", _Tables(), {}, {}, 0, 0.8)
    assert plain.tokens_per_step == 1.0 and plain.step_ms(8, 4.0, 2000) == pytest.approx(10 + 8 + 2.0)
    assert plain.describe_mtp() == "no MTP (--mtp 0)"
    assert c.describe_mtp() == "MTP 2 draft tokens per step, acceptance 0.8 (--mtp-acceptance): 2.44 tokens per step"
    one = _Split(MODEL, "h200", "fp8", _Tables(), {}, {}, 1, 0.85)
    assert one.describe_mtp() == "MTP 1 draft token per step, acceptance 0.85 (--mtp-acceptance): 1.85 tokens per step"
    assert dc.DEFAULT_MTP_ACCEPTANCE == 0.85 and math.isclose(dc.DecodeCost.acceptance, 0.85)


class _NoCommRows(_Tables):
    def comm_ms(self, kind, tp, elements):
        return None, 0


def test_without_communication_rows_the_modelled_all_to_all():
    """No DeepEP and no NCCL rows (e.g. GB200 past EP4): DeepEP-style dispatch at h200.yaml's all-to-all bandwidth
    (450 GB/s NVLink x 0.77 achievable for dispatch/combine) and 20 us fixed cost; FP8 dispatch (NVFP4 for NVFP4
    experts) + BF16 combine, each token sent once per remote rank holding one of its 8 experts."""
    remote = 7 * (1 - math.comb(256 - 32, 8) / math.comb(256, 8))
    for dtype, dispatch in (("fp8", 1.0), ("nvfp4", 0.5 + 1 / 16)):
        c = dc.DecodeCost(MODEL, "h200", dtype, _NoCommRows(), {}, {}, 0)
        ms, how = c.comm_ms(8, 6.0)
        want_us = 6 * remote * 7168 * (dispatch + 2) / (450e9 * 0.77) * 1e6 + 20.0
        assert ms == pytest.approx(want_us * 1e-3, rel=1e-9) and how == "modelled all-to-all (8 GPUs, no rows)"


def _linear_grid_cost():
    # ms = 2 log2(batch) + 3 log2(KV) + 1 on a 4 x 4 grid: bilinear interpolation in (log2 batch, log2 KV)
    # reproduces a function linear in both exactly, at any point inside
    rows = [[b, k, 2 * math.log2(b) + 3 * math.log2(k) + 1] for b in (1, 2, 4, 8) for k in (1024, 2048, 4096, 8192)]
    gen = {"mla_generation_module": {"fp8_block/fp8": {"rows": rows}}}
    return dc.DecodeCost(MODEL, "h200", "fp8", _Tables(), gen, {}, 0)


def test_module_inside_a_larger_grid_is_exact_on_a_linear_surface():
    c = _linear_grid_cost()
    for b, k in ((3, 3000), (1.5, 1500), (6, 6000), (2, 8192), (7.9, 1100), (1, 1024)):
        assert c.module_ms(b, k) == pytest.approx(2 * math.log2(b) + 3 * math.log2(k) + 1, rel=1e-12), (b, k)
    assert c.module_ms(16, 2048) == pytest.approx((2 * 3 + 3 * 11 + 1) * 2)  # past the largest batch: x 16 / 8
    assert c.module_ms(3, 16384) == pytest.approx((2 * math.log2(3) + 3 * 13 + 1) * 2)  # past the longest KV: x 2


def test_grid_fills_from_the_nearest_shorter_kv_not_the_shortest():
    _, _, ms = dc._grid([[1, 256, 1.0], [1, 1024, 2.0], [2, 256, 1.0], [2, 1024, 2.0], [2, 4096, 5.0]])
    assert ms[0].tolist() == [1.0, 2.0, 2.0 * 4]  # batch 1 lacks KV 4096: from 1024's 2 ms x 4, not 256's x 16


class _StrictTables(_Tables):
    """As _Tables, but only FP8 experts under balanced routing have MoE rows (anything else asked is a bug)."""

    def moe_ms(self, dtype, ep, dist, tokens):
        assert (dtype, dist) == ("fp8", "balanced"), (dtype, dist)
        return super().moe_ms(dtype, ep, dist, tokens)


def test_moe_rows_asked_for_the_weight_dtype_balanced_and_no_shared_experts():
    no_shared = SimpleNamespace(**{**vars(MODEL), "num_shared_experts": 0})
    gen = {"mla_generation_module": {"fp8_block/fp8": {"rows": ROWS}}}
    c = dc.DecodeCost(no_shared, "h200", "fp8", _StrictTables(), gen, {}, 0)
    assert c.moe_layer_ms(1, 4.0, 1024) == pytest.approx(2.0 + 0.5 * 4 + 0.01 * 4)  # router only
    assert c.moe_layer_ms(16, 4.0, 1024) == pytest.approx(2.0 + 0.5 * 4 + 0.01 * 4 + 3e-6 * 4 * 16 * 7168)
    assert c.forward_ms(1, 4.0, 1024) == pytest.approx(3 * (2.0 + 2.0 + 0.04) + 2 * (2.0 + 0.7 * 4))  # no LM head


class _SplitTp(dc.DecodeCost):
    def forward_ms(self, tp, b, kv, attn_tp=1, moe_tp=1):
        return 10.0 * tp + 2.0 * b + kv / 1000

    def moe_layer_ms(self, tp, b, kv, attn_tp=1, moe_tp=1):
        return 1.0 * tp + 0.5 * b + kv / 100


def test_mtp_passes_keep_the_servers_size_and_kv():
    one = _SplitTp(MODEL, "h200", "fp8", _Tables(), {}, {}, 1, 0.5)
    # verify at 4 x 2 tokens per rank, one draft pass at 4; over 1 + 0.5 tokens
    step = (10 * 8 + 2 * 8 + 2.0) + (8 + 2 + 20.0)
    assert one.step_ms(8, 4.0, 2000) == pytest.approx(step / 1.5)


def test_decode_cost_factory_names_the_flag_and_passes_its_settings():
    from dwdp_trtllm.errors import ConfigError
    from dwdp_trtllm.spec.models import PRESETS

    with pytest.raises(ConfigError) as e:
        dc.decode_cost(PRESETS["deepseek-r1"], "mi355x", "fp8")
    assert (e.value.key, e.value.expected) == ("--gpu", "TensorRT-LLM decode tables for deepseek-r1 (fp8) on mi355x; "
                                                        "shipped: DeepSeek-V3/R1 shapes on h100, h200, b200, gb200")
    with pytest.raises(ConfigError) as e:
        dc.decode_cost(PRESETS["qwen3-30b-a3b"], "h200", "bf16")
    assert (e.value.key, e.value.expected) == ("--model", "generation rows for qwen3-30b-a3b (bf16) on h200: only MLA "
                                                          "models (DeepSeek-V3/R1 shapes) have them")
    d = dc.decode_cost(PRESETS["deepseek-r1"], "H200", "fp8", 1, 0.7)
    assert (d.gpu, d.weight_dtype, d.mtp, d.acceptance) == ("h200", "fp8", 1, 0.7)
    assert "deepep_ll" in d.comm and dc.package_path("h200").name == "h200.json" and dc.package_path("tpu") is None


class _DtypeTables(_Tables):
    """GEMM rows: the router in BF16, the rest in the experts' dtype; no dense_fc2 row (priced 0)."""

    def gemm_ms(self, op, dtype, m):
        assert dtype == ("bf16" if op == "router" else "fp8"), (op, dtype)
        return (None, 0) if op == "dense_fc2" else super().gemm_ms(op, dtype, m)


def test_router_gemm_in_bf16_and_a_missing_row_priced_zero():
    gen = {"mla_generation_module": {"fp8_block/fp8": {"rows": ROWS}}}
    c = dc.DecodeCost(MODEL, "h200", "fp8", _DtypeTables(), gen, {}, 0)
    assert c.moe_layer_ms(1, 4.0, 1024) == pytest.approx(2.0 + 0.5 * 4 + 0.31 * 4)
    assert c.forward_ms(1, 4.0, 1024) == pytest.approx(3 * (2.0 + 2.0 + 0.31 * 4) + 2 * (2.0 + 0.3 * 4))
