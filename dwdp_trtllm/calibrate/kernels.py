"""One GPU's kernels at the planned shapes, timed alone by bench/floor_timer.FloorTimer (the kernels `dwdp bench
--floor` times: stock grouped GEMMs, the floor's attention kernel, the projections as the engine runs them), and
the planner's keys they set (perf/calibration.py):

- grouped_gemm_tflops[weight dtype]: the routed-expert GEMMs (gate|up and down) of `tokens` tokens routed evenly
  (top_k rows each over the experts); the key's tokens are rows per expert x 32, its 256-expert top-8 convention
  (perf/cost_model._CAL_TOKENS_PER_ROW_PER_EXPERT), i.e. the tokens themselves for DeepSeek-V3/R1;
- attention_us_by_isl: one request's causal attention core per layer at each ISL;
- floor_tflops.attention_proj / .other: the projection GEMMs, and the router + shared expert GEMMs, at the largest
  token count (rates the floor calibration takes as the same at every size);
- hbm_tbps: an elementwise add over buffers far beyond L2 (bytes read + written / time).
TensorRT-LLM's own kernels are not timed here (tensorrt_llm is imported only under integration/trtllm/).
"""
from __future__ import annotations

from ..perf.cost_model import _CAL_TOKENS_PER_ROW_PER_EXPERT as TOKENS_PER_ROW_PER_EXPERT  # the key's convention
from ..perf.flops import attention_proj_flops, expert_rows_flops, shared_and_router_flops


def even_rows(spec, tokens: int) -> tuple[int, ...]:
    """Rows per expert of `tokens` tokens routed evenly (top_k rows each); the remainder on the first experts."""
    rows = tokens * spec.top_k
    base, extra = divmod(rows, spec.num_experts)
    return tuple(base + (e < extra) for e in range(spec.num_experts))


def grouped_points(ft, tokens: tuple[int, ...]) -> list[list[float]]:
    """[[key tokens, TFLOP/s]] of the routed experts' grouped GEMMs at each token count."""
    sp, out = ft.spec, []
    for t in tokens:
        rows = even_rows(sp, t)
        ms = ft.grouped_ms(rows)
        out.append([sum(rows) / sp.num_experts * TOKENS_PER_ROW_PER_EXPERT, float(expert_rows_flops(sp, sum(rows))) / ms / 1e9])
    return out


def attention_points(ft, isls: tuple[int, ...]) -> list[list[float]]:
    """[[isl, us]]: one request's causal attention core per layer."""
    return [[isl, ft.attention_core_ms(((0, isl),)) * 1e3] for isl in isls]


def floor_rates(ft, tokens: int) -> dict[str, float]:
    """{attention_proj, other}: TFLOP/s of the projections and of the router + shared expert GEMMs at `tokens`."""
    sp = ft.spec
    proj_ms = sum(ft.op_ms(*g) for g in ft.attention_proj_gemms(tokens, tokens))
    other_ms = ft.moe_other_ms(tokens)
    return {"attention_proj": float(attention_proj_flops(sp, tokens, tokens)) / proj_ms / 1e9,
            "other": float(shared_and_router_flops(sp, tokens)) / other_ms / 1e9}


def hbm_tbps(ft, add, nbytes: int) -> float:
    """TB/s read and written by `add` (calibrate/interference.memory_bound_fn: two `nbytes` operands in, one out)."""
    return 3 * nbytes / ft.time_ms(add) / 1e9
