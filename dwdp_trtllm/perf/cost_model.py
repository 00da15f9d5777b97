"""Roofline cost of one decoder layer on one rank, for DEP and DWDP (pure, numpy-vectorised).

Every kernel costs max(FLOPs / achievable rate, bytes / achievable bandwidth) (a roofline); a layer is
the sum of its kernels. Rates and bandwidths come from a GpuSpec (datasheet peak x efficiency) unless
a Calibration gives a measured number. With a floor calibration (`dwdp bench --floor` runs,
perf/floor_calibration.py) a compute phase costs its FLOPs / the measured floor rate at this size
(tokens per iteration, ISL; the attention core: FLOPs / R + calls x c), times the engine's measured /
floor for that phase when the calibration applies engine efficiency (validate-plan, not plan).

Legend: tokens_SR: per (sample, rank) arrays (any shape works; the last axis is the rank
when a group-wide quantity is reduced). Times are microseconds, sizes bytes, FLOPs counted as 2 per MAC.

MoE layer, one rank with T tokens in a group of G ranks (E experts, top-k, hidden H, expert inter I):
  attention   2*P_attn*T (projections; MLA's kv_b over prefix + chunk keys) + sum_segments
              2*heads*(d_qk + d_v)*(n*prefix + n^2/2) (causal core of n queries after a cached prefix)
  other       shared experts 6*H*I*n_shared*T + router 2*H*E*T
  experts     DWDP: 6*H*I*k*T over all E experts (reads E experts' weights)
              DEP:  6*H*I*k*T_group/G over E/G experts (routing assumed balanced over experts)
  all-to-all  DEP only: dispatch T*k*(G-1)/G tokens of H (FP8 or BF16), combine the same in BF16
              (a2a_dedup: T * E[distinct remote ranks among the top-k] instead of T*k*(G-1)/G);
              --dep-comm allgather_reducescatter instead: gather the other ranks' T of H and reduce-scatter back, BF16
  prefetch    DWDP only: the experts a rank lacks, pulled over NVLink, x contention slowdown
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..spec.models import ModelSpec
from ..core.placement import ExpertPlacement
from .calibration import Calibration, interp_log
from .floor_calibration import expert_overhead
from .flops import (attention_proj_flops, core_flops, dense_mlp_flops, routed_expert_flops,  # noqa: F401 (re-exported)
                    shared_and_router_flops)
from .contention import expected_slowdown
from .hardware import GpuSpec

#: the grouped-GEMM calibration is measured on a 256-expert top-8 layer: tokens = rows_per_expert * 32
_CAL_TOKENS_PER_ROW_PER_EXPERT = 256 / 8
#: CUDA context, allocator slack and kernel workspaces per rank (assumption)
#: routed-expert dtype -> the dtype its dense projections run in (FP4 checkpoints: NVIDIA ModelOpt NVFP4 and the
#: MXFP4 releases used by the published runs quantise the experts; their dense GEMMs are priced FP8, an assumption)
DENSE_DTYPE_FOR = {"bf16": "bf16", "fp8": "fp8", "mxfp4": "fp8", "nvfp4": "fp8"}
#: bytes per element without scales (roofline traffic; an expert's stored bytes with scales: ModelSpec.expert_bytes)
DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp4": 0.5, "nvfp4": 0.5}
#: bytes per dispatched element: NVFP4 post-quant dispatch carries an FP8 scale per 16 (weight_formats.NVFP4_GROUP)
DISPATCH_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16}


@dataclass(frozen=True)
class CostParams:
    """Everything the cost model needs besides the ModelSpec."""

    gpu: GpuSpec
    weight_dtype: str = "fp8"  # routed experts: bf16 | fp8 | mxfp4 | nvfp4
    dispatch_dtype: str = "fp8"  # DEP dispatch activations: bf16 | fp8 | nvfp4 (combine is always BF16)
    a2a_dedup: bool = False  # DeepEP-style: a token goes once to each remote *rank* holding any of its top-k
    calibration: Calibration = field(default_factory=Calibration)
    linear_dtype: str | None = None  # the dense GEMMs' dtype where it is not DENSE_DTYPE_FOR[weight_dtype] (a run
    #                                  with model.fp8_linear false: FP8 experts, BF16 linear layers)

    def __post_init__(self) -> None:
        if self.weight_dtype not in DTYPE_BYTES:
            raise ValueError(f"weight_dtype {self.weight_dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
        if self.dispatch_dtype not in DISPATCH_BYTES:
            raise ValueError(f"dispatch_dtype {self.dispatch_dtype!r}: expected one of {', '.join(DISPATCH_BYTES)}")
        if self.linear_dtype not in (None, "bf16", "fp8"):
            raise ValueError(f"linear_dtype {self.linear_dtype!r}: expected bf16 or fp8")

    @property
    def dense_dtype(self) -> str:
        """Attention/dense projections: FP8 checkpoints keep them FP8; NVFP4 checkpoints quantise only experts."""
        return self.linear_dtype or DENSE_DTYPE_FOR[self.weight_dtype]

    @property
    def hbm_bps(self) -> float:
        c = self.calibration.hbm_tbps
        return c * 1e12 if c else self.gpu.hbm_bytes_per_s

    def peer_bps_for(self, group: int) -> float:
        """Pull bandwidth of a rank in a group of `group`: the calibrated one, else the GPU's (a mesh GPU, e.g.
        MI355X, uses min(group - 1, links) links; a switch is the same at any group)."""
        c = self.calibration.peer_copy_gbps
        return c * 1e9 if c else self.gpu.peer_bytes_per_s_for(group)

    def a2a_bps_for(self, group: int) -> float:
        c = self.calibration.all_to_all_gbps
        return c * 1e9 if c else self.gpu.a2a_bytes_per_s_for(group)

    def gemm_flops_per_s(self, dtype: str, rows_per_expert: np.ndarray | float | None = None) -> np.ndarray | float:
        pts = self.calibration.grouped_gemm_tflops.get(dtype)
        if pts is None or rows_per_expert is None:
            return self.gpu.matmul_tflops(dtype) * 1e12
        return interp_log(pts, np.maximum(np.asarray(rows_per_expert, float) * _CAL_TOKENS_PER_ROW_PER_EXPERT, 1.0)) * 1e12


def roofline_us(flops, nbytes, flops_per_s, bytes_per_s):
    """max(compute time, memory time) in microseconds (elementwise)."""
    return np.maximum(np.asarray(flops, float) / flops_per_s, np.asarray(nbytes, float) / bytes_per_s) * 1e6


# ---- FLOPs (perf/flops.py) and bytes --------------------------------------------------------------
def expert_activation_bytes(spec: ModelSpec, rows, weight_dtype: str):
    """HBM traffic of the expert GEMMs' activations: fc1 in, fc1 out (BF16), fc2 in, fc2 out (BF16)."""
    a_in = 2.0 if weight_dtype == "bf16" else 1.0
    H, I = spec.hidden_size, spec.moe_intermediate
    return np.asarray(rows, float) * (H * a_in + 2 * I * 2 + I * a_in + H * 2)


