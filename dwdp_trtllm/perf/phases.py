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

from dataclasses import dataclass, field, replace

import numpy as np

from ..spec.models import ModelSpec
from . import cost_model as cm
from .bench_work import IterationLoad
from .hardware import get_gpu
from .kernel_tables import DISTS, KV_DTYPE, ShapeTables
from .uncertainty import ENGINE_A2A_EFF

TARGETS = ("trtllm", "engine")
#: DEP's dispatch/combine path (after TensorRT-LLM's fused_moe/communication/ strategies, TRTLLM_FORCE_COMM_METHOD
#: ALLGATHER / NVLINK_ONE_SIDED / DEEPEP): allgather_reducescatter = AllGatherReduceScatter (NCCL all-gather of every
#: rank's hidden states, reduce-scatter of the outputs); alltoall = NVLinkOneSided (a token goes once to each rank
#: holding any of its top-k: its workspace holds [ep_size, max_tokens] rows; post-quant dispatch, BF16 combine);
#: deepep = DeepEP high-throughput dispatch + combine. Target engine: alltoall is our engine's all-to-all.
DEP_COMMS = ("allgather_reducescatter", "alltoall", "deepep")
#: GPUs on which TensorRT-LLM's CommunicationFactory.create_strategy picks NVLinkOneSided first: it needs
#: MnnvlMemory.supports_mnnvl() (multi-node NVLink fabric memory: GB200 NVL72), else it falls through NVLinkTwoSided
#: (also MNNVL) to DeepEP, then DeepEPLowLatency, then AllGatherReduceScatter. Which version: the kernel tables model
#: TensorRT-LLM 1.3.0rc20 (June 2026; aiconfigurator's rows name its image, source commit 14efb6ac, not stored here).
#: Its factory is not stored either; the versions that are: @673f3412 (2025: DeepEP opt-in, TRTLLM_CAN_USE_DEEP_EP
#: default "0") and the 2026 ones (@03c36d62, stored ids 57522557456 / 54895098146: default "1", the model's
#: torch_dtype BF16 -- an FP8 checkpoint's activations are BF16 too). The default became "1" with PR #11437
#: (2026-02-11; its revert #11532 "DeepEP now disabled by default" was re-landed as #11648, 2026-02-24), before
#: rc20; NcclEP (tried before DeepEP, PR #15597, July 2026) came after rc20 and refuses quantized MoE (FP8 / NVFP4
#: experts) and non-BF16 activations, so on a newer TensorRT-LLM a BF16-expert model may run NcclEP instead (not
#: priced here: no rows; --dep-comm names the path to price). DeepEP itself (deep_ep.py @0d2123af) runs only where
#: _is_deepep_feasible: 2, 4 or 8 ranks in one node, or 2/4/8/16 nodes of 8 (else the factory falls through to
#: AllGatherReduceScatter), and ConfigurableMoE falls back to AllGatherReduceScatter at run time when a forward is
#: chunked (is_workload_feasible: num_chunks > 1).
MNNVL_GPUS = ("gb200",)
#: DEP group sizes DeepEP runs (deep_ep.py _is_deepep_feasible, one DEP group per node or 8 ranks per node)
DEEPEP_INTRANODE = (2, 4, 8)
DEEPEP_INTERNODE_NODES = (2, 4, 8, 16)
#: all-to-all efficiency at the DEP-fast end of its range (uncertainty.ENGINE_A2A_EFF): the modelled paths'
#: alternative and DeepEP's fallback where the tables have no rows
A2A_FAST_EFF = ENGINE_A2A_EFF[0]


