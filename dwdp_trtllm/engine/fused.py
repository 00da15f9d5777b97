"""The engine's CUDA kernels for its elementwise chains, beside their eager references.

The references below (RMSNorm, residual add + RMSNorm, RoPE, SwiGLU, the attention log-sum-exp merge) are what
the CPU runs and what each CUDA kernel computes: float32 math, the same roundings to the input dtype. On CUDA
`fused(name)` hands out a hand-written Triton kernel instead: elementwise_cuda.py (norms, SwiGLU, merge),
rope_cuda.py (RoPE, in place), and beside them combine_cuda.py (the MoE combine) and quant_cuda.py (FP8
activation quantisation). Eagerly each chain is 5-10 kernels over float32 temporaries (measured on the H200 at
16K tokens x DeepSeek-R1 width: RMSNorm 1.54 ms eager vs 0.30 ms fused, RoPE on q 3.13 vs 1.13 ms, SwiGLU 0.47
vs 0.09 ms; docs/history/benchmarks-2026-12.md section 7). torch.compile made these kernels first; its re-traces (seconds each) can
land in measured iterations (see elementwise_cuda.py), so the engine no longer uses it.

Contract: `fused(name, *tensors)` returns the CUDA kernel when every tensor is on CUDA and fusing is on, else
None (DWDP_NO_FUSE=1, the CPU, or no Triton): callers then run the eager reference, so the CPU path and its
exactness are unchanged. A kernel that fails to compile is disabled with one warning, never the run.

Shape legend: T tokens, H features, N heads, F rope frequencies, A token-expert rows, I intermediate,
K top-k.
"""
from __future__ import annotations

import functools
import warnings
from typing import Callable

import torch
import torch.nn.functional as F

from .. import env


# ---- the eager references ------------------------------------------------------------------------------
def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _add_rms_norm(x: torch.Tensor, a: torch.Tensor, w: torch.Tensor, eps: float,
                  b: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + a, rms_norm(x + a)): the residual add and the next norm in one pass (the sum rounded to x's dtype
    first, as the eager `x = x + a; h = rms_norm(x)` does). With b: a + b first (rounded to a's dtype), as eager
    `x = x + (a + b)` (the MoE output: routed + shared experts)."""
    s = x + (a if b is None else a + b)
    return s, _rms_norm(s, w, eps)


def _rope_interleaved(x_TNd: torch.Tensor, cos_TF: torch.Tensor, sin_TF: torch.Tensor) -> torch.Tensor:
    xf = x_TNd.float()
    c, s = cos_TF[:, None, :], sin_TF[:, None, :]
    x0, x1 = xf[..., 0::2], xf[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2).to(x_TNd.dtype)


def _rope_neox(x_TNd: torch.Tensor, cos_TF: torch.Tensor, sin_TF: torch.Tensor) -> torch.Tensor:
    xf = x_TNd.float()
    c, s = cos_TF[:, None, :], sin_TF[:, None, :]
    x0, x1 = xf.chunk(2, dim=-1)
    return torch.cat([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1).to(x_TNd.dtype)


def _silu_mul(h_A2I: torch.Tensor, up_first: bool = False) -> torch.Tensor:
    """[A, 2I] gate | up (up | gate when up_first: TensorRT-LLM's w3_w1 layout) -> silu(gate) * up in float32,
    cast to h's dtype."""
    I = h_A2I.shape[1] // 2
    gate, up = (h_A2I[:, I:], h_A2I[:, :I]) if up_first else (h_A2I[:, :I], h_A2I[:, I:])
    return (F.silu(gate.float()) * up.float()).to(h_A2I.dtype)


def _silu_mul_pair(g_TI: torch.Tensor, u_TI: torch.Tensor) -> torch.Tensor:
    """silu(g) * u for the dense MLP / shared expert (two GEMM outputs), in their dtype as eager does."""
    return F.silu(g_TI) * u_TI


def _lse_merge(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor) -> torch.Tensor:
    """Two partial attention outputs [B, N, L, e] over disjoint key sets, merged by their log-sum-exp [B, N, L]."""
    m = torch.maximum(lse1, lse2)
    w1, w2 = (lse1 - m).exp(), (lse2 - m).exp()
    o = (o1.float() * w1[..., None] + o2.float() * w2[..., None]) / (w1 + w2)[..., None]
    return o.to(o1.dtype)


_BODIES: dict[str, Callable] = {
    "lse_merge": _lse_merge,
    "rms_norm": _rms_norm, "rope_interleaved": _rope_interleaved, "rope_neox": _rope_neox,
    "silu_mul": _silu_mul, "silu_mul_pair": _silu_mul_pair, "add_rms_norm": _add_rms_norm,
}
_failed: set[str] = set()


@functools.cache
def _triton_usable() -> bool:
    try:
        import triton  # noqa: F401  the kernels' compiler
    except ImportError:
        return False
    return True


def _rope_kernel(interleaved: bool) -> Callable:
    from .rope_cuda import rope_
    return lambda x, c, s: rope_(x.contiguous().clone(), c, s, interleaved)


@functools.cache
def _kernel(name: str) -> Callable:
    from . import elementwise_cuda as ew
    table = {"rms_norm": ew.rms_norm, "add_rms_norm": ew.add_rms_norm, "silu_mul": ew.silu_mul,
             "silu_mul_pair": ew.silu_mul_pair, "lse_merge": ew.lse_merge,
             "rope_interleaved": _rope_kernel(True), "rope_neox": _rope_kernel(False)}
    return table[name]


def fused_enabled() -> bool:
    """The engine's CUDA kernels are on: not DWDP_NO_FUSE=1, and Triton imports."""
    return not env.no_fuse() and _triton_usable()


def fused(name: str, *tensors: torch.Tensor) -> Callable | None:
    """The CUDA kernel `name` when every tensor is on CUDA and fusing is on; else None (run the eager reference)."""
    if name in _failed or not fused_enabled() or not all(t.is_cuda for t in tensors):
        return None
    return functools.partial(_guarded, name, _kernel(name))


def _guarded(name: str, fn: Callable, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - a kernel compile failure must not end a run: fall back, say so once
        if torch.cuda.is_current_stream_capturing():
            raise
        _failed.add(name)
        warnings.warn(f"engine.fused: the CUDA kernel of {name!r} failed ({type(exc).__name__}: {str(exc)[:200]}); "
                      f"using the eager kernels for it", RuntimeWarning, stacklevel=3)
        return _BODIES[name](*args)


def inverse_permutation(perm_A: torch.Tensor) -> torch.Tensor:
    """inv_A with inv[perm[j]] = j (device-side scatter, no host sync)."""
    inv_A = torch.empty_like(perm_A)
    inv_A.scatter_(0, perm_A, torch.arange(perm_A.shape[0], device=perm_A.device, dtype=perm_A.dtype))
    return inv_A
