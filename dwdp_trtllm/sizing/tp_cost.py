"""The time of one iteration of a tensor-parallel context server, from TensorRT-LLM's kernel tables (pure).

A TP context server of N GPUs is what TensorRT-LLM runs with `tensor_parallel_size: N`,
`moe_expert_parallel_size: N` and attention DP off (aiconfigurator's "TP8 prefill"): one scheduler packs up to
max_num_tokens tokens per iteration, every GPU works on all of them. One MoE layer of an iteration of T tokens,
each part from the rows TensorRT-LLM's kernels were timed at for that TP shape where the tables have them
(aiconfigurator 0.12.0's TensorRT-LLM tables of the GPU, `data/generation_tables/<gpu>.json`:
scripts/extract_aiconfigurator.py):
- attention (core, projections, the MLA module remainder): the planner's rows for one GPU holding the T tokens
  (perf/phases.trtllm_phases at group 1) / N x the measured TP penalty of TensorRT-LLM's MLA context module: N x
  its row at 128 / N heads over its row at 128 heads, at the iteration's (requests, mean length), bilinear in
  (log2 batch, log2 ISL) over the rows (`mla_context_module_by_heads`; 1.34 at TP8, one 8K request: a TP rank's
  16 heads and its replicated q_a / kv_a projections run slower than 1/8 of the whole module). Ranged by the
  table's spread: the scenario's low end takes the smallest of the surrounding rows' ratios, the high end the
  largest;
- shared experts: their GEMMs split over the N GPUs (`shared_fc1/tpN`, `shared_fc2/tpN` rows at T tokens); the
  router GEMM whole on every GPU (BF16 row at T tokens). TensorRT-LLM's model
  (tensorrt_llm/_torch/models/modeling_deepseekv3.py @ 000561df): `DeepseekV3Gate` holds the whole num_experts x
  hidden router on every rank, `kv_a_proj_with_mqa` (fused q_a / kv_a) is not TP-split, and
  `Deepseekv3MoE._compute_shared_expert_tp_size` splits the shared experts over gcd(2048 / 128, N) GPUs (N up to 16);
- routed experts: the fused-MoE row at EP N with the T tokens entering the op (`moe` ep N; every rank holds every
  token, so no dispatch), at the routing's distribution (balanced, or the stated / ranged power law);
- communication: two all-reduces of the T x hidden BF16 activations (after the attention output projection and
  after the MoE): TensorRT-LLM's AllReduce rows for N GPUs (`custom_allreduce`, timed with strategy AUTO, the
  runtime's own choice of kernel: aiconfigurator collector/network/collect_all_reduce.py
  `benchmark_trtllm_allreduce`); without rows NCCL reduce-scatter + all-gather rows, else the cost model's.
The first_k_dense layers: the same attention + the dense MLP GEMMs split over N (`dense_fc1/tpN`, `dense_fc2/tpN`)
+ the same all-reduces. A TP size or model without those rows (TP16: no 8-head module rows) prices that part as
one GPU's row / N (the attention and GEMMs at the rate of the same work on one GPU: TP's fast end).
Not priced (as for DEP and DWDP): the residual adds + RMSNorms outside the module (aiconfigurator adds them as
analytic element-wise ops, about 5% of its TP8 iteration at ISL 8K).
Scenarios (`which`): the routing range as DEP's (low: balanced, the TP-better end; high: power_law_1.01) unless
the routing is stated; the attention's TP penalty as above; nothing else is ranged (no peer copy, no all-to-all).
"""
from __future__ import annotations

import functools

import numpy as np

from ..perf import cost_model as cm
from ..perf import inputs as inp
from ..perf.hardware import get_gpu
from ..perf.kernel_tables import curve_ms
from ..perf.phases import trtllm_phases
from ..perf.planner import routing_skew, skewed_routing
from ..spec.schema import ConfigError
from .context_cost import ContextCost, Segments
from .decode_cost import MODULE_KEY, load_tables, package_path

