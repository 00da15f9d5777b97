"""The time of one iteration of a tensor-parallel context server, from TensorRT-LLM's kernel tables (pure).

A TP context server of N GPUs is what TensorRT-LLM runs with `tensor_parallel_size: N`,
`moe_expert_parallel_size: N` and attention DP off (aiconfigurator's "TP8 prefill"): one scheduler packs up to
max_num_tokens tokens per iteration, every GPU works on all of them. One MoE layer of an iteration of T tokens:
- attention (core, projections, the MLA module remainder), shared experts and router: the planner's rows for one
  rank holding the T tokens (perf/phases.trtllm_phases at group 1: `attention_core`, `gemm` ops q_a, kv_a, q_b,
  kv_b, o, shared_fc1/2, router, `mla_module_remainder`) divided by N: the heads and the GEMMs' N dimension split
  over the GPUs, each part assumed to run at the rate the table has for the same work on one GPU (the tables have
  no TP rows; a TP rank's smaller GEMMs and 128/N heads run at most that fast, so TP is priced at its fast end);
- routed experts: the fused-MoE row at EP N with the T tokens entering the op (`moe` ep N; every rank holds every
  token, so no dispatch), at the routing's distribution (balanced, or the stated / ranged power law);
- communication: two all-reduces of the T x hidden BF16 activations (after the attention output projection and
  after the MoE), each an NCCL reduce-scatter + all-gather (`comm.nccl` rows, N GPUs); without rows the cost
  model's all-gather + reduce-scatter at the GPU's all-to-all bandwidth.
The first_k_dense layers: the planner's dense layer at T tokens / N + the same two all-reduces.
Scenarios (`which`): the routing range as DEP's (low: balanced, the TP-better end; high: power_law_1.01) unless
the routing is stated; nothing else is ranged (TP pays no peer copy and no all-to-all).
"""
from __future__ import annotations

import numpy as np

from ..perf import cost_model as cm
from ..perf import inputs as inp
from ..perf.hardware import get_gpu
from ..perf.phases import trtllm_phases
from ..perf.planner import routing_skew, skewed_routing
from ..spec.schema import ConfigError
from .context_cost import ContextCost, Segments

#: what `dwdp size` says prices a TP context iteration (the report's "priced:" line)
ROWS = ("TP context: attention, shared experts and router from the planner's one-rank rows / N; routed experts "
        "from the EP-N fused-MoE rows at the iteration's tokens; two NCCL all-reduces per layer (reduce-scatter + "
        "all-gather rows)")


def check_tp(spec) -> None:
    """TP context servers are priced from TensorRT-LLM's kernel tables only: refuse a spec without them."""
    if spec.tables is None:
        raise ConfigError(None, "--tp-size", f"TP context servers are priced from TensorRT-LLM's kernel tables, which "
                                             f"have no {spec.model.name} {spec.weight_dtype} rows on {spec.gpu.name} "
                                             f"for --target {spec.target}: give --tp-size 0 (no TP option)")


class TpCost(ContextCost):
    """Iteration prices of one TP-N context server (module docstring); the same interface as ContextCost (a list of
    one Segments: the server's one scheduler). Built as ContextCost(spec, "tp", N, which=...)."""

    def _allreduce_us(self, tokens: float) -> float:
        t, m, n = self.spec.tables, self.spec.model, self.group
        if n <= 1:
            return 0.0
        el = tokens * m.hidden_size
        ag, _ = t.comm_ms("all_gather", n, el)
        rs, _ = t.comm_ms("reduce_scatter", n, el)
        if ag is not None and rs is not None:
            return float(np.asarray(ag) + np.asarray(rs)) * 1e3
        share = np.full((1, n), tokens / n)
        return float(np.max(cm.allgather_reducescatter_us(m, cm.CostParams(gpu=get_gpu(t.gpu)), share, n)))

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
        own = float((ph.core_SR + ph.gemm_SR + ph.membound_SR)[0, 0]) / n
        moe, _ = t.moe_ms(spec.weight_dtype, n, skew.dist, tokens)
        if moe is None:  # no EP-N rows: the EP1 op on 1/N of the tokens (as the planner's DEP fallback)
            moe, _ = t.moe_ms(spec.weight_dtype, 1, skew.dist, tokens / n)
        experts = float(np.asarray(moe)) * 1e3 * skew.dep_expert
        comm = 2 * self._allreduce_us(tokens)
        dense = float(ph.dense_layer_SR[0, 0]) / n + comm
        return m.first_k_dense * dense + m.num_moe_layers * (own + experts + comm)

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
