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


# ---- MoE TP / attention TP servers (`--gen-moe-tp`, `--gen-attn-tp`) on stand-in rows written here -------------
def _lin(a):
    """A curve a x ms at x (linear through its two rows, and past the last at the same rate)."""
    return [[1, a], [64, 64 * a]]


def _shaped_gen(heads=("64", "16", "8")):
    scaled = {"64": 0.5, "16": 0.25, "8": 0.125}
    by_heads = {h: {"fp8_block/fp8": {"rows": [[b, k, v * scaled[h]] for b, k, v in ROWS]}} for h in heads}
    gemm = {"shared_fc1/tp8": {"points": _lin(0.02)}, "shared_fc2/tp8": {"points": _lin(0.03)},
            "dense_fc1/tp8": {"points": _lin(0.04)}, "dense_fc2/tp8": {"points": _lin(0.05)},
            "lm_head/tp8": {"points": _lin(0.06)}, "lm_head": {"points": _lin(0.7)}}
    moe_tp = {"fp8": {"by_shape": {"2x4": {"balanced": _lin(0.2), "power_law_1.01": _lin(0.3)}}}}
    return {"mla_generation_module": {"fp8_block/fp8": {"rows": ROWS}}, "mla_generation_module_by_heads": by_heads,
            "gemm": gemm, "moe_tp": moe_tp}


SHAPED_COMM = {"custom_allreduce": {"by_gpus": {"8": [[1, 1e-5], [1e6, 10.0]]}}}  # 1e-5 ms per BF16 element


def _shaped(mtp=0, acceptance=0.85, routing="balanced", tables=None, gen=None, comm=None):
    return dc.DecodeCost(MODEL, "h200", "fp8", tables or _Tables(), gen or _shaped_gen(),
                         SHAPED_COMM if comm is None else comm, mtp, acceptance, routing)


AR8 = 2 * 1e-5 * 4 * 7168  # two all-reduces of 4 tokens x hidden over 8 GPUs


def test_attention_tp_with_moe_tp_composes_its_rows():
    """tp 8, attention TP 8, MoE TP 2 x EP 4, 4 requests in the group, KV 1024: the 16-head module (0.25 x the
    128-head rows), the 2x4 MoE row at the group's 4 tokens, shared experts split over 8, router whole, two
    all-reduces per layer; dense layers with split MLP and their two all-reduces; the LM head split over 8."""
    c = _shaped()
    att, moe, other = 0.25 * 2.0, 0.2 * 4, (0.02 + 0.03) * 4 + 0.01 * 4
    assert c.module_ms(4, 1024, 16) == pytest.approx(att)
    assert c.shape_comm_ms(8, 8, 2, 4.0) == (pytest.approx(AR8), "2 custom all-reduces (8 GPUs)")
    assert c.allreduce_ms(8, 1000.0) == pytest.approx(1e-2)
    layer = att + moe + other + AR8
    assert c.moe_layer_ms(8, 4.0, 1024, attn_tp=8, moe_tp=2) == pytest.approx(layer)
    dense = att + (0.04 + 0.05) * 4 + AR8
    want = 3 * layer + 2 * dense + 0.06 * 4
    assert c.forward_ms(8, 4.0, 1024, attn_tp=8, moe_tp=2) == pytest.approx(want)
    assert c.step_ms(8, 4.0, 1024, attn_tp=8, moe_tp=2) == pytest.approx(want)
    # the same instance, now attention DP: nothing of the attention-TP prices is reused
    dep_layer = 2.0 + 0.2 * 32 + 0.31 * 4 + 3e-6 * 4 * 8 * 7168
    assert c.moe_layer_ms(8, 4.0, 1024, attn_tp=1, moe_tp=2) == pytest.approx(dep_layer)
    assert c.module_ms(4, 1024) == pytest.approx(2.0) and c.module_ms(4, 1024, 128) == pytest.approx(2.0)


