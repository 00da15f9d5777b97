"""The phases of one layer on every rank, priced for a target: TensorRT-LLM's kernels or our engine (pure).

`--target trtllm` (default of `dwdp plan`): compute and DEP communication from TensorRT-LLM's measured kernel
tables (perf/kernel_tables.py: aiconfigurator's per-op rows, package data). `--target engine`: the roofline /
floor calibration of perf/cost_model.py (what `dwdp bench` measures). Peer-copy time is ours in both
(cost_model.prefetch_us): the tables have none.

Phases are split by how copies interfere with them (perf/uncertainty.py's per-phase priors): the attention
core, dense GEMMs (projections, shared experts, router), memory-bound remainder (norms, RoPE, quantisation: MLA
module rows over core + projections), routed experts. Each table-priced phase carries how many doublings past its
table's last row it reached (0 inside), so the output can mark the cell and the range can widen it.

Legend: _SR per (sample, rank), _S per sample (a DEP group-wide quantity). Times in microseconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..models import ModelSpec
from . import cost_model as cm
from .bench_work import IterationLoad
from .hardware import get_gpu
from .kernel_tables import KV_DTYPE, ShapeTables

TARGETS = ("trtllm", "engine")


@dataclass(frozen=True)
class Skew:
    """Routing skew as the planner applies it: a table distribution, or factors over balanced times."""

    label: str = "none"
    dist: str = "balanced"  # a kernel-table distribution (balanced, power_law_1.01, power_law_1.2)
    dep_expert: float = 1.0  # factors (imbalance.SkewTerm) when the skew is not a table distribution
    dep_a2a: float = 1.0
    dwdp_gemm: float = 1.0


@dataclass(frozen=True)
class Phases:
    """One layer on every rank, split by interference class (uncertainty.PRIORS keys)."""

    core_SR: np.ndarray  # attention core
    gemm_attention_SR: np.ndarray  # attention projections (dense GEMMs)
    gemm_SR: np.ndarray  # attention projections + shared experts + router (dense GEMMs)
    membound_SR: np.ndarray  # memory-bound remainder (trtllm: MLA module rows over core + projections)
    experts_dwdp_SR: np.ndarray
    experts_dep_S: np.ndarray
    comm_S: np.ndarray  # DEP dispatch + combine (trtllm: NCCL all-gather + reduce-scatter)
    comm_alt_S: np.ndarray  # the other path DEP could run (trtllm: DeepEP HT table; engine: = comm_S)
    dense_layer_SR: np.ndarray  # one first_k_dense layer (attention + dense MLP)
    beyond: dict = field(default_factory=dict)  # phase -> doublings past the table (max over the arrays)
    beyond_dep_S: np.ndarray | float = 0.0
    beyond_dwdp_SR: np.ndarray | float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def attention_SR(self):
        return self.core_SR + self.gemm_attention_SR + self.membound_SR

    @property
    def other_SR(self):
        return self.gemm_SR - self.gemm_attention_SR

    @property
    def own_SR(self):
        """A rank's work outside the routed experts."""
        return self.core_SR + self.gemm_SR + self.membound_SR


def engine_phases(spec: ModelSpec, p: cm.CostParams, load: IterationLoad, group: int, isl: int, skew: Skew) -> Phases:
    """Today's cost model (roofline / floor calibration of our engine)."""
    tokens_SR = load.tokens_SR
    core = cm.core_us(spec, p, load.core_flops_SR, load.segments_SR, isl)
    attn = cm.attention_us(spec, p, tokens_SR, core, isl=isl, kv_tokens=load.kv_tokens_SR)
    other = cm.other_us(spec, p, tokens_SR, isl=isl)
    dwdp = cm.experts_us(spec, p, tokens_SR * spec.top_k, spec.num_experts, isl=isl) * skew.dwdp_gemm
    dep = cm.experts_us(spec, p, tokens_SR.sum(-1) * spec.top_k / group, cm.ceil_div(spec.num_experts, group),
                        isl=isl) * skew.dep_expert
    a2a = cm.all_to_all_us(spec, p, tokens_SR, group) * skew.dep_a2a
    dense = cm.dense_layer_us(spec, p, tokens_SR, core, isl=isl, kv_tokens=load.kv_tokens_SR)
    zeros = np.zeros_like(core)
    return Phases(core_SR=core, gemm_SR=(attn - core) + other, membound_SR=zeros, experts_dwdp_SR=dwdp,
                  experts_dep_S=dep, comm_S=a2a, comm_alt_S=a2a, dense_layer_SR=dense,
                  gemm_attention_SR=attn - core)


def _gemms(t: ShapeTables, ops, dtype: str, m, beyond: dict, key: str):
    total = 0.0
    for op in ops:
        ms, b = t.gemm_ms(op, "bf16" if op == "router" else dtype, m)
        if ms is None:
            continue
        total = total + ms * 1e3
        beyond[key] = max(beyond.get(key, 0.0), float(np.max(b)))
    return np.asarray(total, float)