def fetch_bytes(spec: ModelSpec, placement: ExpertPlacement, weight_dtype: str) -> tuple[int, int]:
    """(largest bytes any rank pulls, largest bytes any source serves) for one MoE layer."""
    eb = spec.expert_bytes(weight_dtype)
    pulled = max(len(placement.fetch_experts(r)) for r in range(placement.dwdp_size))
    return pulled * eb, placement.max_source_load() * eb


# ---- per-kernel times ------------------------------------------------------------------------
def core_rate(spec: ModelSpec, p: CostParams) -> float:
    """FLOP/s of the causal attention core (floor R, a measured rate, or the GPU default)."""
    cal = p.calibration
    fit = cal.core_floor()
    if fit:
        return fit[0] * 1e12
    return cal.attention_tflops * 1e12 if cal.attention_tflops else p.gpu.attention_flops_per_s


def core_us(spec: ModelSpec, p: CostParams, flops, calls, isl):
    """Attention core of one layer: `flops` (causal core FLOPs) in `calls` segments at ISL `isl` (elementwise).
    Floor calibration: flops / R + calls x c; `attention_us_by_isl`: its rate at `isl`; else flops / rate."""
    cal = p.calibration
    flops = np.asarray(flops, float)
    if cal.attention_us_by_isl:
        us = cal.attention_us(isl)
        return flops * us / float(core_flops(spec, isl, windowed=False)) if us else np.zeros_like(flops)
    fit = cal.core_floor()
    if fit:
        return flops / (fit[0] * 1e12) * 1e6 + np.asarray(calls, float) * fit[1] * 1e3
    return flops / core_rate(spec, p) * 1e6