def test_attention_dp_with_moe_tp_composes_its_rows():
    """tp 8, attention DP, MoE TP 2: every rank's 4 tokens (32) enter the 2x4 MoE row; 128-head module; shared
    experts and dense MLP from the whole-GEMM rows; NCCL all-gather + reduce-scatter of 32 x hidden; whole LM head."""
    for routing, rate in (("balanced", 0.2), ("power_law_1.01", 0.3)):
        c = _shaped(routing=routing)
        comm = 3e-6 * 4 * 8 * 7168
        assert c.shape_comm_ms(8, 1, 2, 4.0) == (pytest.approx(comm), "NCCL all-gather + reduce-scatter rows (8 GPUs)")
        layer = 2.0 + rate * 32 + 0.31 * 4 + comm
        assert c.moe_layer_ms(8, 4.0, 1024, moe_tp=2) == pytest.approx(layer)
        want = 3 * layer + 2 * (2.0 + 0.7 * 4) + 0.7 * 4
        assert c.step_ms(8, 4.0, 1024, moe_tp=2) == pytest.approx(want)
        # the same instance at attention TP 8: its own dense parts, not the attention-DP ones
        att = 0.25 * 2.0
        tp_layer = att + rate * 4 + 0.24 + AR8
        assert c.forward_ms(8, 4.0, 1024, 8, 2) == pytest.approx(3 * tp_layer + 2 * (att + 0.36 + AR8) + 0.24)


def test_attention_tp_without_moe_tp_uses_the_ep_rows_at_the_groups_tokens():
    c = _shaped()
    layer = 0.25 * 2.0 + 0.5 * 4 / 8 + 0.24 + AR8  # EP 8 MoE row at 4 tokens
    assert c.moe_layer_ms(8, 4.0, 1024, attn_tp=8, moe_tp=1) == pytest.approx(layer)
    assert c.shape_why(8, 8, 1) is None
    assert c.shape_comm_ms(8, 1, 1, 4.0) == c.comm_ms(8, 4.0)  # DEP: its own communication


def test_mtp_under_attention_tp_verifies_and_drafts_with_the_shape():
    c = _shaped(mtp=1, acceptance=0.5)
    att4, att2 = 0.25 * 2.0, 0.25 * 1.5  # module at batch 4 (verify: 2 x 2 tokens) and 2 (draft), KV 1024
    verify = 3 * (att4 + 0.8 + 0.24 + AR8) + 2 * (att4 + 0.36 + AR8) + 0.24
    draft = att2 + 0.2 * 2 + 0.05 * 2 + 0.01 * 2 + AR8 / 2
    assert c.step_ms(8, 2.0, 1024, attn_tp=8, moe_tp=2) == pytest.approx((verify + draft) / 1.5)


class _OnlyAg(_Tables):
    def comm_ms(self, kind, tp, elements):
        return (None, 0) if kind == "reduce_scatter" else super().comm_ms(kind, tp, elements)


class _OnlyRs(_Tables):
    def comm_ms(self, kind, tp, elements):
        return (None, 0) if kind == "all_gather" else super().comm_ms(kind, tp, elements)