#: what `dwdp size` says prices a TP context iteration (the report's "priced:" line)
ROWS = ("TP context: attention from the planner's one-GPU rows / N x TensorRT-LLM's MLA module TP penalty (its "
        "128/N-head rows over its 128-head rows); shared experts from the N-way split GEMM rows, the router whole; "
        "routed experts from the EP-N fused-MoE rows at the iteration's tokens; two TensorRT-LLM all-reduces per "
        "layer (its AllReduce rows)")


def check_tp(spec) -> None:
    """TP context servers are priced from TensorRT-LLM's kernel tables only: refuse a spec without them."""
    if spec.tables is None:
        raise ConfigError(None, "--tp-size", f"TP context servers are priced from TensorRT-LLM's kernel tables, which "
                                             f"have no {spec.model.name} {spec.weight_dtype} rows on {spec.gpu.name} "
                                             f"for --target {spec.target}: give --tp-size 0 (no TP option)")


@functools.lru_cache(maxsize=16)
def tp_rows(gpu: str, shape: str) -> tuple[dict, dict]:
    """(the model shape's TP-shaped rows, the GPU's communication rows) of the generation tables; ({}, {}) where
    none are shipped."""
    path = package_path(gpu)
    if path is None:
        return {}, {}
    data = load_tables(str(path))
    return data["models"].get(shape, {}), data.get("comm", {})


@functools.lru_cache(maxsize=64)
def _module_grid(gpu: str, shape: str, key: str, heads: int):
    """{(batch, isl): ms} of the MLA context module at `heads` heads per GPU, or None."""
    m, _ = tp_rows(gpu, shape)
    rows = m.get("mla_context_module_by_heads", {}).get(str(heads), {}).get(key)
    return None if rows is None else {(int(b), int(i)): float(ms) for b, i, ms in rows["rows"] if ms > 0}


def _bracket(xs: list[int], x: float) -> list[tuple[int, float]]:
    """The grid points around x (clamped to the grid) with their linear weights in log2 x."""
    lx = np.log2(xs)
    v = float(np.clip(np.log2(max(x, 1.0)), lx[0], lx[-1]))
    j = int(np.clip(np.searchsorted(lx, v), 1, len(xs) - 1))
    w = (v - lx[j - 1]) / (lx[j] - lx[j - 1])
    return [(xs[j - 1], 1.0 - w), (xs[j], w)]