def trtllm_phases(spec: ModelSpec, t: ShapeTables, weight_dtype: str, load: IterationLoad, group: int, isl: int,
                  skew: Skew) -> Phases:
    """TensorRT-LLM's kernels from the tables (module docstring)."""
    tokens_SR = load.tokens_SR
    beyond: dict = {}
    dt = weight_dtype
    kv = KV_DTYPE[dt]
    core_ms, b = t.core_ms(kv, load.core_flops_SR, lambda x: cm.core_flops(spec, x), isl, tokens_SR)
    core = core_ms * 1e3
    beyond["attention core"] = float(np.max(b))
    proj_ops = ("q_a", "kv_a", "q_b", "o") if spec.attention == "mla" else ("qkv", "o")
    proj = _gemms(t, proj_ops, dt, tokens_SR, beyond, "projections")
    if spec.attention == "mla":
        kv_m = load.kv_tokens_SR if load.kv_tokens_SR is not None else tokens_SR
        proj = proj + _gemms(t, ("kv_b",), dt, kv_m, beyond, "projections")
    other_ops = (("shared_fc1", "shared_fc2") if spec.num_shared_experts else ()) + ("router",)
    other = _gemms(t, other_ops, dt, tokens_SR, beyond, "shared experts + router")
    membound = tokens_SR * t.module_remainder_ms_per_token() * 1e3
    proj = np.broadcast_to(proj, tokens_SR.shape).astype(float)
    other = np.broadcast_to(other, tokens_SR.shape).astype(float)
    notes = []
    moe_dt = dt if t.moe_eps(dt) else None
    if moe_dt is None:
        raise ValueError(f"no {dt} MoE rows")
    dwdp_ms, b_dwdp = t.moe_ms(moe_dt, 1, skew.dist, tokens_SR)
    dwdp = dwdp_ms * 1e3 * skew.dwdp_gemm
    group_tokens_S = tokens_SR.sum(-1)
    dep_ms, b_dep = t.moe_ms(moe_dt, group, skew.dist, group_tokens_S)
    if dep_ms is None:  # no rows at this EP size: the EP1 op on this rank's share (balanced), noted
        dep_ms, b_dep = t.moe_ms(moe_dt, 1, skew.dist, group_tokens_S / group)
        notes.append(f"no EP{group} MoE rows: DEP's experts priced as the EP1 op on 1/{group} of the tokens")
    dep = dep_ms * 1e3 * skew.dep_expert
    beyond["routed experts (DWDP, EP1)"] = float(np.max(b_dwdp))
    beyond[f"routed experts (DEP, EP{group})"] = float(np.max(b_dep))
    H = spec.hidden_size
    if group > 1:
        el_S = group_tokens_S * H  # the gathered hidden states (BF16) of every rank's tokens
        ag, b_ag = t.comm_ms("all_gather", group, el_S)
        rs, b_rs = t.comm_ms("reduce_scatter", group, el_S)
        if ag is None or rs is None:
            comm = cm.all_to_all_us(spec, cm.CostParams(gpu=get_gpu(t.gpu)), tokens_SR, group)
            notes.append(f"no NCCL rows for {group} GPUs: DEP communication priced by the all-to-all model")
        else:
            comm = (ag + rs) * 1e3
            beyond["DEP all-gather + reduce-scatter"] = float(max(np.max(b_ag), np.max(b_rs)))
        alt_ms, b_alt = t.deepep_ms(H, group, tokens_SR.max(-1))
        if alt_ms is not None:
            alt = alt_ms * 1e3 * skew.dep_a2a
        else:  # no DeepEP rows at this EP size: an all-to-all at 0.90 of NVLink (uncertainty.ENGINE_A2A_EFF's fast end)
            gpu = get_gpu(t.gpu)
            alt = cm.all_to_all_us(spec, cm.CostParams(gpu=gpu), tokens_SR, group) * gpu.a2a_eff / 0.90 * skew.dep_a2a
    else:
        comm = alt = np.zeros(tokens_SR.shape[:-1])
    dense_mlp = _gemms(t, ("dense_fc1", "dense_fc2"), dt, tokens_SR, beyond, "dense MLP") if spec.first_k_dense else 0.0
    dense = core + proj + membound + dense_mlp
    return Phases(core_SR=core, gemm_SR=proj + other, membound_SR=membound, experts_dwdp_SR=dwdp, experts_dep_S=dep,
                  comm_S=comm, comm_alt_S=alt, dense_layer_SR=dense, beyond=beyond, beyond_dep_S=b_dep,
                  beyond_dwdp_SR=b_dwdp, notes=tuple(notes), gemm_attention_SR=proj)


def table_dist(skew_label: str) -> str | None:
    """The kernel-table distribution of a skew label ('power_law_1.01 (seed 0)' -> 'power_law_1.01'), or None."""
    name = skew_label.split(" ")[0]
    return name if name in ("balanced", "power_law_1.01", "power_law_1.2") else ("balanced" if name == "none" else None)
