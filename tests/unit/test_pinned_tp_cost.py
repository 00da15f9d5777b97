"""sizing/tp_cost.py's TP context iteration pinned against hand compositions of TensorRT-LLM's rows, read here from
the raw JSON (the kernel tables `data/kernel_tables/h200.json`, the generation tables
`data/generation_tables/h200.json`). The pricing (d6b62c2): per layer one GPU's attention / N x the MLA context
module's TP penalty (N x its 128/N-head row over its 128-head row), the shared experts' (dense layers: the dense
MLP's) GEMMs at their `/tpN` split rows, the router whole, the EP-N fused-MoE row at all the tokens, two
TensorRT-LLM all-reduces (`custom_allreduce` rows). The earlier pricing (one GPU's rows / N, two NCCL
reduce-scatter + all-gather) through the ablation switches `fast_end` + `nccl_allreduce`. The fallbacks where a
table lacks a row (TP16: no 8-head module rows, no tp16 GEMM rows, no 16-GPU AllReduce or NCCL rows: the cost
model's all-gather + reduce-scatter; the EP1 op on 1/N of the tokens without EP-N rows); the penalty's range over
the surrounding rows; a stated skew's expert factor; the routing range's high end; the refusal without tables; the
price cache's 32-token bins and the iteration count."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.imbalance import skew_term
from dwdp_trtllm.perf.kernel_tables import package_table_path
from dwdp_trtllm.perf.plan_spec import PlanSpec
from dwdp_trtllm.sizing.context_cost import ContextCost, Segments
from dwdp_trtllm.sizing.decode_cost import package_path as gen_table_path
from dwdp_trtllm.sizing import tp_cost
from dwdp_trtllm.sizing.tp_cost import TpCost, check_tp, module_tp_ratio
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig
from dwdp_trtllm.spec.schema import ConfigError

R1 = PRESETS["deepseek-r1"]  # hidden 7168, 61 layers: 3 dense + 58 MoE, 128 heads
TWO_8K = Segments(((0, 8192, 8192), (0, 8192, 8192)))  # T = 16384 tokens: 2 requests of ISL 8192


@pytest.fixture(autouse=True)
def _fresh_module_grids():
    """The module rows are cached per (GPU, shape, dtype, heads): each test reads them afresh (a grid cached by an
    earlier test, or one built from a test's edited rows, would hide what this test's lookup does)."""
    grid = tp_cost._module_grid
    grid.cache_clear()
    yield
    grid.cache_clear()


def _spec(**kw) -> PlanSpec:
    return PlanSpec(**{"model": R1, "gpu": get_gpu("h200"), "target": "trtllm", **kw})


def _raw() -> dict:
    return json.loads(package_table_path("h200").read_text())


def _gen() -> dict:
    return json.loads(gen_table_path("h200").read_text())


def _curve(points, x: float) -> float:
    """The tables' rule, written out: linear between rows, constant rate past the last row."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return ys[-1] * x / xs[-1] if x > xs[-1] else float(np.interp(x, xs, ys))


def _moe_s(data, ep: int, tokens: float, dist: str = "balanced") -> float:
    return _curve(data["models"]["deepseek-v3"]["moe"]["fp8"]["ep"][str(ep)][dist], tokens) * 1e-3


def _nccl_allreduce_s(data, n: int, tokens: float) -> float:
    nccl, el = data["comm"]["nccl"], tokens * R1.hidden_size
    return (_curve(nccl["all_gather"][str(n)], el) + _curve(nccl["reduce_scatter"][str(n)], el)) * 1e-3


def _trtllm_allreduce_s(n: int, tokens: float) -> float:
    """TensorRT-LLM's AllReduce row (N GPUs) at the T x hidden BF16 elements."""
    return _curve(_gen()["comm"]["custom_allreduce"]["by_gpus"][str(n)], tokens * R1.hidden_size) * 1e-3


def _module_rows(heads: int, key: str = "fp8_block/fp8") -> dict:
    rows = _gen()["models"]["deepseek-v3"]["mla_context_module_by_heads"][str(heads)][key]["rows"]
    return {(b, i): ms for b, i, ms in rows}


