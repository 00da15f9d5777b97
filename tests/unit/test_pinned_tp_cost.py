"""sizing/tp_cost.py's TP context iteration pinned against hand compositions of TensorRT-LLM's kernel-table rows
(read here from the raw JSON): the one-rank rows / N, the EP-N fused-MoE row at all the tokens, two NCCL
all-reduces per layer; the fallbacks where a table lacks a row (the cost model's all-gather + reduce-scatter past
the NCCL rows' 8 GPUs, the EP1 op on 1/N of the tokens without EP-N rows); a stated skew's expert factor; the
routing range's high end; the refusal without tables; the price cache's 32-token bins and the iteration count."""
import json
from dataclasses import replace

import numpy as np
import pytest

from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.imbalance import skew_term
from dwdp_trtllm.perf.kernel_tables import package_table_path
from dwdp_trtllm.perf.plan_spec import PlanSpec
from dwdp_trtllm.sizing.context_cost import ContextCost, Segments
from dwdp_trtllm.sizing.tp_cost import TpCost, check_tp
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig
from dwdp_trtllm.spec.schema import ConfigError

R1 = PRESETS["deepseek-r1"]  # hidden 7168, 61 layers: 3 dense + 58 MoE
TWO_8K = Segments(((0, 8192, 8192), (0, 8192, 8192)))  # T = 16384 tokens


def _spec(**kw) -> PlanSpec:
    return PlanSpec(model=R1, gpu=get_gpu("h200"), target="trtllm", **kw)


def _raw() -> dict:
    return json.loads(package_table_path("h200").read_text())


def _curve(points, x: float) -> float:
    """The tables' rule, written out: linear between rows, constant rate past the last row."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return ys[-1] * x / xs[-1] if x > xs[-1] else float(np.interp(x, xs, ys))


def _moe_s(data, ep: int, tokens: float, dist: str = "balanced") -> float:
    return _curve(data["models"]["deepseek-v3"]["moe"]["fp8"]["ep"][str(ep)][dist], tokens) * 1e-3


def _nccl_allreduce_s(data, n: int, tokens: float) -> float:
    nccl, el = data["comm"]["nccl"], tokens * R1.hidden_size
    return (_curve(nccl["all_gather"][str(n)], el) + _curve(nccl["reduce_scatter"][str(n)], el)) * 1e-3


def _one_gpu_s(spec, seg) -> float:
    """The planner's one-GPU iteration (DEP1: no communication, the EP1 fused-MoE row) of the same segments."""
    return ContextCost(spec, "dep", 1).seconds([seg])


def _tp_s(spec, n, seg=TWO_8K, which="nominal") -> float:
    return TpCost(spec, "tp", n, which=which).seconds([seg])


def _hand(spec, n, T, moe_n_s, ar_s, seg=TWO_8K, factor=1.0, one_gpu_factor=1.0) -> float:
    """(one GPU's iteration without its routed experts: the EP1 row x its skew factor) / N + the routed experts + two
    all-reduces per layer."""
    L = R1.num_moe_layers
    return ((_one_gpu_s(spec, seg) - L * _moe_s(_raw(), 1, T) * one_gpu_factor) / n + L * moe_n_s * factor
            + R1.num_layers * 2 * ar_s)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_tp_iteration_is_the_one_gpu_rows_over_n_plus_the_ep_n_row_and_two_nccl_allreduces(n):
    data, T = _raw(), 16384
    want = _hand(_spec(), n, T, _moe_s(data, n, T), _nccl_allreduce_s(data, n, T))
    assert _tp_s(_spec(), n) == pytest.approx(want, rel=1e-9)


def test_tp1_is_the_one_gpu_iteration_no_allreduce():
    """One GPU holds every token and every expert: the planner's one-GPU iteration, nothing communicated."""
    assert _tp_s(_spec(), 1) == pytest.approx(_one_gpu_s(_spec(), TWO_8K), rel=1e-12)


