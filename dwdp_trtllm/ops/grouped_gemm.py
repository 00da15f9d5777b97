"""Python entry point of the multi-buffer grouped GEMM: checks, backend choice, fake (meta) registration.

Legend: T tokens sorted by expert, E experts, K in-features, N out-features, B buffers, KB/NB = ceil(K|N / 128).
    a_TK        [T, K] bf16 / fp32 (CPU) / float8_e4m3fn
    offs_E      int32 cumulative END offsets (torch._grouped_mm convention: group e = rows [offs[e-1], offs[e]))
    weights     B buffers [rows_b, N, K], contiguous (nn.Linear out x in)
    bidx_E, row_E  int32: expert e uses weights[bidx[e]][row[e]]
    a_scale_TKb fp32 [T, KB] (1x128 groups), weight_scales: B x fp32 [rows_b, NB, KB] (128x128 blocks); FP8 only
    -> out_TN   a_group @ W_e^T, fp32 accumulation, a's dtype (bf16 for FP8); rows past offs[-1] unspecified.
Backends: "op" (torch.ops.dwdp.grouped_gemm, built on first use), "reference" (reference.py), "auto" (op, else the
reference after ONE warning naming why). Stream: the op runs on the current CUDA stream with no host sync.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch

from . import build
from .reference import grouped_gemm_reference

_state: dict[str, object] = {}


def _ensure_op() -> None:
    """Load the library and register the fake impl once; raises build.OpsBuildError."""
    if "error" in _state:
        raise build.OpsBuildError(str(_state["error"]))
    if _state.get("ready"):
        return
    try:
        build.load()
    except build.OpsBuildError as e:
        _state["error"] = str(e)
        raise
    if not _state.get("fake"):
        torch.library.register_fake("dwdp::grouped_gemm")(_fake_grouped_gemm)
        _state["fake"] = True
    _state["ready"] = True


def _fake_grouped_gemm(a, offs, weights, expert_buffer_idx, expert_row, a_scale=None, weight_scales=None):
    out_dtype = torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype
    return a.new_empty((a.shape[0], weights[0].shape[1]), dtype=out_dtype)


def available() -> bool:
    """True when torch.ops.dwdp.grouped_gemm is (or can be) built and loaded here."""
    try:
        _ensure_op()
        return True
    except build.OpsBuildError:
        return False


def why_unavailable() -> str:
    """Empty string when available(), else the reason the op cannot be used."""
    return "" if available() else str(_state.get("error", "unknown"))


def _fail(msg: str) -> None:
    raise ValueError(f"grouped_gemm: {msg}")


def check_args(a, offs, weights, expert_buffer_idx, expert_row, a_scale=None, weight_scales=None) -> None:
    """Shape/dtype/device checks (no host sync); raises ValueError naming the argument."""
    if not isinstance(a, torch.Tensor) or a.dim() != 2:
        _fail(f"a must be a [T, K] tensor, got {getattr(a, 'shape', type(a))}")
    T, K = a.shape
    if not isinstance(offs, torch.Tensor) or offs.dim() != 1 or offs.dtype != torch.int32:
        _fail(f"offs must be an int32 [E] tensor, got {getattr(offs, 'dtype', type(offs))} {getattr(offs, 'shape', '')}")
    E = offs.shape[0]
    for name, t in (("expert_buffer_idx", expert_buffer_idx), ("expert_row", expert_row)):
        if not isinstance(t, torch.Tensor) or t.shape != (E,) or t.dtype != torch.int32:
            _fail(f"{name} must be an int32 [E={E}] tensor, got {getattr(t, 'dtype', type(t))} {getattr(t, 'shape', '')}")
    for name, t in (("offs", offs), ("expert_buffer_idx", expert_buffer_idx), ("expert_row", expert_row)):
        if t.device != a.device:
            _fail(f"{name} is on {t.device} but a is on {a.device}")
    if not isinstance(weights, (list, tuple)) or not weights:
        _fail("weights must be a non-empty list of [rows, N, K] tensors")
    N = weights[0].shape[1] if weights[0].dim() == 3 else -1
    for i, w in enumerate(weights):
        if w.dim() != 3 or w.shape[1] != N or w.shape[2] != K:
            _fail(f"weights[{i}] must be [rows, N={N}, K={K}], got {tuple(w.shape)}")
        if w.dtype != a.dtype:
            _fail(f"weights[{i}] is {w.dtype} but a is {a.dtype}")
        if w.device != a.device:
            _fail(f"weights[{i}] is on {w.device} but a is on {a.device}")
        if not w.is_contiguous():
            _fail(f"weights[{i}] must be contiguous")
    fp8 = a.dtype == torch.float8_e4m3fn
    if not fp8:
        if a_scale is not None or weight_scales is not None:
            _fail(f"a_scale/weight_scales are only for float8_e4m3fn inputs, a is {a.dtype}")
        if a.dtype not in (torch.bfloat16, torch.float32, torch.float16):
            _fail(f"a must be bfloat16, float32 (CPU) or float8_e4m3fn, got {a.dtype}")
        return
    KB, NB = -(-K // 128), -(-N // 128)
    if a_scale is None or a_scale.shape != (T, KB) or a_scale.dtype != torch.float32 or a_scale.device != a.device:
        _fail(f"a_scale must be float32 [T={T}, KB={KB}] on {a.device}, got "
              f"{None if a_scale is None else (a_scale.dtype, tuple(a_scale.shape), a_scale.device)}")
    if weight_scales is None or len(weight_scales) != len(weights):
        _fail(f"weight_scales must hold one tensor per weights buffer ({len(weights)})")
    for i, (w, s) in enumerate(zip(weights, weight_scales)):
        if s.shape != (w.shape[0], NB, KB) or s.dtype != torch.float32 or s.device != a.device:
            _fail(f"weight_scales[{i}] must be float32 [{w.shape[0]}, NB={NB}, KB={KB}] on {a.device}, got "
                  f"{s.dtype} {tuple(s.shape)} on {s.device}")


def _cuda_unsupported(a: torch.Tensor, weights: Sequence[torch.Tensor]) -> str:
    """Why the CUDA kernels cannot take these shapes ('' when they can)."""
    if not a.is_cuda:
        return ""
    if a.dtype not in (torch.bfloat16, torch.float8_e4m3fn):
        return f"the CUDA kernels take bfloat16 or float8_e4m3fn, not {a.dtype}"
    align = 128 if a.dtype == torch.float8_e4m3fn else 8
    K, N = a.shape[1], weights[0].shape[1]
    if K % align or N % align:
        return f"K={K} and N={N} must be multiples of {align} for {a.dtype}"
    if len(weights) > 16:
        return f"at most 16 weight buffers, got {len(weights)}"
    return ""


def grouped_gemm(a: torch.Tensor, offs: torch.Tensor, weights: Sequence[torch.Tensor],
                 expert_buffer_idx: torch.Tensor, expert_row: torch.Tensor, a_scale: torch.Tensor | None = None,
                 weight_scales: Sequence[torch.Tensor] | None = None, *, backend: str = "auto") -> torch.Tensor:
    """out_TN = per-expert a @ W^T with W read in place from several buffers (see the module legend)."""
    if backend not in ("auto", "op", "reference"):
        raise ValueError(f"grouped_gemm: backend must be 'auto', 'op' or 'reference', got {backend!r}")
    weights = list(weights)
    weight_scales = None if weight_scales is None else list(weight_scales)
    check_args(a, offs, weights, expert_buffer_idx, expert_row, a_scale, weight_scales)
    if backend == "auto":
        reason = _cuda_unsupported(a, weights)
        if not reason:
            try:
                _ensure_op()
            except build.OpsBuildError as e:
                reason = f"dwdp ops unavailable: {e}"
        if reason:
            if reason not in _state.setdefault("warned", set()):  # type: ignore[operator]
                _state["warned"].add(reason)  # type: ignore[union-attr]
                warnings.warn(f"grouped_gemm: falling back to the torch reference ({reason})", RuntimeWarning,
                              stacklevel=2)
            backend = "reference"
        else:
            backend = "op"
    if backend == "reference":
        out_dtype = torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype
        return grouped_gemm_reference(a, offs, weights, expert_buffer_idx, expert_row, a_scale, weight_scales,
                                      dtype=torch.float32).to(out_dtype)
    _ensure_op()
    return torch.ops.dwdp.grouped_gemm(a, offs, weights, expert_buffer_idx, expert_row, a_scale, weight_scales)