def test_shapes_without_rows_are_refused_naming_the_flag_and_the_rows():
    from dwdp_trtllm.errors import ConfigError

    c = _shaped()
    assert c.shape_why(8, 1, 3) == ("--gen-moe-tp", "a divisor of the generation server's 8 GPUs (--gen-tp), got 3")
    assert c.shape_why(8, 4, 1) == ("--gen-attn-tp", "1 (attention DP) or the server's 8 GPUs (attention TP over the "
                                                     "whole server; TP groups inside a server are not priced), got 4")
    assert c.shape_why(3, 3, 1) == ("--gen-attn-tp", "MLA generation rows at 128 / 3 heads per GPU on h200 (shipped: "
                                                     "64, 16, 8 heads)")
    assert c.shape_why(4, 4, 1) == ("--gen-attn-tp", "MLA generation rows at 128 / 4 heads per GPU on h200 (shipped: "
                                                     "64, 16, 8 heads)")
    assert c.shape_why(2, 2, 1) == ("--gen-attn-tp", "all-reduce rows over 2 GPUs on h200 (attention TP 2)")
    assert c.shape_why(8, 1, 4) == ("--gen-moe-tp", "fused MoE rows at MoE TP 4 x EP 2 (fp8, balanced) on h200")
    assert _shaped(routing="power_law_1.2").shape_why(8, 1, 2) == (
        "--gen-moe-tp", "fused MoE rows at MoE TP 2 x EP 4 (fp8, power_law_1.2) on h200")
    for t in (_NoCommRows(), _OnlyAg(), _OnlyRs()):
        assert _shaped(tables=t).shape_why(8, 1, 2) == (
            "--gen-moe-tp", "NCCL all-gather / reduce-scatter rows over 8 GPUs on h200 (attention DP with MoE TP 2)")
        with pytest.raises(ConfigError) as e:
            _shaped(tables=t).shape_comm_ms(8, 1, 2, 4.0)
        assert (e.value.key, e.value.expected) == ("--gen-moe-tp", "NCCL all-gather / reduce-scatter rows over 8 GPUs "
                                                                   "on h200")
    assert _shaped(tables=_NoCommRows()).shape_why(8, 8, 2) is None  # attention TP needs no NCCL rows
    for shape in ((8, 8, 2), (8, 1, 2), (8, 1, 1), (8, 8, 1)):
        assert c.shape_why(*shape) is None, shape
    with pytest.raises(ConfigError) as e:
        _shaped().step_ms(8, 4.0, 1024, attn_tp=1, moe_tp=4)
    assert (e.value.key, e.value.expected) == c.shape_why(8, 1, 4)


def test_missing_head_rows_and_split_gemms_are_refused_naming_attention_tp():
    from dwdp_trtllm.errors import ConfigError

    c = _shaped()
    with pytest.raises(ConfigError) as e:
        c.module_ms(4, 1024, 32)
    assert (e.value.key, e.value.expected) == ("--gen-attn-tp", "MLA generation rows at 32 heads per GPU on h200 "
                                                                "(shipped: 64, 16, 8)")
    bare = dc.DecodeCost(MODEL, "h200", "fp8", _Tables(), {"mla_generation_module": {"fp8_block/fp8": {"rows": ROWS}}},
                         {}, 0)
    with pytest.raises(ConfigError) as e:
        bare.module_ms(4, 1024, 16)
    assert e.value.expected == "MLA generation rows at 16 heads per GPU on h200 (shipped: none)"
    assert bare.shape_why(8, 8, 1) == ("--gen-attn-tp", "MLA generation rows at 128 / 8 heads per GPU on h200 "
                                                        "(shipped: none heads)")
    for op in ("dense_fc1", "dense_fc2", "shared_fc1", "shared_fc2"):
        gen = _shaped_gen()
        del gen["gemm"][f"{op}/tp8"]
        with pytest.raises(ConfigError) as e:
            _shaped(gen=gen).forward_ms(8, 4.0, 1024, attn_tp=8, moe_tp=2)
        assert (e.value.key, e.value.expected) == ("--gen-attn-tp", f"{op} GEMM rows split over 8 GPUs on h200")
    gen = _shaped_gen()
    del gen["gemm"]["lm_head/tp8"]  # no split LM head row: priced 0, as the whole one
    att = 0.25 * 2.0
    assert _shaped(gen=gen).forward_ms(8, 4.0, 1024, 8, 2) == pytest.approx(
        3 * (att + 0.8 + 0.24 + AR8) + 2 * (att + 0.36 + AR8))


