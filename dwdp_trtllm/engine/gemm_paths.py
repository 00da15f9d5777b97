"""Plugin GEMM paths for the engine's MoE: 'multi_buffer' = the dwdp::grouped_gemm op (ops/);
'composite_view' = a stock grouped GEMM (torch._grouped_mm) on one [E, N, K] VMM view of local +
prefetched experts (composite_slots.py), the op with that single buffer for fp8 block scales; 'deepgemm' =
DeepGEMM on one FP8 [E, N, K] buffer (engine/moe_deepgemm.py, opt-in).

Registered into moe_compute.GEMM_PATHS on first use of such a name (moe_compute imports PLUGINS lazily;
this module imports nothing of moe_compute),
so the engine runs without the C++ op until a config asks for it. FP8 weights (128x128 block scales)
take FP8 activations in 1x128 groups (DeepSeek-V3 recipe): Fp8Rows quantised by the caller (before the gather,
and fused with the SwiGLU), or bf16 rows quantised here; the op returns bf16.

Shape legend: A token-expert rows, D in features, N out features, G = ceil(D/128) groups.
"""
from __future__ import annotations

import torch

from ..ops import grouped_gemm
from .fp8_rows import Fp8Rows, quantize_act_1x128
from .. import env
from .moe_deepgemm import deepgemm_gemm, routed_mlp, usable

_said: set[str] = set()

#: Under DWDP_MOE_MAINLOOP=auto, DeepGEMM's mainloop runs a call whose token-expert pairs average at least this many
#: rows per expert; below it its 128-row padding costs more than its mainloop gains. Measured on an H100
#: (docs/BENCHMARKS.md, "Routed-expert op"): R1 shapes, 256 experts top-8, the op alone: ours faster at 4K / 8K tokens
#: (128 / 256 rows per expert: 5.71 vs 7.45 ms, 8.70 vs 9.29 ms), DeepGEMM's at 16K / 32K (512 / 1024: 14.47 vs
#: 15.80 ms, 25.64 vs 28.98 ms), both routings alike. Not the default: inside an engine iteration its op ran slower
#: (ISL 8K, MNT 16K: median 101.6 against 93.2 ms per iteration) and compiled unseen shapes for seconds.
DEEPGEMM_MIN_ROWS_PER_EXPERT = 384


def _deepgemm_mlp(x_TH, topk_ids_TK, w13, w2, buf_idx_E, row_E, **kw):
    """gemm: deepgemm: DeepGEMM always (DeepGEMMUnavailable, naming how to build it, when it is not there)."""
    return routed_mlp(x_TH, topk_ids_TK, w13, w2, buf_idx_E, row_E, **kw)


def _auto_mlp(x_TH, topk_ids_TK, w13, w2, buf_idx_E, row_E, **kw):
    """gemm: multi_buffer / composite_view with FP8 experts: None (the caller runs dwdp::grouped_gemm, our CUTLASS
    kernels) by default (DWDP_MOE_MAINLOOP=cutlass). With DWDP_MOE_MAINLOOP=auto, DeepGEMM's mainloop over the same
    buffers when it can run here (moe_deepgemm.usable) and the call is large enough for it to be the faster op
    (DEEPGEMM_MIN_ROWS_PER_EXPERT); =deepgemm, whenever it can run. Where it was asked for and cannot run (on a CUDA
    device), one warning says why and ours runs."""
    mode = env.moe_mainloop()
    if mode == "cutlass":
        return None  # the default: no warning, it is the choice
    rows_per_expert = topk_ids_TK.numel() / max(1, buf_idx_E.shape[0])
    why = usable(w13, kw.get("w13_scale_sources"), w2)
    if why is None and rows_per_expert < DEEPGEMM_MIN_ROWS_PER_EXPERT and mode == "auto":
        return None  # a call this small runs faster on ours (measured): no warning, it is the choice
    if why is None and len(w13) > 1 and x_TH.is_cuda and torch.cuda.is_current_stream_capturing():
        return None  # a split reads its section heights back (no capture); ours is capturable, and bit-equal
    if why is None:
        return routed_mlp(x_TH, topk_ids_TK, w13, w2, buf_idx_E, row_E, **kw)
    if x_TH.is_cuda and why not in _said:
        _said.add(why)
        import warnings
        warnings.warn(f"routed experts: FP8 GEMMs on dwdp::grouped_gemm (CUTLASS), not DeepGEMM: {why}",
                      RuntimeWarning, stacklevel=3)
    return None

def _multi_buffer(a_AD, offs_E, weights, buf_idx_E, row_E, scales=None):
    buf_idx_E, row_E, offs_E = buf_idx_E.to(torch.int32), row_E.to(torch.int32), offs_E.to(torch.int32)
    if scales is None:
        return grouped_gemm(a_AD, offs_E, weights, buf_idx_E, row_E)
    a = a_AD if isinstance(a_AD, Fp8Rows) else quantize_act_1x128(a_AD)
    out = grouped_gemm(a.q, offs_E, weights, buf_idx_E, row_E, a.scale, scales)  # bf16
    return out if isinstance(a_AD, Fp8Rows) else out.to(a_AD.dtype)


def _composite_view(a_AD, offs_E, weights, buf_idx_E, row_E, scales=None):
    if len(weights) != 1:
        raise ValueError(f"gemm='composite_view' takes one [E, N, K] view, got {len(weights)} buffers")
    if scales is not None:
        return _multi_buffer(a_AD, offs_E, weights, buf_idx_E, row_E, scales)
    # the expert map is the identity by construction: the view is in expert order
    return torch._grouped_mm(a_AD, weights[0].transpose(1, 2), offs=offs_E.to(torch.int32))


#: name -> (fn, supports_fp8, fp8_activations, padded_mlp), registered by moe_compute.gemm_path on first lookup;
#: deepgemm (opt-in; engine/moe_deepgemm.py) imports deep_gemm only when it computes
PLUGINS = {"multi_buffer": (_multi_buffer, True, True, _auto_mlp), "composite_view": (_composite_view, True, True, _auto_mlp),
           "deepgemm": (deepgemm_gemm, True, True, _deepgemm_mlp)}