def test_tp16_allreduce_past_the_nccl_rows_is_the_cost_model_allgather_reducescatter():
    """The NCCL rows stop at 8 GPUs; at 16 each all-reduce is an all-gather in + a reduce-scatter out of the other 15
    ranks' 1/16 of the BF16 activations at H200's all-to-all bandwidth (450 GB/s x its a2a efficiency), plus two
    latencies."""
    data, T, n = _raw(), 16384.0, 16
    gpu = get_gpu("h200")
    others = T * (n - 1) / n
    ar_s = (2 * others * R1.hidden_size * 2 / (gpu.nvlink_gbps * 1e9 * gpu.a2a_eff) + 2 * gpu.a2a_latency_us * 1e-6)
    want = _hand(_spec(), n, T, _moe_s(data, n, T), ar_s)
    assert _tp_s(_spec(), n) == pytest.approx(want, rel=1e-9)


def _edited_tables(tmp_path, edit) -> str:
    data = _raw()
    edit(data)
    path = tmp_path / "h200_edited.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_table_with_all_gather_but_no_reduce_scatter_rows_prices_both_from_the_cost_model(tmp_path):
    path = _edited_tables(tmp_path, lambda d: d["comm"]["nccl"]["reduce_scatter"].pop("8"))
    data, T, n = _raw(), 16384.0, 8
    gpu = get_gpu("h200")
    ar_s = 2 * T * 7 / 8 * R1.hidden_size * 2 / (gpu.nvlink_gbps * 1e9 * gpu.a2a_eff) + 2 * gpu.a2a_latency_us * 1e-6
    spec = _spec(kernel_tables=path)
    want = _hand(spec, n, T, _moe_s(data, n, T), ar_s)
    assert _tp_s(spec, n) == pytest.approx(want, rel=1e-9)


def test_without_ep_n_moe_rows_the_experts_are_the_ep1_op_on_one_nth_of_the_tokens(tmp_path):
    path = _edited_tables(tmp_path, lambda d: d["models"]["deepseek-v3"]["moe"]["fp8"]["ep"].pop("8"))
    data, T = _raw(), 16384
    spec = _spec(kernel_tables=path)
    want = _hand(spec, 8, T, _moe_s(data, 1, T / 8), _nccl_allreduce_s(data, 8, T))
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
    want = _hand(spec, n, T, _moe_s(data, n, T), _nccl_allreduce_s(data, n, T), factor=f, one_gpu_factor=factor(1, T))
    assert _tp_s(spec, n) == pytest.approx(want, rel=1e-9)


def test_the_routing_ranges_high_end_reads_the_power_law_row_unless_routing_is_stated_or_one_gpu():
    data, T = _raw(), 16384
    spec = _spec()
    for n in (2, 8):
        skewed = _moe_s(data, n, T, "power_law_1.01")
        want = _hand(spec, n, T, skewed, _nccl_allreduce_s(data, n, T))
        assert _tp_s(spec, n, which="high") == pytest.approx(want, rel=1e-9)
        assert _tp_s(spec, n, which="low") == pytest.approx(_tp_s(spec, n), rel=1e-12)  # balanced: TP's better end
    assert _tp_s(spec, 1, which="high") == pytest.approx(_tp_s(spec, 1), rel=1e-12)  # one GPU: no slowest rank
    stated = _spec(routing_skew=RoutingSkewConfig(kind="none"), stated=(("routing", "none"),))  # --routing-skew none
    assert _tp_s(stated, 8, which="high") == pytest.approx(_tp_s(stated, 8), rel=1e-12)


def test_an_empty_iteration_costs_nothing_and_one_token_costs_something():
    assert _tp_s(_spec(), 8, Segments(())) == 0.0
    one = Segments(((0, 1, 1),))
    data = _raw()
    want = _hand(_spec(), 8, 1, _moe_s(data, 8, 1), _nccl_allreduce_s(data, 8, 1), seg=one)
    assert _tp_s(_spec(), 8, one) == pytest.approx(want, rel=1e-9) and want > 0


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