def module_tp_ratio(gpu: str, shape: str, weight_dtype: str, heads: int, n: int, batch: float, isl: float,
                    which: str = "nominal") -> float | None:
    """N x the MLA context module's time at heads / N heads per GPU over its time at all `heads`, at (batch, isl):
    bilinear in (log2 batch, log2 isl) over the (batch, isl) rows both head counts have; `which` low / high: the
    smallest / largest ratio of the surrounding rows (the table's spread). None without rows."""
    key = MODULE_KEY.get(weight_dtype)
    if key is None or n <= 1 or heads % n:
        return None
    full, part = _module_grid(gpu, shape, key, heads), _module_grid(gpu, shape, key, heads // n)
    if not full or not part:
        return None
    ratio = {k: n * part[k] / full[k] for k in full.keys() & part.keys()}
    bs = sorted({b for b, _ in ratio})
    corners = []
    for b, wb in _bracket(bs, batch):
        isls = sorted(i for bb, i in ratio if bb == b)
        corners += [(ratio[(b, i)], wb * wi) for i, wi in _bracket(isls, isl)] if len(isls) > 1 else \
            [(ratio[(b, isls[0])], wb)]
    live = [(r, w) for r, w in corners if w > 1e-9]
    if which == "low":
        return min(r for r, _ in live)
    if which == "high":
        return max(r for r, _ in live)
    return sum(r * w for r, w in live) / sum(w for _, w in live)


class TpCost(ContextCost):
    """Iteration prices of one TP-N context server (module docstring); the same interface as ContextCost (a list of
    one Segments: the server's one scheduler). Built as ContextCost(spec, "tp", N, which=...). Two switches for
    ablations (scripts/size_validate.py), both off for `dwdp size`: `fast_end` prices attention, shared experts,
    router and dense MLP as one GPU's rows / N (TP's fast end); `nccl_allreduce` each all-reduce as NCCL
    reduce-scatter + all-gather rows instead of TensorRT-LLM's AllReduce rows."""

    fast_end = False
    nccl_allreduce = False

    def _allreduce_us(self, tokens: float) -> float:
        t, m, n = self.spec.tables, self.spec.model, self.group
        if n <= 1:
            return 0.0
        el = tokens * m.hidden_size
        _, comm = tp_rows(t.gpu, t.name)
        ar = comm.get("custom_allreduce", {}).get("by_gpus", {}).get(str(n))
        if ar is not None and not self.nccl_allreduce:
            return float(curve_ms(ar, el)[0]) * 1e3
        ag, _ = t.comm_ms("all_gather", n, el)
        rs, _ = t.comm_ms("reduce_scatter", n, el)
        if ag is not None and rs is not None:
            return float(np.asarray(ag) + np.asarray(rs)) * 1e3
        share = np.full((1, n), tokens / n)
        return float(np.max(cm.allgather_reducescatter_us(m, cm.CostParams(gpu=get_gpu(t.gpu)), share, n)))

    def _split_us(self, ops: tuple[str, ...], tokens: float, whole_us: float) -> float:
        """The GEMMs `ops` split over the N GPUs at `tokens` (their `<op>/tpN` rows), else one GPU's `whole_us` / N."""
        t, n = self.spec.tables, self.group
        gemm = tp_rows(t.gpu, t.name)[0].get("gemm", {})
        rows = [gemm.get(f"{op}/tp{n}") for op in ops]
        if n <= 1 or self.fast_end or any(r is None for r in rows):
            return whole_us / max(n, 1)
        return sum(float(curve_ms(r["points"], tokens)[0]) for r in rows) * 1e3

    def _price_us(self, ranks: list[Segments]) -> float:
        spec, n = self.spec, self.group
        t, m = spec.tables, spec.model
        load, isl = self._load(ranks[:1])
        tokens = float(load.tokens_SR.sum())
        if tokens <= 0:
            return 0.0
        skew = routing_skew(spec, n, tokens / n)
        if self.which == "high" and "routing" not in inp.fixed(spec) and n > 1:
            skew = skewed_routing(spec, n, tokens / n)
        ph = trtllm_phases(m, t, spec.weight_dtype, load, 1, int(max(1, round(isl))), skew)
        requests = tokens / max(isl, 1.0)
        ratio = None if self.fast_end else module_tp_ratio(t.gpu, t.name, spec.weight_dtype, m.num_heads, n,
                                                           requests, isl, self.which)
        attention = float(ph.attention_SR[0, 0]) / n * (1.0 if ratio is None else ratio)
        router, _ = t.gemm_ms("router", "bf16", tokens)
        router_us = 0.0 if router is None else float(np.asarray(router)) * 1e3
        shared_whole = float(ph.other_SR[0, 0]) - router_us
        shared = self._split_us(("shared_fc1", "shared_fc2"), tokens, shared_whole) if m.num_shared_experts else 0.0
        if self.fast_end:  # the router split too (as priced before TensorRT-LLM's TP rows were read)
            router_us /= n
        moe, _ = t.moe_ms(spec.weight_dtype, n, skew.dist, tokens)
        if moe is None:  # no EP-N rows: the EP1 op on 1/N of the tokens (as the planner's DEP fallback)
            moe, _ = t.moe_ms(spec.weight_dtype, 1, skew.dist, tokens / n)
        experts = float(np.asarray(moe)) * 1e3 * skew.dep_expert
        comm = 2 * self._allreduce_us(tokens)
        mlp_whole = float(ph.dense_layer_SR[0, 0] - ph.attention_SR[0, 0])
        dense = attention + self._split_us(("dense_fc1", "dense_fc2"), tokens, mlp_whole) + comm
        return m.first_k_dense * dense + m.num_moe_layers * (attention + shared + router_us + experts + comm)

    def seconds(self, ranks: list[Segments]) -> float:
        """The iteration's time (s) of the server's one batch (`ranks`: one Segments)."""
        seg = ranks[0]
        key = (int(round(seg.tokens / 32)), tuple(sorted((p // 32, n // 32, i // 32) for p, n, i in seg.parts)))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._price_us(ranks) * 1e-6
            self._cache[key] = hit
        self.iterations += 1
        return hit