def _penalty(n: int, batch: int, isl: int) -> float:
    """N x the 128/N-head module row over the 128-head row at one (requests, ISL) the rows have."""
    return n * _module_rows(128 // n)[(batch, isl)] / _module_rows(128)[(batch, isl)]


def _one_gpu_s(spec, seg) -> float:
    """The planner's one-GPU iteration (DEP1: no communication, the EP1 fused-MoE row) of the same segments."""
    return ContextCost(spec, "dep", 1).seconds([seg])


def _tp_s(spec, n, seg=TWO_8K, which="nominal", **switches) -> float:
    cost = TpCost(spec, "tp", n, which=which)
    for k, v in switches.items():
        setattr(cost, k, v)
    return cost.seconds([seg])


def _old_s(spec, n, seg=TWO_8K, which="nominal") -> float:
    """The earlier pricing, through the ablation switches (scripts/size_validate.py's tp8_iteration_ms)."""
    return _tp_s(spec, n, seg, which, fast_end=True, nccl_allreduce=True)


def _hand_old(spec, n, T, moe_n_s, ar_s, seg=TWO_8K, factor=1.0, one_gpu_factor=1.0) -> float:
    """(one GPU's iteration without its routed experts: the EP1 row x its skew factor) / N + the routed experts + two
    all-reduces per layer."""
    L = R1.num_moe_layers
    return ((_one_gpu_s(spec, seg) - L * _moe_s(_raw(), 1, T) * one_gpu_factor) / n + L * moe_n_s * factor
            + R1.num_layers * 2 * ar_s)


def _hand(spec, n, T, moe_n_s, ar_s, penalty, seg=TWO_8K, factor=1.0, one_gpu_factor=1.0, split=True) -> float:
    """Per layer: one GPU's attention / N x penalty (None: x 1) + [dense: the dense MLP | MoE: the shared experts]
    at their `/tpN` rows (split False: one GPU's rows / N) + [MoE: the router's BF16 row whole + the routed
    experts] + two all-reduces. One GPU's attention: the one-GPU iteration less its dense MLP, shared-expert,
    router and EP1 rows (x the EP1 skew factor), per layer."""
    ops = _raw()["models"]["deepseek-v3"]["gemm"]
    fp8, bf16 = ops["fp8_block"]["ops"], ops["bfloat16"]["ops"]
    tp = _gen()["models"]["deepseek-v3"]["gemm"]
    kd, L = R1.first_k_dense, R1.num_moe_layers
    shared1 = (_curve(fp8["shared_fc1"]["points"], T) + _curve(fp8["shared_fc2"]["points"], T)) * 1e-3
    mlp1 = (_curve(fp8["dense_fc1"]["points"], T) + _curve(fp8["dense_fc2"]["points"], T)) * 1e-3
    router = _curve(bf16["router"]["points"], T) * 1e-3
    moe1 = _moe_s(_raw(), 1, T) * one_gpu_factor
    attention1 = (_one_gpu_s(spec, seg) - kd * mlp1 - L * (shared1 + router + moe1)) / (kd + L)
    if split:
        shared = (_curve(tp[f"shared_fc1/tp{n}"]["points"], T) + _curve(tp[f"shared_fc2/tp{n}"]["points"], T)) * 1e-3
        mlp = (_curve(tp[f"dense_fc1/tp{n}"]["points"], T) + _curve(tp[f"dense_fc2/tp{n}"]["points"], T)) * 1e-3
    else:
        shared, mlp = shared1 / n, mlp1 / n
    attention = attention1 / n * (1.0 if penalty is None else penalty)
    return kd * (attention + mlp + 2 * ar_s) + L * (attention + shared + router + moe_n_s * factor + 2 * ar_s)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_tp_iteration_is_the_attention_penalty_split_gemms_whole_router_ep_n_row_and_trtllm_allreduces(n):
    T = 16384
    penalty = _penalty(n, 2, 8192)
    assert penalty > 1.0  # a TP rank's module runs slower than 1/N of the whole one
    want = _hand(_spec(), n, T, _moe_s(_raw(), n, T), _trtllm_allreduce_s(n, T), penalty)
    assert _tp_s(_spec(), n) == pytest.approx(want, rel=1e-9)


def test_tp8_at_two_8k_requests_prices_the_module_penalty_from_the_16_and_128_head_rows():
    """The rows at 2 requests x ISL 8192: 2.7392 ms at 16 heads, 17.476 ms at 128: 8 x 2.7392 / 17.476."""
    assert _penalty(8, 2, 8192) == pytest.approx(8 * 2.7392 / 17.476, rel=1e-12)
    assert module_tp_ratio("h200", "deepseek-v3", "fp8", 128, 8, 2, 8192) == pytest.approx(8 * 2.7392 / 17.476)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_two_ablation_switches_reproduce_the_earlier_pricing_and_each_changes_its_own_part(n):
    """fast_end + nccl_allreduce: one GPU's rows / N, the EP-N row, two NCCL reduce-scatter + all-gather. fast_end
    alone: the same with TensorRT-LLM's all-reduce; nccl_allreduce alone: today's pricing with the NCCL pair."""
    data, T = _raw(), 16384
    moe, nccl, trt = _moe_s(data, n, T), _nccl_allreduce_s(data, n, T), _trtllm_allreduce_s(n, T)
    assert _old_s(_spec(), n) == pytest.approx(_hand_old(_spec(), n, T, moe, nccl), rel=1e-9)
    assert _tp_s(_spec(), n, fast_end=True) == pytest.approx(_hand_old(_spec(), n, T, moe, trt), rel=1e-9)
    want = _hand(_spec(), n, T, moe, nccl, _penalty(n, 2, 8192))
    assert _tp_s(_spec(), n, nccl_allreduce=True) == pytest.approx(want, rel=1e-9)


def test_tp1_is_the_one_gpu_iteration_no_allreduce():
    """One GPU holds every token and every expert: the planner's one-GPU iteration, nothing communicated."""
    assert _tp_s(_spec(), 1) == pytest.approx(_one_gpu_s(_spec(), TWO_8K), rel=1e-12)


def _cost_model_allreduce_s(n: int, T: float) -> float:
    """An all-gather in + a reduce-scatter out of the other N-1 ranks' 1/N of the BF16 activations at H200's
    all-to-all bandwidth (450 GB/s x its a2a efficiency), plus two latencies."""
    gpu = get_gpu("h200")
    others = T * (n - 1) / n
    return 2 * others * R1.hidden_size * 2 / (gpu.nvlink_gbps * 1e9 * gpu.a2a_eff) + 2 * gpu.a2a_latency_us * 1e-6


def test_tp16_without_rows_prices_attention_and_gemms_at_the_fast_end_and_allreduce_from_the_cost_model():
    """TP16: no 8-head module rows (no penalty), no tp16 GEMM rows (one GPU's shared experts and dense MLP / 16), the
    router still whole, no 16-GPU AllReduce nor NCCL rows (the cost model's all-gather + reduce-scatter)."""
    gen = _gen()
    assert "8" not in gen["models"]["deepseek-v3"]["mla_context_module_by_heads"]
    assert "shared_fc1/tp16" not in gen["models"]["deepseek-v3"]["gemm"]
    assert "16" not in gen["comm"]["custom_allreduce"]["by_gpus"] and "16" not in _raw()["comm"]["nccl"]["all_gather"]
    T, n = 16384.0, 16
    want = _hand(_spec(), n, T, _moe_s(_raw(), n, T), _cost_model_allreduce_s(n, T), None, split=False)
    assert _tp_s(_spec(), n) == pytest.approx(want, rel=1e-9)


def _edited_tables(tmp_path, edit) -> str:
    data = _raw()
    edit(data)
    path = tmp_path / "h200_edited.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_table_with_all_gather_but_no_reduce_scatter_rows_prices_the_nccl_pair_from_the_cost_model(tmp_path):
    """Under nccl_allreduce (the earlier pricing) the missing reduce-scatter row sends both halves to the cost model;
    by default the NCCL rows are not read (TensorRT-LLM's AllReduce rows price it): the same as the whole table."""
    path = _edited_tables(tmp_path, lambda d: d["comm"]["nccl"]["reduce_scatter"].pop("8"))
    data, T, n = _raw(), 16384.0, 8
    spec = _spec(kernel_tables=path)
    want = _hand_old(spec, n, T, _moe_s(data, n, T), _cost_model_allreduce_s(n, T))
    assert _old_s(spec, n) == pytest.approx(want, rel=1e-9)
    assert _tp_s(spec, n) == pytest.approx(_tp_s(_spec(), n), rel=1e-12)


def test_without_ep_n_moe_rows_the_experts_are_the_ep1_op_on_one_nth_of_the_tokens(tmp_path):
    path = _edited_tables(tmp_path, lambda d: d["models"]["deepseek-v3"]["moe"]["fp8"]["ep"].pop("8"))
    data, T = _raw(), 16384
    spec = _spec(kernel_tables=path)
    want = _hand(spec, 8, T, _moe_s(data, 1, T / 8), _trtllm_allreduce_s(8, T), _penalty(8, 2, 8192))
    assert _tp_s(spec, 8) == pytest.approx(want, rel=1e-9)


def test_a_stated_zipf_routing_scales_the_ep_n_row_by_the_skew_terms_expert_factor():
    """zipf has no table rows: the balanced EP-N row x the slowest EP rank's expert factor at N ranks and T/N tokens
    per rank (perf/imbalance.skew_term)."""
    rs = RoutingSkewConfig(kind="zipf", alpha=1.2)
    spec, data, T, n = _spec(routing_skew=rs), _raw(), 16384, 8
    def factor(ep, tokens_per_rank):
        return skew_term(rs, num_moe_layers=58, num_experts=256, top_k=8, ep_size=ep,
                         tokens_per_rank=tokens_per_rank).dep_expert_factor
    f = factor(n, T // n)
    assert f > 1.5  # the hottest of 8 ranks' experts
    want = _hand(spec, n, T, _moe_s(data, n, T), _trtllm_allreduce_s(n, T), _penalty(n, 2, 8192), factor=f,
                 one_gpu_factor=factor(1, T))
    assert _tp_s(spec, n) == pytest.approx(want, rel=1e-9)


def test_the_routing_ranges_high_end_reads_the_power_law_row_unless_routing_is_stated_or_one_gpu():
    """At 2 x 8K (a row of the module table) the penalty is that row's at every scenario: only the routing moves."""
    data, T = _raw(), 16384
    spec = _spec()
    for n in (2, 8):
        skewed = _moe_s(data, n, T, "power_law_1.01")
        want = _hand(spec, n, T, skewed, _trtllm_allreduce_s(n, T), _penalty(n, 2, 8192))
        assert _tp_s(spec, n, which="high") == pytest.approx(want, rel=1e-9)
        assert _tp_s(spec, n, which="low") == pytest.approx(_tp_s(spec, n), rel=1e-12)  # balanced: TP's better end
    assert _tp_s(spec, 1, which="high") == pytest.approx(_tp_s(spec, 1), rel=1e-12)  # one GPU: no slowest rank
    stated = _spec(routing_skew=RoutingSkewConfig(kind="none"), stated=(("routing", "none"),))  # --routing-skew none
    assert _tp_s(stated, 8, which="high") == pytest.approx(_tp_s(stated, 8), rel=1e-12)


def test_between_module_rows_the_penalty_is_bilinear_in_log2_and_ranged_by_the_surrounding_rows():
    """3 requests x ISL 5000 (T = 15000) with the routing stated (nothing else ranged): the penalty's rows at
    (2 | 4 requests) x (ISL 4096 | 6144); nominal: bilinear in (log2 requests, log2 ISL), low / high: the smallest /
    largest of the four ratios."""
    seg = Segments(tuple((0, 5000, 5000) for _ in range(3)))
    spec = _spec(routing_skew=RoutingSkewConfig(kind="none"), stated=(("routing", "none"),))
    n, T = 8, 15000
    wb = math.log2(3) - 1.0  # between 2 and 4 requests
    wi = (math.log2(5000) - 12.0) / (math.log2(6144) - 12.0)  # between ISL 4096 and 6144
    r = {(b, i): _penalty(n, b, i) for b in (2, 4) for i in (4096, 6144)}
    nominal = ((1 - wb) * ((1 - wi) * r[(2, 4096)] + wi * r[(2, 6144)])
               + wb * ((1 - wi) * r[(4, 4096)] + wi * r[(4, 6144)]))
    lo, hi = min(r.values()), max(r.values())
    assert lo < nominal < hi and hi / lo > 1.05
    moe, ar = _moe_s(_raw(), n, T), _trtllm_allreduce_s(n, T)
    for which, penalty in (("low", lo), ("nominal", nominal), ("high", hi)):
        want = _hand(spec, n, T, moe, ar, penalty, seg=seg)
        assert _tp_s(spec, n, seg, which) == pytest.approx(want, rel=1e-9), which


def test_the_module_penalty_clamps_to_the_rows_both_head_counts_have():
    """Past the grid the edge rows; at 256 requests the 16-head rows reach ISL 512 but the 128-head rows stop at 256:
    ISL 512 there reads the ISL 256 pair (the rows both have)."""
    at = dict(gpu="h200", shape="deepseek-v3", weight_dtype="fp8", heads=128, n=8)
    assert (256, 512) in _module_rows(16) and (256, 512) not in _module_rows(128)
    for which in ("low", "nominal", "high"):
        assert module_tp_ratio(**at, batch=256, isl=512, which=which) == pytest.approx(_penalty(8, 256, 256))
        assert module_tp_ratio(**at, batch=10_000, isl=64, which=which) == pytest.approx(_penalty(8, 256, 64))
        assert module_tp_ratio(**at, batch=0.5, isl=0.5, which=which) == pytest.approx(_penalty(8, 1, 1))
        assert module_tp_ratio(**at, batch=1, isl=1e6, which=which) == pytest.approx(_penalty(8, 1, 32768))
        assert module_tp_ratio(**at, batch=10_000, isl=1e6, which=which) == pytest.approx(_penalty(8, 256, 256))


def test_the_module_penalty_reads_the_weight_dtypes_rows_and_is_none_without_them():
    bf16 = 4 * _module_rows(32, "bfloat16/bfloat16")[(2, 8192)] / _module_rows(128, "bfloat16/bfloat16")[(2, 8192)]
    assert module_tp_ratio("h200", "deepseek-v3", "bf16", 128, 4, 2, 8192) == pytest.approx(bf16)
    assert bf16 != pytest.approx(_penalty(4, 2, 8192), rel=1e-3)
    args = dict(gpu="h200", shape="deepseek-v3", weight_dtype="fp8", heads=128, batch=2, isl=8192)
    assert module_tp_ratio(**args, n=1) is None  # one GPU: no penalty
    assert module_tp_ratio(**args, n=3) is None  # heads not divisible
    assert module_tp_ratio(**args, n=16) is None  # no 8-head rows
    assert module_tp_ratio(**{**args, "weight_dtype": "int4"}, n=8) is None  # no module key for the dtype
    assert module_tp_ratio(**{**args, "weight_dtype": "nvfp4"}, n=8) is None  # a key the rows lack
    assert module_tp_ratio(**{**args, "gpu": "a100"}, n=8) is None  # no generation tables shipped
    assert module_tp_ratio(**{**args, "shape": "qwen3-235b"}, n=8) is None  # no rows for the shape


def test_a_grid_from_past_one_request_with_a_batch_of_one_isl_row(monkeypatch):
    """Rows (a table's own grid, here written out): 2 requests at ISL 1024 only, 8 requests at ISL 1024 and 4096.
    Below the grid the first rows; at 4 requests x ISL 2048 the 2-request row (its one ISL) weighs 1/2, the
    8-request rows 1/4 each (log2 4 is half way from 2 to 8, log2 2048 half way from 1024 to 4096)."""
    full = {(2, 1024): 10.0, (8, 1024): 40.0, (8, 4096): 100.0}
    part = {(2, 1024): 1.5, (8, 1024): 6.0, (8, 4096): 16.0}  # ratios x 8: 1.2, 1.2, 1.28
    monkeypatch.setattr(tp_cost, "_module_grid", lambda gpu, shape, key, heads: full if heads == 128 else part)
    at = dict(gpu="h200", shape="deepseek-v3", weight_dtype="fp8", heads=128, n=8)
    assert module_tp_ratio(**at, batch=1, isl=16) == pytest.approx(1.2)
    assert module_tp_ratio(**at, batch=8, isl=16) == pytest.approx(1.2)
    assert module_tp_ratio(**at, batch=8, isl=2048) == pytest.approx((1.2 + 1.28) / 2)
    assert module_tp_ratio(**at, batch=4, isl=2048) == pytest.approx(1.2 / 2 + 1.2 / 4 + 1.28 / 4)
    assert module_tp_ratio(**at, batch=4, isl=2048, which="low") == pytest.approx(1.2)
    assert module_tp_ratio(**at, batch=4, isl=2048, which="high") == pytest.approx(1.28)


def _gen_rows_edited(monkeypatch, models=None, comm=None):
    """The generation tables' TP rows with the shape's (`models`) or the GPU's communication (`comm`) rows replaced."""
    shipped = tp_cost.tp_rows
    def edited(gpu, shape):
        m, c = shipped(gpu, shape)
        return (m if models is None else models), (c if comm is None else comm)
    monkeypatch.setattr(tp_cost, "tp_rows", edited)


@pytest.mark.parametrize("comm", [{}, {"custom_allreduce": {}}])
def test_without_trtllm_allreduce_rows_each_allreduce_is_the_nccl_pair(monkeypatch, comm):
    _gen_rows_edited(monkeypatch, comm=comm)
    T, n = 16384, 8
    want = _hand(_spec(), n, T, _moe_s(_raw(), n, T), _nccl_allreduce_s(_raw(), n, T), _penalty(n, 2, 8192))
    assert _tp_s(_spec(), n) == pytest.approx(want, rel=1e-9)


def test_a_shape_without_tp_rows_prices_attention_and_gemms_at_the_fast_end_the_router_whole(monkeypatch):
    """No module rows by heads and no split GEMM rows for the shape (the AllReduce rows are the GPU's): one GPU's
    attention, shared experts and dense MLP / N, the router's row whole."""
    _gen_rows_edited(monkeypatch, models={})
    T, n = 16384, 8
    want = _hand(_spec(), n, T, _moe_s(_raw(), n, T), _trtllm_allreduce_s(n, T), None, split=False)
    assert _tp_s(_spec(), n) == pytest.approx(want, rel=1e-9)


def test_kernel_tables_without_the_router_row_price_no_router(tmp_path):
    path = _edited_tables(tmp_path, lambda d: d["models"]["deepseek-v3"]["gemm"]["bfloat16"]["ops"].pop("router"))
    spec, T, n = _spec(kernel_tables=path), 16384, 8
    router = _curve(_raw()["models"]["deepseek-v3"]["gemm"]["bfloat16"]["ops"]["router"]["points"], T) * 1e-3
    with_router = _hand(spec, n, T, _moe_s(_raw(), n, T), _trtllm_allreduce_s(n, T), _penalty(n, 2, 8192))
    # _hand reads the router from the whole table: without it the one-GPU iteration lacks it too (attention1 gains
    # L x router / (kd + L) per layer), and no MoE layer adds it
    kd, L = R1.first_k_dense, R1.num_moe_layers
    attention_gain = L * router / (kd + L) / n * _penalty(n, 2, 8192)
    want = with_router + (kd + L) * attention_gain - L * router
    assert _tp_s(spec, n) == pytest.approx(want, rel=1e-9)


def test_a_model_without_shared_experts_prices_none_even_where_split_rows_exist():
    spec, T, n = _spec(model=replace(R1, num_shared_experts=0)), 16384, 8
    tp = _gen()["models"]["deepseek-v3"]["gemm"]
    shared8 = (_curve(tp["shared_fc1/tp8"]["points"], T) + _curve(tp["shared_fc2/tp8"]["points"], T)) * 1e-3
    fp8 = _raw()["models"]["deepseek-v3"]["gemm"]["fp8_block"]["ops"]
    shared1 = (_curve(fp8["shared_fc1"]["points"], T) + _curve(fp8["shared_fc2"]["points"], T)) * 1e-3
    # _hand subtracts one GPU's shared experts, which this model's one-GPU iteration does not have, and adds the TP8
    # split rows: put back the one and take away the other
    kd, L = R1.first_k_dense, R1.num_moe_layers
    with_shared = _hand(spec, n, T, _moe_s(_raw(), n, T), _trtllm_allreduce_s(n, T), _penalty(n, 2, 8192))
    want = with_shared + (kd + L) * (L * shared1 / (kd + L) / n * _penalty(n, 2, 8192)) - L * shared8
    assert _tp_s(spec, n) == pytest.approx(want, rel=1e-9)
    assert _tp_s(spec, n) < _tp_s(_spec(), n)


def test_an_empty_iteration_costs_nothing_and_one_token_costs_something():
    assert _tp_s(_spec(), 8, Segments(())) == 0.0
    one = Segments(((0, 1, 1),))
    want = _hand(_spec(), 8, 1, _moe_s(_raw(), 8, 1), _trtllm_allreduce_s(8, 1), _penalty(8, 1, 1), seg=one)
    assert _tp_s(_spec(), 8, one) == pytest.approx(want, rel=1e-9) and want > 0
    # three 1-token requests: the module penalty at 3 requests (between its 2- and 4-request rows) at ISL 1
    three = Segments(((0, 1, 1),) * 3)
    wb = math.log2(3) - 1.0
    penalty = (1 - wb) * _penalty(8, 2, 1) + wb * _penalty(8, 4, 1)
    want = _hand(_spec(), 8, 3, _moe_s(_raw(), 8, 3), _trtllm_allreduce_s(8, 3), penalty, seg=three)
    assert _tp_s(_spec(), 8, three) == pytest.approx(want, rel=1e-9)


def test_tp_is_refused_without_kernel_tables_naming_the_flag_and_the_way_out():
    spec = PlanSpec(model=R1, gpu=get_gpu("h200"), target="engine")
    with pytest.raises(ConfigError) as e:
        check_tp(spec)
    assert e.value.key == "--tp-size"
    assert str(e.value).endswith("TP context servers are priced from TensorRT-LLM's kernel tables, which have no "
                                 "deepseek-r1 fp8 rows on h200 for --target engine: give --tp-size 0 (no TP option)")
    check_tp(_spec())  # tables: accepted


def test_the_price_cache_shares_a_32_token_bin_and_counts_every_iteration():
    """Iterations whose tokens round to the same multiple of 32 and whose chunks' prefix, length and ISL fall in the
    same 32-token bins share the first one's price; one token across a bin is priced on its own shape."""
    spec = _spec()
    cost = TpCost(spec, "tp", 8)
    a, b = Segments(((32, 8200, 8232),)), Segments(((40, 8207, 8247),))
    pa = cost.seconds([a])
    assert cost.seconds([b]) == pa
    assert _tp_s(spec, 8, b) != pytest.approx(pa, rel=1e-9)  # b's own price differs
    # chunk length 8191 | 8192 (one token across a bin) at the same ISL; ISL 8191 | 8192 at the same length
    for c, d in ((((0, 8191, 9000),), ((0, 8192, 9000),)), (((0, 4000, 8191),), ((0, 4000, 8192),))):
        cost.seconds([Segments(c)])
        assert cost.seconds([Segments(d)]) == pytest.approx(_tp_s(spec, 8, Segments(d)), rel=1e-12)
        assert _tp_s(spec, 8, Segments(d)) != pytest.approx(_tp_s(spec, 8, Segments(c)), rel=1e-9)
    assert cost.iterations == 6