def test_stated_allgather_reducescatter_replaces_deepep_rows():
    deepep = {"deepep_ll": {"by_hidden": {"7168": {"fp8": {"8": {"dispatch": [[1, 0.02], [16, 0.05]]}},
                                                   "bfloat16": {"8": {"combine": [[1, 0.03], [16, 0.09]]}}}}}}
    c = dc.DecodeCost(MODEL, "h200", "fp8", _Tables(), {}, deepep, 0, dep_comm="allgather_reducescatter")
    assert c.comm_ms(8, 6.0) == (pytest.approx(3e-6 * 6 * 8 * 7168),
                                 "NCCL all-gather + reduce-scatter rows (8 GPUs, --dep-comm)")
    assert c.comm_ms(1, 6.0) == (0.0, "none (one GPU)")
    for t in (_NoCommRows(), _OnlyAg(), _OnlyRs()):  # no NCCL rows: the DeepEP rows after all
        c = dc.DecodeCost(MODEL, "h200", "fp8", t, {}, deepep, 0, dep_comm="allgather_reducescatter")
        assert c.comm_ms(8, 6.0)[1] == "DeepEP low-latency rows (EP8)"


def test_attention_tp_over_two_gpus_prices_its_all_reduces():
    """tp 2 with attention TP 2 (64 heads per GPU) and no MoE TP: the smallest attention-TP server still all-reduces
    twice per layer, dense layers included, and splits its GEMMs over 2."""
    gen = _shaped_gen()
    gen["gemm"].update({f"{op}/tp2": {"points": _lin(a)} for op, a in
                        (("shared_fc1", 0.02), ("shared_fc2", 0.03), ("dense_fc1", 0.04), ("dense_fc2", 0.05),
                         ("lm_head", 0.06))})
    c = _shaped(gen=gen, comm={"custom_allreduce": {"by_gpus": {"2": [[1, 2e-5], [1e6, 20.0]]}}})
    assert c.shape_why(2, 2, 1) is None
    assert _shaped(gen=_shaped_gen(heads=("16", "8")), comm=c.comm).shape_why(2, 2, 1) == (
        "--gen-attn-tp", "MLA generation rows at 128 / 2 heads per GPU on h200 (shipped: 16, 8 heads)")
    ar = 2 * 2e-5 * 4 * 7168
    assert c.shape_comm_ms(2, 2, 1, 4.0) == (pytest.approx(ar), "2 custom all-reduces (2 GPUs)")
    att = 0.5 * 2.0
    layer = att + 0.5 * 4 / 2 + 0.24 + ar  # EP 2 MoE row at the group's 4 tokens
    assert c.forward_ms(2, 4.0, 1024, attn_tp=2) == pytest.approx(3 * layer + 2 * (att + 0.36 + ar) + 0.24)


def test_shaped_prices_ask_for_the_stated_rows_and_skip_absent_shared_experts():
    no_shared = SimpleNamespace(**{**vars(MODEL), "num_shared_experts": 0})
    c = dc.DecodeCost(no_shared, "h200", "fp8", _StrictTables(), _shaped_gen(), SHAPED_COMM, 0)
    assert c.moe_layer_ms(8, 4.0, 1024, attn_tp=8) == pytest.approx(0.5 + 0.25 + 0.01 * 4 + AR8)  # router only
    assert c.shape_comm_ms(1, 1, 1, 4.0) == (0.0, "none (one GPU)")  # the DEP shape: DEP's communication
    assert c.shape_why(8) is None and c.shape_why(3) is None  # defaults: attention DP, no MoE TP


def test_missing_sections_of_the_tables_are_refusals_not_crashes():
    from dwdp_trtllm.errors import ConfigError

    for drop in ("moe_tp", "gemm"):
        gen = _shaped_gen()
        del gen[drop]
        c = _shaped(gen=gen)
        if drop == "moe_tp":
            assert c.shape_why(8, 1, 2) == ("--gen-moe-tp", "fused MoE rows at MoE TP 2 x EP 4 (fp8, balanced) on h200")
        else:
            with pytest.raises(ConfigError) as e:
                c.moe_layer_ms(8, 4.0, 1024, attn_tp=8, moe_tp=2)
            assert e.value.expected == "shared_fc1 GEMM rows split over 8 GPUs on h200"
    for moe_tp in ({"fp8": {}}, {"bf16": {"by_shape": {}}}):
        assert _shaped(gen={**_shaped_gen(), "moe_tp": moe_tp}).shape_why(8, 1, 2)[0] == "--gen-moe-tp"
    for comm in ({}, {"custom_allreduce": {}}):
        assert _shaped(comm=comm).shape_why(8, 8, 2) == ("--gen-attn-tp", "all-reduce rows over 8 GPUs on h200 "
                                                                          "(attention TP 8)")


