"""The DEP a Hopper user would otherwise run: TensorRT-LLM's default, or DeepEP + DeepGEMM (what SGLang deploys) (pure).

`trtllm` (TensorRT-LLM's default): its fused MoE (CUTLASS fp8_block on Hopper) and the communication path it selects,
both from its kernel tables (perf/phases.trtllm_phases).

`deepep_deepgemm` (FP8 experts on Hopper only): DEP's routed experts and dispatch/combine re-priced from published
numbers; attention, dense GEMMs and DWDP's side are unchanged (the same model served by either stack):
- routed experts: DeepGEMM's grouped GEMM, contiguous layout, on H800 SXM5 (same SM90 FP8 tensor-core peak as
  H100 / H200), deepseek-ai/DeepGEMM README.md @ 327ec92f6977e7fee022cb76a8f273b75483c3d8 ("Grouped GEMMs for MoE
  models (contiguous layout)"): N 4096 x K 7168 (gate|up) 1346 TFLOPS, N 7168 x K 2048 (down) 1214 TFLOPS at 4096-8192
  rows per group; each expert's rows padded to the 128-row M block (get_mk_alignment_for_contiguous_layout).
- dispatch (FP8 with 1x128 scales) and combine (BF16), a token sent once per remote rank holding any of its top-k:
  DeepEP's normal intranode kernels, deepseek-ai/DeepEP docs/legacy.md @ dd758caf451848bd150e1046af3d0a73e5fff38d
  ("Normal kernels with NVLink and RDMA forwarding"): EP8 on H800 dispatch 153 GB/s and combine 158 GB/s of its
  ~160 GB/s NVLink maximum, i.e. DEEPEP_FRACTION of the link's achievable bandwidth, applied to this GPU's achievable
  peer bandwidth (GpuSpec.peer_bytes_per_s_for).
- the range's DEP-slow end, DeepSeek-V3/R1 shapes on 8 H200: the published DeepEP + grouped GEMM MoE layer, as
  quoted beside DeepGEMM's SM90 Mega MoE (deepseek-ai/DeepGEMM PR 352 and 383, sgl-project/sglang PR 29016): Mega
  MoE 2.09 / 3.87 / 7.49 ms per layer at 2K / 4K / 8K tokens per rank, DeepEP + grouped GEMM 1.19-1.22x that
  (MEGAMOE_H200_MS x ANCHOR_OVER_MEGAMOE), linear in tokens beyond 8K (marked extrapolated). Where it is slower than
  the components, the difference is put on communication (comm_S) and the components' communication is the fast
  end (comm_alt_S), so the "DEP communication" range spans both. Other models' shapes have no published DeepGEMM
  rate: the DeepSeek-V3 shapes' rates are the nominal and TensorRT-LLM's own MoE op + communication the slow end.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

#: --dep values: which DEP the plan compares against
VARIANTS = ("trtllm", "deepep_deepgemm")
LABELS = {"trtllm": "TensorRT-LLM's DEP (CUTLASS fp8_block MoE + its communication)",
          "deepep_deepgemm": "DeepEP + DeepGEMM DEP (what SGLang deploys on Hopper)"}
#: a table's heading (fits 60 columns with its --dep value)
SHORT = {"trtllm": "TensorRT-LLM's DEP", "deepep_deepgemm": "DeepEP+DeepGEMM DEP (SGLang)"}
HOPPER = ("h100", "h200")
#: DeepGEMM grouped contiguous FP8, TFLOP/s (module docstring): gate|up and down
DEEPGEMM_TFLOPS = {"fc1": 1346.0, "fc2": 1214.0}
DEEPGEMM_M_BLOCK = 128
#: DeepEP normal intranode EP8, fraction of the link's achievable bandwidth: dispatch 153 / 160, combine 158 / 160
DEEPEP_FRACTION = {"dispatch": 153.0 / 160.0, "combine": 158.0 / 160.0}
#: DeepGEMM SM90 Mega MoE on 8 H200, DeepSeek-V3 shapes: (tokens per rank, ms per layer)
MEGAMOE_H200_MS = ((2048, 2.09), (4096, 3.87), (8192, 7.49))
ANCHOR_OVER_MEGAMOE = 1.205  # DeepEP + grouped GEMM over Mega MoE: 1.19-1.22x, the middle


def applies(spec) -> bool:
    """deepep_deepgemm is priced for FP8 experts on Hopper, target trtllm (its tables price the rest)."""
    return spec.gpu.name in HOPPER and spec.weight_dtype == "fp8" and spec.tables is not None


def variants(spec, chosen: str | None) -> tuple[str, ...]:
    """The DEP variants a plan prices: the one chosen with --dep, else every one that applies here."""
    if chosen is not None:
        return (chosen,)
    return VARIANTS if applies(spec) else ("trtllm",)


def _deepseek_shapes(m) -> bool:
    return (m.hidden_size, m.moe_intermediate, m.num_experts, m.top_k) == (7168, 2048, 256, 8)


def experts_us(m, rows_S, local_experts: int):
    """DeepGEMM grouped GEMMs of one DEP rank: `rows_S` routed rows over `local_experts`, padded per expert."""
    padded = rows_S + local_experts * (DEEPGEMM_M_BLOCK - 1) / 2  # mean padding of a partly filled 128-row block
    H, I = m.hidden_size, m.moe_intermediate
    fc1 = 2.0 * padded * H * 2 * I / (DEEPGEMM_TFLOPS["fc1"] * 1e12)
    fc2 = 2.0 * padded * I * H / (DEEPGEMM_TFLOPS["fc2"] * 1e12)
    return (fc1 + fc2) * 1e6


def comm_us(m, gpu, tokens_SR, group: int, measured_bytes_per_s: float | None = None):
    """DeepEP normal dispatch (FP8 + 1x128 scales) + combine (BF16) of the busiest rank, once per remote rank: at
    DeepEP's published fraction of the peer link, or at a measured all-to-all bandwidth (a calibration's)."""
    from .cost_model import remote_ranks_per_token

    tok = np.asarray(tokens_SR, float).max(-1)
    remote = remote_ranks_per_token(m, group)
    bw = measured_bytes_per_s or gpu.peer_bytes_per_s_for(group)
    frac = {k: 1.0 for k in DEEPEP_FRACTION} if measured_bytes_per_s else DEEPEP_FRACTION
    H = m.hidden_size
    dispatch = tok * remote * (H + H / 128 * 4) / (bw * frac["dispatch"])
    combine = tok * remote * H * 2 / (bw * frac["combine"])
    return (dispatch + combine) * 1e6


def anchor_us(tokens_S):
    """(us, doublings past 8K) of the published DeepEP + grouped GEMM layer at `tokens_S` per rank."""
    x = np.array([p[0] for p in MEGAMOE_H200_MS], float)
    y = np.array([p[1] for p in MEGAMOE_H200_MS], float) * ANCHOR_OVER_MEGAMOE
    t = np.asarray(tokens_S, float)
    slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
    ms = np.where(t <= x[-1], np.interp(t, x, y), y[-1] + slope * (t - x[-1]))
    return ms * 1e3, np.maximum(np.log2(np.maximum(t, 1.0) / x[-1]), 0.0)


def deepep_deepgemm(spec, ph, tokens_SR, group: int, skew_factor: float = 1.0):
    """Phases `ph` (TensorRT-LLM's) with DEP's routed experts and communication priced for DeepEP + DeepGEMM."""
    m = spec.model
    if group <= 1:
        return replace(ph, comm_source="deepep_deepgemm: one rank, no dispatch")
    tokens_SR = np.asarray(tokens_SR, float)
    rows_S = tokens_SR.sum(-1) * m.top_k / group * skew_factor  # the busiest EP rank's rows (skew from the tables)
    local = -(-m.num_experts // group)
    experts = experts_us(m, rows_S, local)
    gbps = spec.calibration.all_to_all_gbps  # measured (perf/inputs.py): then neither ranged nor anchored
    comm = comm_us(m, spec.gpu, tokens_SR, group, gbps * 1e9 if gbps else None)
    beyond = {k: v for k, v in ph.beyond.items() if not k.startswith(("routed experts (DEP", "DEP communication"))}
    src = (f"deepep_deepgemm: DeepGEMM grouped GEMM {DEEPGEMM_TFLOPS['fc1']:g}/{DEEPGEMM_TFLOPS['fc2']:g} TFLOPS "
           f"(DeepGEMM README) + DeepEP normal dispatch/combine " + (
               f"at the measured all-to-all bandwidth {gbps:g} GB/s (calibration)" if gbps else
               f"at {DEEPEP_FRACTION['dispatch']:.2f}/{DEEPEP_FRACTION['combine']:.2f} of the peer link (DeepEP legacy.md)"))
    alt, b_anchor = comm, 0.0
    if not _deepseek_shapes(m):  # the published rates are DeepSeek-V3 shapes': no slower than TensorRT-LLM's MoE op
        src += f"; rates of DeepSeek-V3 shapes (none published for {m.name}'s), range up to TensorRT-LLM's op + comm"
        alt = np.maximum(ph.experts_dep_S + ph.comm_S - experts, comm)
    elif spec.gpu.name == "h200" and group == 8 and not gbps:
        total, b = anchor_us(tokens_SR.max(-1) * skew_factor)
        slow = np.maximum(total - experts, comm)
        comm, alt = slow, np.minimum(slow, alt)
        b_anchor = float(np.max(b))
        src += "; slow end: the published 8xH200 DeepEP + grouped GEMM layer (1.205 x DeepGEMM Mega MoE)"
        if b_anchor > 0.01:
            beyond["DEP communication"] = b_anchor
    return replace(ph, experts_dep_S=experts, comm_S=comm, comm_alt_S=alt, beyond=beyond, beyond_dep_S=0.0,
                   comm_source=src)