def deepep_feasible(group: int) -> bool:
    """DeepEP runs a DEP group of this size (deep_ep.py _is_deepep_feasible): 2, 4 or 8 ranks on one node, or 2, 4, 8
    or 16 nodes of 8 ranks."""
    return group in DEEPEP_INTRANODE or (group % 8 == 0 and group // 8 in DEEPEP_INTERNODE_NODES)


def default_dep_comm(gpu_name: str, target: str, group: int | None = None) -> str:
    """The DEP path a deployment runs when none is given: target trtllm follows TensorRT-LLM 1.3.0rc20's
    auto-selection (MNNVL_GPUS above): alltoall on an MNNVL GPU, else deepep where DeepEP runs this group size
    (`group` None: a size it runs), else allgather_reducescatter; target engine is our engine's all-to-all."""
    if target != "trtllm":
        return "alltoall"
    if gpu_name.lower() in MNNVL_GPUS:
        return "alltoall"
    return "deepep" if group is None or deepep_feasible(group) else "allgather_reducescatter"


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
    comm_S: np.ndarray  # DEP dispatch + combine on the chosen path (DEP_COMMS)
    comm_alt_S: np.ndarray  # the other path DEP could run (trtllm: the other of DEP_COMMS; engine: = comm_S)
    dense_layer_SR: np.ndarray  # one first_k_dense layer (attention + dense MLP)
    beyond: dict = field(default_factory=dict)  # phase -> doublings past the table (max over the arrays)
    beyond_dep_S: np.ndarray | float = 0.0
    beyond_dwdp_SR: np.ndarray | float = 0.0
    notes: tuple[str, ...] = ()
    comm_source: str = ""  # how DEP communication was priced (the output's "priced:" line)

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


def engine_phases(spec: ModelSpec, p: cm.CostParams, load: IterationLoad, group: int, isl: int, skew: Skew,
                  dep_comm: str = "alltoall") -> Phases:
    """Today's cost model (roofline / floor calibration of our engine); DEP communication on `dep_comm`."""
    tokens_SR = load.tokens_SR
    core = cm.core_us(spec, p, load.core_flops_SR, load.segments_SR, isl)
    attn = cm.attention_us(spec, p, tokens_SR, core, isl=isl, kv_tokens=load.kv_tokens_SR)
    other = cm.other_us(spec, p, tokens_SR, isl=isl)
    dwdp = cm.experts_us(spec, p, tokens_SR * spec.top_k, spec.num_experts, isl=isl) * skew.dwdp_gemm
    dep = cm.experts_us(spec, p, tokens_SR.sum(-1) * spec.top_k / group, cm.ceil_div(spec.num_experts, group),
                        isl=isl) * skew.dep_expert
    if dep_comm == "allgather_reducescatter":
        a2a = cm.allgather_reducescatter_us(spec, p, tokens_SR, group)
        src = "all-gather + reduce-scatter of BF16 hidden states at the GPU's all-to-all bandwidth (cost model)"
    else:  # deepep: one copy per destination rank, as --a2a-dedup
        q = p if dep_comm == "alltoall" else replace(p, a2a_dedup=True)
        a2a = cm.all_to_all_us(spec, q, tokens_SR, group) * skew.dep_a2a
        src = "all-to-all at the GPU's all-to-all bandwidth (cost model" + (", deduplicated per rank)" if q.a2a_dedup else ")")
    dense = cm.dense_layer_us(spec, p, tokens_SR, core, isl=isl, kv_tokens=load.kv_tokens_SR)
    zeros = np.zeros_like(core)
    return Phases(core_SR=core, gemm_SR=(attn - core) + other, membound_SR=zeros, experts_dwdp_SR=dwdp,
                  experts_dep_S=dep, comm_S=a2a, comm_alt_S=a2a, dense_layer_SR=dense,
                  gemm_attention_SR=attn - core, comm_source=f"{dep_comm}: {src}")


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
                  skew: Skew, dep_comm: str = "allgather_reducescatter", dwdp_op=None) -> Phases:
    """TensorRT-LLM's kernels from the tables (module docstring); DEP communication on `dep_comm`, the other path
    kept as comm_alt_S (the range's DEP-fast end takes the faster of the two). dwdp_op (perf/moe_op.DwdpExpertOp):
    the op the host runs on DWDP layers when it is this project's (gemm multi_buffer), else None: the table's EP1 row."""
    tokens_SR = load.tokens_SR
    beyond: dict = {}
    dt = weight_dtype
    kv = KV_DTYPE[dt]
    core_ms, b = t.core_ms(kv, load.core_flops_SR, lambda x: cm.core_flops(spec, x, windowed=False),
                           isl, tokens_SR)  # the table's rate is per full causal request
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
    if dwdp_op is None:
        dwdp_ms, b_dwdp = t.moe_ms(moe_dt, 1, skew.dist, tokens_SR)
        dwdp_key = "routed experts (DWDP, EP1)"
    else:  # a routing the record lacks: its balanced row x the table's EP1 ratio of that routing to balanced
        def ratio(x):
            return t.moe_ms(moe_dt, 1, skew.dist, x)[0] / t.moe_ms(moe_dt, 1, "balanced", x)[0]
        dwdp_ms, b_dwdp = dwdp_op.ms(skew.dist, tokens_SR, ratio)
        dwdp_key = "routed experts (DWDP, this project's op)"
    dwdp = dwdp_ms * 1e3 * skew.dwdp_gemm
    group_tokens_S = tokens_SR.sum(-1)
    dep_ms, b_dep = t.moe_ms(moe_dt, group, skew.dist, group_tokens_S)
    if dep_ms is None:  # no rows at this EP size: the EP1 op on this rank's share (balanced), noted
        dep_ms, b_dep = t.moe_ms(moe_dt, 1, skew.dist, group_tokens_S / group)
        notes.append(f"no EP{group} MoE rows: DEP's experts priced as the EP1 op on 1/{group} of the tokens")
    dep = dep_ms * 1e3 * skew.dep_expert
    beyond[dwdp_key] = float(np.max(b_dwdp))
    beyond[f"routed experts (DEP, EP{group})"] = float(np.max(b_dep))
    comm_src = ""
    if group > 1:
        paths = _trtllm_comm(spec, t, weight_dtype, tokens_SR, group, notes, skew)
        comm, b_comm, comm_src = paths[dep_comm]
        # the range's DEP-fast end: the other path DEP could run (allgather_reducescatter <-> deepep, as aiconfigurator
        # compares them on one node); NVLinkOneSided: its modelled bandwidth at the fast end (A2A_FAST_EFF)
        if dep_comm == "alltoall":
            alt = comm * get_gpu(t.gpu).a2a_eff / A2A_FAST_EFF
        else:
            alt = paths["deepep" if dep_comm == "allgather_reducescatter" else "allgather_reducescatter"][0]
        if b_comm is not None:
            beyond["DEP communication"] = b_comm
        comm_src = f"{dep_comm}: {comm_src}"
    else:
        comm = alt = np.zeros(tokens_SR.shape[:-1])
    dense_mlp = _gemms(t, ("dense_fc1", "dense_fc2"), dt, tokens_SR, beyond, "dense MLP") if spec.first_k_dense else 0.0
    dense = core + proj + membound + dense_mlp
    return Phases(core_SR=core, gemm_SR=proj + other, membound_SR=membound, experts_dwdp_SR=dwdp, experts_dep_S=dep,
                  comm_S=comm, comm_alt_S=alt, dense_layer_SR=dense, beyond=beyond, beyond_dep_S=b_dep,
                  beyond_dwdp_SR=b_dwdp, notes=tuple(notes), gemm_attention_SR=proj, comm_source=comm_src)