class _TpComm(_Tables):
    """NCCL rows whose price grows with the GPU count (tp / 8 x the stand-in's)."""

    def comm_ms(self, kind, tp, elements):
        return super().comm_ms(kind, tp, elements)[0] * tp / 8, 0


def test_dep_communication_falls_back_row_by_row():
    half = {"deepep_ll": {"by_hidden": {"7168": {"fp8": {"8": {"dispatch": [[1, 0.02], [16, 0.05]]}}}}}}
    c = dc.DecodeCost(MODEL, "h200", "fp8", _TpComm(), {}, half, 0)  # dispatch rows without combine: NCCL
    assert c.comm_ms(8, 6.0) == (pytest.approx(3e-6 * 6 * 8 * 7168), "NCCL all-gather + reduce-scatter rows (8 GPUs)")
    assert c.comm_ms(2, 6.0) == (pytest.approx(3e-6 * 6 * 2 * 7168 * 2 / 8),
                                 "NCCL all-gather + reduce-scatter rows (2 GPUs)")
    for t in (_OnlyAg(), _OnlyRs()):  # one NCCL row missing: the modelled all-to-all
        assert dc.DecodeCost(MODEL, "h200", "fp8", t, {}, {}, 0).comm_ms(8, 6.0)[1] == \
            "modelled all-to-all (8 GPUs, no rows)"


def _curved_cost():
    # f(batch) x g(KV), neither linear in log2: f 1, 2, 10 at batch 1, 2, 4; g 1, 2, 10 at KV 1024, 2048, 4096
    f, g = {1: 1.0, 2: 2.0, 4: 10.0}, {1024: 1.0, 2048: 2.0, 4096: 10.0}
    rows = [[b, k, f[b] * g[k]] for b in f for k in g]
    return dc.DecodeCost(MODEL, "h200", "fp8", _Tables(), {"mla_generation_module": {"fp8_block/fp8": {"rows": rows}}},
                         {}, 0)


def test_module_interpolates_inside_the_bracketing_rows_of_a_curved_grid():
    c = _curved_cost()
    assert c.module_ms(2 ** 0.5, 1024) == pytest.approx(1.5)  # first batch interval: 1 + 0.5 x (2 - 1)
    assert c.module_ms(2 ** 1.5, 1024) == pytest.approx(6.0)  # last batch interval: 2 + 0.5 x (10 - 2)
    assert c.module_ms(1, 2 ** 10.5) == pytest.approx(1.5)  # first KV interval
    assert c.module_ms(1, 2 ** 11.5) == pytest.approx(6.0)  # last KV interval
    lowest = dc.DecodeCost(MODEL, "h200", "fp8", _Tables(), {"mla_generation_module": {"fp8_block/fp8": {
        "rows": [[2, 1024, 4.0], [2, 4096, 6.0], [8, 1024, 8.0], [8, 4096, 9.0]]}}}, {}, 0)
    assert lowest.module_ms(1, 1024) == pytest.approx(4.0)  # below the smallest batch (2): clamped to its row


def test_stated_pricing_without_tables_is_balanced_rows():
    assert dc.stated_pricing(SimpleNamespace(tables=None, dep_comm=None)) == {"routing": "balanced", "dep_comm": None}