def attention_us(spec: ModelSpec, p: CostParams, tokens, core, *, isl=None, kv_tokens=None):
    """Projections + the attention core time `core` (core_us) of one layer. With a floor calibration the
    projections run at the measured floor rate at (tokens, isl) and the sum takes the engine's measured / floor
    for attention; else the projections are a roofline at the dense dtype."""
    cal = p.calibration
    flops = attention_proj_flops(spec, tokens, kv_tokens)
    rate = cal.floor_rate("attention_proj", tokens, isl, p.dense_dtype)
    if rate is not None:
        return (flops / (rate * 1e12) * 1e6 + core) * cal.engine_factor("attention", tokens, isl, linear_dtype=p.dense_dtype)
    wbytes = spec.attention_params() * DTYPE_BYTES[p.dense_dtype]
    act = np.asarray(tokens, float) * spec.hidden_size * 2 * 4  # q/kv/o inputs and outputs, BF16
    return roofline_us(flops, wbytes + act, p.gemm_flops_per_s(p.dense_dtype), p.hbm_bps) + core


def _other_floor_us(p: CostParams, flops, tokens, isl):
    cal = p.calibration
    rate = cal.floor_rate("other", tokens, isl, p.dense_dtype)
    return None if rate is None else flops / (rate * 1e12) * 1e6 * cal.engine_factor("other", tokens, isl, linear_dtype=p.dense_dtype)


def other_us(spec: ModelSpec, p: CostParams, tokens, *, isl=None):
    """Shared experts and router of one MoE layer (replicated weights, dense dtype); floor-calibrated as "other"."""
    flops = shared_and_router_flops(spec, tokens)
    floor = _other_floor_us(p, flops, tokens, isl)
    if floor is not None:
        return floor
    wbytes = (spec.expert_params * spec.num_shared_experts * DTYPE_BYTES[p.dense_dtype]
              + spec.hidden_size * spec.num_experts * 2)
    return roofline_us(flops, wbytes, p.gemm_flops_per_s(p.dense_dtype), p.hbm_bps)


def experts_us(spec: ModelSpec, p: CostParams, rows, num_experts: int, *, isl=None):
    """Grouped GEMM over `num_experts` experts holding `rows` (token, expert) pairs in total. Floor-calibrated:
    FLOPs / R_dtype x expert_overhead(rows per expert), the engine's factor at the size of a one-rank layer with
    the same rows per expert (rows / num_experts x E / top-k tokens).
    `isl` (here and in the other phases) is the size's second coordinate for a floor calibration; None: tokens only."""
    rows = np.asarray(rows, float)
    flops = 6.0 * spec.hidden_size * spec.moe_intermediate * rows
    cal = p.calibration
    fit = cal.expert_floor(p.weight_dtype)
    if fit is not None:
        size = rows / num_experts * spec.num_experts / spec.top_k
        floor = flops / (fit[0] * 1e12) * 1e6 * expert_overhead(rows / num_experts, fit[1])
        return floor * cal.engine_factor("expert_gemm", size, isl, p.weight_dtype)
    nbytes = num_experts * spec.expert_bytes(p.weight_dtype) + expert_activation_bytes(spec, rows, p.weight_dtype)
    return roofline_us(flops, nbytes, p.gemm_flops_per_s(p.weight_dtype, rows / num_experts), p.hbm_bps)


def dense_layer_us(spec: ModelSpec, p: CostParams, tokens, core, *, isl=None, kv_tokens=None):
    """One of the first_k_dense layers (identical in DEP and DWDP)."""
    return attention_us(spec, p, tokens, core, isl=isl, kv_tokens=kv_tokens) + dense_mlp_us(spec, p, tokens, isl=isl)


def dense_mlp_us(spec: ModelSpec, p: CostParams, tokens, *, isl=None):
    """The MLP of one first_k_dense layer; floor-calibrated as "other"."""
    flops = dense_mlp_flops(spec, tokens)
    floor = _other_floor_us(p, flops, tokens, isl)
    if floor is not None:
        return floor
    wbytes = 3 * spec.hidden_size * spec.dense_intermediate * DTYPE_BYTES[p.dense_dtype]
    return roofline_us(flops, wbytes, p.gemm_flops_per_s(p.dense_dtype), p.hbm_bps)