def _trtllm_comm(spec: ModelSpec, t: ShapeTables, weight_dtype: str, tokens_SR, group: int, notes: list,
                 skew: Skew) -> dict:
    """DEP_COMMS path -> (us per sample, doublings past its table or None, how it was priced).

    allgather_reducescatter: the NCCL rows (BF16 hidden states of every rank's tokens). deepep: the DeepEP
    high-throughput dispatch + combine rows at the busiest rank's tokens (NVFP4 dispatch rows for nvfp4 experts,
    else BF16). alltoall (NVLinkOneSided): no rows in the shipped tables, so the cost model's all-to-all, deduplicated
    per destination rank, NVFP4 dispatch for nvfp4 experts (else FP8), BF16 combine, at the GPU's all-to-all
    bandwidth. Missing rows: the cost model at the GPU's all-to-all bandwidth (deepep: at A2A_FAST_EFF of the link,
    the fast end, as before), noted."""
    H = spec.hidden_size
    gpu = get_gpu(t.gpu)
    el_S = tokens_SR.sum(-1) * H
    ag, b_ag = t.comm_ms("all_gather", group, el_S)
    rs, b_rs = t.comm_ms("reduce_scatter", group, el_S)
    out = {}
    if ag is None or rs is None:
        out["allgather_reducescatter"] = (
            cm.allgather_reducescatter_us(spec, cm.CostParams(gpu=gpu), tokens_SR, group), None,
            "all-gather + reduce-scatter at the GPU's all-to-all bandwidth (cost model; no NCCL rows)")
        notes.append(f"no NCCL rows for {group} GPUs: all-gather + reduce-scatter priced by the cost model")
    else:
        ver = t.source["comm"]["nccl"].get("version", "?")
        out["allgather_reducescatter"] = ((ag + rs) * 1e3, float(max(np.max(b_ag), np.max(b_rs))),
                                          f"NCCL all-gather + reduce-scatter rows (nccl {ver}, BF16)")
    dt = "nvfp4" if weight_dtype == "nvfp4" else "bfloat16"
    ms, b = t.deepep_ms(H, group, tokens_SR.max(-1), dtype=dt)
    if ms is not None:
        ver = t.source["comm"].get("deepep_ht", {}).get("version", "?")
        out["deepep"] = (ms * 1e3 * skew.dep_a2a, float(np.max(b)),
                         f"DeepEP high-throughput dispatch + combine rows ({dt} dispatch, trtllm {ver})")
    else:
        us = cm.all_to_all_us(spec, cm.CostParams(gpu=gpu), tokens_SR, group) * gpu.a2a_eff / A2A_FAST_EFF
        out["deepep"] = (us * skew.dep_a2a, None, f"no DeepEP rows for EP{group}: all-to-all at {A2A_FAST_EFF:.2f} of the link")
    disp = "nvfp4" if weight_dtype == "nvfp4" else "fp8"
    p = cm.CostParams(gpu=gpu, dispatch_dtype=disp, a2a_dedup=True)
    out["alltoall"] = (cm.all_to_all_us(spec, p, tokens_SR, group) * skew.dep_a2a, None,
                       f"NVLinkOneSided modelled (no rows in the tables): one copy per destination rank, {disp} "
                       f"dispatch + BF16 combine at the GPU's all-to-all bandwidth (a2a efficiency {gpu.a2a_eff:g})")
    return out


def table_dist(skew_label: str) -> str | None:
    """The kernel-table distribution of a skew label ('power_law_1.01 (seed 0)' -> 'power_law_1.01'), or None."""
    name = skew_label.split(" ")[0]
    return name if name in DISTS else ("balanced" if name == "none" else None)