def test_decode_cost_refuses_a_gpu_without_tables_for_the_dtype(tmp_path, monkeypatch):
    from dwdp_trtllm.errors import ConfigError
    from dwdp_trtllm.spec.models import PRESETS

    r1 = PRESETS["deepseek-r1"]
    with pytest.raises(ConfigError) as e:  # h200's kernel tables have no NVFP4 experts
        dc.decode_cost(r1, "h200", "nvfp4")
    assert e.value.key == "--gpu"
    monkeypatch.setattr(dc, "package_path", lambda gpu: None)  # kernel tables but no generation tables
    with pytest.raises(ConfigError) as e:
        dc.decode_cost(r1, "h200", "fp8")
    assert e.value.key == "--gpu"
    f = tmp_path / "gen.json"
    f.write_text('{"format": "dwdp-generation-tables/1", "models": {"deepseek-v3": {}}}')
    monkeypatch.setattr(dc, "package_path", lambda gpu: f)
    with pytest.raises(ConfigError) as e:  # the model's entry without MLA module rows
        dc.decode_cost(r1, "h200", "fp8")
    assert e.value.key == "--model"
    f2 = tmp_path / "gen2.json"
    f2.write_text('{"format": "dwdp-generation-tables/1", "models": {"deepseek-v3": {"mla_generation_module": '
                  '{"fp8_block/fp8": {"rows": []}}}}}')
    monkeypatch.setattr(dc, "package_path", lambda gpu: f2)
    assert dc.decode_cost(r1, "h200", "fp8").comm == {}  # a file without communication rows: none


def test_an_ep_size_without_rows_costs_at_least_the_largest_smaller_eps_deepep_rows():
    """No communication rows at EP16 (the stand-in's NCCL rows are gone too): the modelled all-to-all (bytes over
    bandwidth, 20 us fixed) would price it below the measured EP8 low-latency kernels at the same tokens per rank;
    on a GPU whose all-to-all is DeepEP's the EP8 rows are its floor (EP16 sends the same tokens to more peers),
    named in how it was priced; on GB200 (MNNVL: TensorRT-LLM's NVLink one-sided all-to-all) the model stays."""
    comm = {"deepep_ll": {"by_hidden": {"7168": {"fp8": {"8": {"dispatch": [[1, 0.05], [16, 0.06]]}},
                                                 "bfloat16": {"8": {"combine": [[1, 0.05], [16, 0.06]]}}}}}}
    c = dc.DecodeCost(MODEL, "h200", "fp8", _NoCommRows(), {}, comm, 0)
    ms, how = c.comm_ms(16, 6.0)
    assert ms == pytest.approx(0.05 + 5 / 15 * 0.01 + 0.05 + 5 / 15 * 0.01)
    assert how == "DeepEP low-latency rows of EP8 as a floor (EP16: no rows)"
    assert c.comm_ms(8, 6.0) == (pytest.approx(ms), "DeepEP low-latency rows (EP8)")
    assert c.comm_ms(32, 6.0)[1] == "DeepEP low-latency rows of EP8 as a floor (EP32: no rows)"
    # below the smallest EP with rows there is no floor: EP4 keeps the model
    assert c.comm_ms(4, 6.0)[1] == "modelled all-to-all (4 GPUs, no rows)"
    g = dc.DecodeCost(MODEL, "gb200", "fp8", _NoCommRows(), {}, comm, 0)
    assert g.comm_ms(16, 6.0)[1] == "modelled all-to-all (16 GPUs, no rows)" and g.comm_ms(16, 6.0)[0] < ms


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200"])
def test_shipped_decode_communication_does_not_fall_past_the_measured_ep_size(gpu):
    """On the shipped tables (DeepEP low-latency rows at EP8 only) an EP16 / EP32 decode step's dispatch + combine
    is never cheaper than EP8's at the same tokens per rank: before, EP16 was priced by the model at about a fifth
    of the measured EP8 kernels (0.021 against 0.105 ms per layer on H200 at 2 tokens per rank), so a larger
    generation server looked cheaper per token than the measurement allows."""
    from dwdp_trtllm.spec.models import PRESETS
    c = dc.decode_cost(PRESETS["deepseek-r1"], gpu, "fp8")
    for b in (1, 2, 6, 11, 16, 32, 64, 128):
        ep8, _ = c.comm_ms(8, b)
        for tp in (16, 32):
            ms, how = c.comm_ms(tp, b)
            assert ms >= ep8 * (1 - 1e-12), (tp, b, ms, ep8, how)
