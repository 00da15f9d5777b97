"""Grouped routed-expert computation over expert weights that may live in several buffers.

Shape legend: T tokens, K top-k, A = T*K token-expert pairs, H hidden, I moe intermediate,
E experts, B number of weight buffers, R_b experts (rows) held by buffer b, N out features, D in features.

Expert e's weights are row expert_row_E[e] of buffer weights[expert_buffer_idx_E[e]]; a buffer is
[R_b, N, D] (nn.Linear out x in, models.py layout). DWDP passes [local buffer, prefetch slot];
the single-process reference passes one [E, ...] buffer. engine/expert_maps.py turns such maps into one [E, ...]
tensor (gather_experts; identity_map: one buffer already in expert order, used in place).

GEMM paths (GEMM_PATHS; the key is `gemm=`): fn(a_AD, offs_E, weights, expert_buffer_idx_E,
expert_row_E, scales=None) -> out_AN with out[rows of group e] = a[rows] @ W_e^T. offs_E are int32
cumulative group ends (offs_E[-1] == A); the maps are int32 or int64 tensors on a's device.
'reference' loops over experts (float32 accumulate, host sync: tests only); 'merge' gathers all
experts into one [E, N, D] tensor (each buffer read once, no host sync) and runs torch._grouped_mm.
'multi_buffer' and 'composite_view' (the C++ op, engine/gemm_paths.py) and 'deepgemm' (DeepGEMM on one FP8
[E, N, K] buffer, opt-in, engine/moe_deepgemm.py) register on first lookup (gemm_path).
A path registered with fp8_activations=True also takes `Fp8Rows` for a_AD when its weights are fp8 (activations
quantised by the caller: once per token before the gather, and fused with the SwiGLU); the others get bf16 rows.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from .expert_maps import gather_experts, identity_map  # noqa: F401 - imported from here too
from .fp8_rows import FP8_GROUP, Fp8Rows, quantize_act_1x128
from .fused import _silu_mul, fused, fused_enabled, inverse_permutation
from .weights import FP8_DTYPE, dequantize_fp8_blockwise

GemmFn = Callable[..., torch.Tensor]


@dataclass(frozen=True, slots=True)
class GemmPath:
    fn: GemmFn
    supports_fp8: bool  # fn accepts fp8 buffers with `scales` (128x128 block scales per buffer)
    fp8_activations: bool = False  # with fp8 buffers, fn takes Fp8Rows (activations quantised 1x128 by the caller)
    # the expert MLP on the GEMM's own padded row layout (its one gather writes it, combine reads it through the
    # index): padded_mlp(x_TH, topk_ids_TK, w13, w2, buf_idx_E, row_E, *, w13_scale_sources, w2_scale_sources,
    # up_first, act) -> (y_MH, perm_A, dest_A: the padded row of sorted pair a), or None where it declines (the
    # unpadded op runs); None here: the path has no padded MLP (engine/moe_deepgemm.routed_mlp is the one there is)
    padded_mlp: Callable | None = None


def silu_mul(h_A2I: torch.Tensor, up_first: bool = False) -> torch.Tensor:
    """[A, 2I] gate | up (up | gate with up_first) -> silu(gate) * up (float32 math, h's dtype); one kernel on CUDA."""
    return (fused("silu_mul", h_A2I) or _silu_mul)(h_A2I, up_first)


def silu_mul_quant(h_A2I: torch.Tensor, up_first: bool = False, *, scale_col_major: bool = False) -> Fp8Rows:
    """silu_mul then 1x128 FP8 quantisation: one Triton pass on CUDA (the FP8 down projection's input).
    scale_col_major: scales stored outer-dim-major (DeepGEMM's layout; the same values)."""
    if h_A2I.is_cuda and (h_A2I.shape[1] // 2) % FP8_GROUP == 0 and fused_enabled():
        from .quant_cuda import silu_mul_quant as fused_silu_mul_quant
        return Fp8Rows(*fused_silu_mul_quant(h_A2I, up_first, scale_col_major=scale_col_major))
    return quantize_act_1x128(silu_mul(h_A2I, up_first), scale_col_major=scale_col_major)


GEMM_PATHS: dict[str, GemmPath] = {}


def register_gemm(name: str, fn: GemmFn, *, supports_fp8: bool = False, fp8_activations: bool = False,
                  padded_mlp: Callable | None = None, overwrite: bool = False) -> None:
    """Make `fn` selectable as gemm=`name` (see the module docstring for its contract)."""
    if name in GEMM_PATHS and not overwrite:
        raise ValueError(f"gemm path {name!r} already registered")
    GEMM_PATHS[name] = GemmPath(fn, supports_fp8, fp8_activations, padded_mlp)


#: paths that engine/gemm_paths.py defines, registered here on first use (they load the C++/CUDA op or DeepGEMM)
PLUGIN_PATHS = ("multi_buffer", "composite_view", "deepgemm")


def gemm_path(name: str) -> GemmPath:
    """GEMM_PATHS[name], registering the plugin paths on first use; ValueError naming the choices."""
    if name in PLUGIN_PATHS and name not in GEMM_PATHS:
        from .gemm_paths import PLUGINS  # gemm_paths imports nothing of this module: no circle
        for plugin, (fn, supports_fp8, fp8_activations, padded_mlp) in PLUGINS.items():
            if plugin not in GEMM_PATHS:
                register_gemm(plugin, fn, supports_fp8=supports_fp8, fp8_activations=fp8_activations,
                              padded_mlp=padded_mlp)
    try:
        return GEMM_PATHS[name]
    except KeyError:
        raise ValueError(f"gemm={name!r}: expected one of {sorted(set(GEMM_PATHS) | set(PLUGIN_PATHS))}") from None


_warned: set[str] = set()


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


# ---- routing bookkeeping ---------------------------------------------------------------------------
def sort_by_expert(topk_ids_TK: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(perm_A, offs_E int32 cumulative ends, counts_E int64): pair perm[j] (flat t*K+k) is the j-th in
    expert order. scatter_add, not bincount: CUDA bincount syncs the host to size its output."""
    flat_A = topk_ids_TK.reshape(-1)
    perm_A = torch.sort(flat_A, stable=True).indices
    counts_E = torch.zeros(num_experts, dtype=torch.int64, device=flat_A.device)
    counts_E.scatter_add_(0, flat_A, torch.ones_like(flat_A))
    return perm_A, counts_E.cumsum(0).to(torch.int32), counts_E


#: rows of the float32 weighted temporary in combine() per index_add_ (bounds its memory)
COMBINE_CHUNK_BYTES = 256 << 20


def gather_sorted(x_TH: torch.Tensor, topk_ids_TK: torch.Tensor, num_experts: int, *, fp8_rows: bool = False):
    """(x_sorted_AH, perm_A, offs_E, counts_E): token rows repeated per routed copy, in expert order
    (sort_by_expert's order, the one combine() undoes). fp8_rows: x is quantised first (T rows, not T*K)
    and x_sorted is Fp8Rows; quantisation is per row, so this equals quantising the gathered rows."""
    perm_A, offs_E, counts_E = sort_by_expert(topk_ids_TK, num_experts)
    rows_A = torch.div(perm_A, topk_ids_TK.shape[1], rounding_mode="floor")
    x_sorted_AH = quantize_act_1x128(x_TH).index_select(rows_A) if fp8_rows else x_TH.index_select(0, rows_A)
    return x_sorted_AH, perm_A, offs_E, counts_E


def wants_fp8_rows(gemm: str, fp8_weights: bool) -> bool:
    """The expert GEMMs of this path take Fp8Rows (so gather_sorted should quantise)."""
    return fp8_weights and gemm_path(gemm).fp8_activations


def combine(y_sorted_AH: torch.Tensor, perm_A: torch.Tensor, topk_weights_TK: torch.Tensor, num_tokens: int,
            out_dtype: torch.dtype = torch.float32, *, y_rows_A: torch.Tensor | None = None) -> torch.Tensor:
    """y_TH = sum_k w[t,k] * y[pair (t,k)], accumulated in float32, returned in out_dtype. On CUDA one Triton
    kernel (engine/combine_cuda.py: each token's K rows gathered, weighted and summed in routing order);
    elsewhere index_add_ in expert order:

    Rows go in chunks of COMBINE_CHUNK_BYTES of float32 temporary, in order (the same sums as one call on
    the CPU): at DeepSeek-R1 width and 16K tokens x top-8 one unchunked temporary is 3.5 GiB.
    y_rows_A: sorted pair a's row of y_sorted (a padded GEMM output, GemmPath.padded_mlp's dest_A; its other rows
    are never read); None: row a. On CUDA the kernel reads through it (no unpad pass)."""
    K = topk_weights_TK.shape[1]
    A = perm_A.shape[0]
    if y_sorted_AH.is_cuda and A == num_tokens * K and fused_enabled():
        from .combine_cuda import combine_cuda
        inv_A = inverse_permutation(perm_A)
        return combine_cuda(y_sorted_AH, inv_A if y_rows_A is None else y_rows_A.index_select(0, inv_A),
                            topk_weights_TK, out_dtype)
    if y_rows_A is not None:
        y_sorted_AH = y_sorted_AH.index_select(0, y_rows_A)
    H = y_sorted_AH.shape[1]
    w_A = topk_weights_TK.reshape(-1).float().index_select(0, perm_A)
    tok_A = torch.div(perm_A, K, rounding_mode="floor")
    y_TH = torch.zeros(num_tokens, H, dtype=torch.float32, device=y_sorted_AH.device)
    step = max(1, COMBINE_CHUNK_BYTES // (4 * max(H, 1)))
    for a in range(0, A, step):
        y_TH.index_add_(0, tok_A[a:a + step], y_sorted_AH[a:a + step].float() * w_A[a:a + step, None])
    return y_TH.to(out_dtype)


# ---- GEMM paths ------------------------------------------------------------------------------------
def _is_fp8(weights: list[torch.Tensor]) -> bool:
    return any(w.dtype == FP8_DTYPE for w in weights)


def _gemm_reference(a_AD, offs_E, weights, buf_idx_E, row_E, scales=None):
    ends = offs_E.tolist()  # host sync: reference only
    bufs, rows = buf_idx_E.tolist(), row_E.tolist()
    out_AN = torch.empty(a_AD.shape[0], weights[0].shape[1], dtype=a_AD.dtype, device=a_AD.device)
    begin = 0
    for e, end in enumerate(ends):
        if end > begin:
            w_ND = weights[bufs[e]][rows[e]]
            w_ND = dequantize_fp8_blockwise(w_ND, scales[bufs[e]][rows[e]]) if scales is not None else w_ND.float()
            out_AN[begin:end] = (a_AD[begin:end].float() @ w_ND.t()).to(a_AD.dtype)
        begin = end
    return out_AN


def _grouped_mm_or_none(a_AD: torch.Tensor, w_END: torch.Tensor, offs_E: torch.Tensor) -> torch.Tensor | None:
    if not hasattr(torch, "_grouped_mm"):
        _warn_once("no_grouped_mm", "gemm='merge': torch._grouped_mm missing in this torch; looping over experts")
        return None
    if a_AD.is_cuda and (a_AD.dtype != torch.bfloat16 or a_AD.shape[1] % 8 or w_END.shape[1] % 8):
        _warn_once(f"align_{a_AD.dtype}", f"gemm='merge': torch._grouped_mm on CUDA needs bf16 and dims % 8 == 0 "
                   f"(got {a_AD.dtype}, D={a_AD.shape[1]}, N={w_END.shape[1]}); looping over experts")
        return None
    try:
        return torch._grouped_mm(a_AD, w_END.transpose(1, 2), offs=offs_E)
    except (RuntimeError, NotImplementedError) as exc:
        _warn_once(f"fail_{a_AD.device.type}_{a_AD.dtype}", f"gemm='merge': torch._grouped_mm unusable here ({exc}); looping over experts")
        return None


def _gemm_merge(a_AD, offs_E, weights, buf_idx_E, row_E, scales=None):
    w_END = gather_experts(weights, buf_idx_E, row_E)
    if scales is not None:
        w_END = dequantize_fp8_blockwise(w_END, gather_experts(scales, buf_idx_E, row_E), a_AD.dtype)
    elif w_END.dtype != a_AD.dtype:
        w_END = w_END.to(a_AD.dtype)
    out = _grouped_mm_or_none(a_AD, w_END, offs_E)
    if out is None:
        E = w_END.shape[0]
        out = _gemm_reference(a_AD, offs_E, [w_END], torch.zeros(E, dtype=torch.int64), torch.arange(E))
    return out


register_gemm("reference", _gemm_reference, supports_fp8=True)
register_gemm("merge", _gemm_merge, supports_fp8=True)


def grouped_gemm(a_AD: torch.Tensor, offs_E: torch.Tensor, weights: list[torch.Tensor], expert_buffer_idx_E: torch.Tensor,
                 expert_row_E: torch.Tensor, *, gemm: str = "reference", scales: list[torch.Tensor] | None = None) -> torch.Tensor:
    """out_AN = a @ W_e^T per expert group, dispatched to GEMM_PATHS[gemm]."""
    path = gemm_path(gemm)
    if isinstance(a_AD, Fp8Rows) and not (path.fp8_activations and _is_fp8(weights)):
        raise ValueError(f"gemm={gemm!r}: Fp8Rows activations need fp8 weights and a path that takes them")
    if a_AD.shape[0] == 0:
        return torch.empty(0, weights[0].shape[1], device=weights[0].device,
                           dtype=torch.bfloat16 if isinstance(a_AD, Fp8Rows) else a_AD.dtype)
    fp8 = _is_fp8(weights)
    if fp8 and scales is None:
        raise ValueError("fp8 expert weights need their block scales (scales=...)")
    if fp8 and not path.supports_fp8:
        # Correct but slow: materialises every buffer in the activation dtype.
        _warn_once(f"fp8_{gemm}", f"gemm={gemm!r} has no fp8 support: dequantising the expert buffers first")
        weights = [dequantize_fp8_blockwise(w, s, a_AD.dtype) for w, s in zip(weights, scales)]  # type: ignore[arg-type]
        scales = None
    return path.fn(a_AD, offs_E, weights, expert_buffer_idx_E, expert_row_E, scales=scales if fp8 else None)


def expert_mlp(x_sorted_AH: torch.Tensor | Fp8Rows, offs_E: torch.Tensor, w13_sources: list[torch.Tensor],
               w2_sources: list[torch.Tensor], expert_buffer_idx_E: torch.Tensor, expert_row_E: torch.Tensor, *,
               gemm: str = "reference", w13_scale_sources: list[torch.Tensor] | None = None,
               w2_scale_sources: list[torch.Tensor] | None = None, up_first: bool = False) -> torch.Tensor:
    """SwiGLU experts on expert-sorted rows: down(silu(gate) * up), per group. Returns y_sorted_AH (the model
    dtype; bf16 for Fp8Rows input). FP8 paths that take Fp8Rows get the SwiGLU output quantised in the same pass.
    w13 rows are gate | up (ours), or up | gate with up_first (TensorRT-LLM's w3_w1): read in place either way."""
    h_A2I = grouped_gemm(x_sorted_AH, offs_E, w13_sources, expert_buffer_idx_E, expert_row_E, gemm=gemm, scales=w13_scale_sources)
    act_AI = (silu_mul_quant(h_A2I, up_first) if wants_fp8_rows(gemm, _is_fp8(w2_sources))
              else silu_mul(h_A2I, up_first))
    return grouped_gemm(act_AI, offs_E, w2_sources, expert_buffer_idx_E, expert_row_E, gemm=gemm, scales=w2_scale_sources)


def routed_experts_forward(x_TH: torch.Tensor, topk_ids_TK: torch.Tensor, topk_weights_TK: torch.Tensor,
                           w13_sources: list[torch.Tensor], w2_sources: list[torch.Tensor],
                           expert_buffer_idx_E: torch.Tensor, expert_row_E: torch.Tensor, *, gemm: str = "reference",
                           w13_scale_sources: list[torch.Tensor] | None = None,
                           w2_scale_sources: list[torch.Tensor] | None = None, up_first: bool = False) -> torch.Tensor:
    """y_TH (x's dtype) = sum_k w[t,k] * expert_{ids[t,k]}(x[t]): sort, gather rows, expert_mlp, combine.
    A path with padded_mlp (FP8 experts: gemm deepgemm, and multi_buffer / composite_view where DeepGEMM runs) runs the
    MLP on its padded rows (engine/moe_deepgemm.routed_mlp): its gather writes them, the combine reads them through
    dest_A."""
    path = gemm_path(gemm)
    if path.padded_mlp is not None and _is_fp8(w13_sources) and topk_ids_TK.numel():  # no rows: the path below
        r = path.padded_mlp(x_TH, topk_ids_TK, w13_sources, w2_sources, expert_buffer_idx_E, expert_row_E,
                            w13_scale_sources=w13_scale_sources, w2_scale_sources=w2_scale_sources,
                            up_first=up_first, act=silu_mul_quant)
        if r is not None:  # None: the path declined here (multi_buffer without DeepGEMM): the unpadded op below
            y_MH, perm_A, dest_A = r
            return combine(y_MH, perm_A, topk_weights_TK, x_TH.shape[0], out_dtype=x_TH.dtype, y_rows_A=dest_A)
    x_sorted_AH, perm_A, offs_E, _ = gather_sorted(x_TH, topk_ids_TK, expert_buffer_idx_E.shape[0],
                                                   fp8_rows=wants_fp8_rows(gemm, _is_fp8(w13_sources)))
    y_sorted_AH = expert_mlp(x_sorted_AH, offs_E, w13_sources, w2_sources, expert_buffer_idx_E, expert_row_E, gemm=gemm,
                             w13_scale_sources=w13_scale_sources, w2_scale_sources=w2_scale_sources, up_first=up_first)
    return combine(y_sorted_AH, perm_A, topk_weights_TK, x_TH.shape[0], out_dtype=x_TH.dtype)