def all_to_all_us(spec: ModelSpec, p: CostParams, tokens_SR, group: int):
    """DEP dispatch + combine per layer for the group: the busiest rank's send or receive volume."""
    tokens_SR = np.asarray(tokens_SR, float)
    if group <= 1:
        return np.zeros(tokens_SR.shape[:-1])
    k, H = spec.top_k, spec.hidden_size
    remote = (group - 1) / group
    if p.a2a_dedup:  # expected distinct remote ranks among a token's top-k (uniform routing), in top-k units
        k = remote_ranks_per_token(spec, group) / remote
    send = tokens_SR * k * remote * H  # elements each rank sends (dispatch) / receives back (combine)
    recv = (tokens_SR.sum(-1, keepdims=True) - tokens_SR) * k / group * H
    vol = np.maximum(send, recv).max(-1)
    nbytes = vol * (DISPATCH_BYTES[p.dispatch_dtype] + 2.0)  # dispatch in FP8/BF16/NVFP4, combine in BF16
    return nbytes / p.a2a_bps_for(group) * 1e6 + p.gpu.a2a_latency_us


def allgather_reducescatter_us(spec: ModelSpec, p: CostParams, tokens_SR, group: int):
    """DEP on TensorRT-LLM's AllGatherReduceScatter path per layer: every rank gathers all ranks' BF16 hidden states
    (it receives the others' tokens) and reduce-scatters the outputs back (it sends the same volume), at the GPU's
    all-to-all bandwidth; the busiest rank's volume."""
    tokens_SR = np.asarray(tokens_SR, float)
    if group <= 1:
        return np.zeros(tokens_SR.shape[:-1])
    others = (tokens_SR.sum(-1, keepdims=True) - tokens_SR).max(-1)
    nbytes = 2 * others * spec.hidden_size * 2.0  # all-gather in + reduce-scatter out, BF16
    return nbytes / p.a2a_bps_for(group) * 1e6 + 2 * p.gpu.a2a_latency_us


def remote_ranks_per_token(spec: ModelSpec, group: int) -> float:
    """E[number of other ranks holding at least one of a token's top-k experts], experts split evenly."""
    E, k = spec.num_experts, spec.top_k
    per_rank = E // group
    p_miss = math.comb(E - per_rank, k) / math.comb(E, k)
    return (group - 1) * (1 - p_miss)


def prefetch_us(spec: ModelSpec, p: CostParams, placement: ExpertPlacement, slice_bytes: int,
                extra_src_bytes: float = 0.0) -> float:
    """DWDP pull of one layer's missing experts: NVLink-bound, inflated by source contention. `extra_src_bytes`:
    other bytes the serving rank sends on the same links in that layer's window (its KV-cache transfer to the
    generation servers, sizing/context_cost.py `kv_contention`), added to the bytes it serves its peers."""
    if placement.dwdp_size <= 1:
        return 0.0
    dest, src = fetch_bytes(spec, placement, p.weight_dtype)
    src = src + extra_src_bytes
    sliced = slice_bytes > 0
    eff = (p.calibration.slice_eff(slice_bytes) or 1.0) if sliced else 1.0
    return max(dest, src) / (p.peer_bps_for(placement.dwdp_size) * eff) * contention_factor(p, placement.dwdp_size, sliced) * 1e6


def contention_factor(p: CostParams, group: int, sliced: bool) -> float:
    """Many-to-one slowdown of a pull: the calibrated one when measured, else the model's expectation."""
    slow = p.calibration.contention_slowdown.get("sliced" if sliced else "unsliced")
    return expected_slowdown(group, sliced) if slow is None else slow


def overlapped_us(compute_us, prefetch: float, slowdown: float):
    """Layer time when `prefetch` runs under `compute_us`; compute overlapped with copies is `slowdown`x slower.

    If the slowed compute covers the copy, the copy is hidden and the layer costs
    compute + prefetch*(1 - 1/slowdown) (the part of the compute that ran beside the copy, slowed).
    Otherwise the copy is exposed and the layer costs the copy time.
    """
    c = np.asarray(compute_us, float)
    if prefetch <= 0:
        return c
    return np.where(c * slowdown >= prefetch, c + prefetch * (1 - 1 / slowdown), prefetch)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b) if b else 0
