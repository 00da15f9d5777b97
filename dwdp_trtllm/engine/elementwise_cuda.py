"""The engine's elementwise chains on CUDA as hand-written Triton kernels: RMSNorm, residual add (of one or two addends) + RMSNorm, SwiGLU
(one [A, 2I] input, or two GEMM outputs), and the log-sum-exp merge of two partial attention outputs.

Why not torch.compile: a torch.compile'd function is traced again whenever a call breaks a guard of an earlier
trace (with dynamic shapes, Dynamo also gives equal sizes one symbol, so relations that held in a warm-up can fail
later), and each new trace costs seconds; measured bench iterations on the H200 still carried such one-time costs
(a DEP iteration's attention averaged 1,062 ms against 84 ms in the steady iteration, 2026-12-03,
docs/history/benchmarks-2026-12.md section 7). A Triton kernel compiles once per dtype and specialisation of its integer
arguments, independent of the token count (the grid).

Each function computes what its eager reference in fused.py computes (float32 math, the same roundings to the
input dtype). Rows may be strided (stride(-1) == 1). No host sync.
Shape legend: T rows, H features, I intermediate, N heads, L queries, e value head dim.
"""
from __future__ import annotations

import functools

import torch


def _np2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@functools.cache
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def rms_norm_kernel(x_ptr, a_ptr, b_ptr, w_ptr, s_ptr, out_ptr, H, stride_x, stride_a, stride_b, stride_s,
                        stride_out, eps, ADD: tl.constexpr, ADD_B: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        h = tl.arange(0, BLOCK)
        mask = h < H
        x = tl.load(x_ptr + row * stride_x + h, mask=mask, other=0.0)
        if ADD:  # s = x + a rounded to x's dtype (the eager residual add), stored, then normalised
            a = tl.load(a_ptr + row * stride_a + h, mask=mask, other=0.0)
            if ADD_B:  # a + b first, rounded to a's dtype (the eager `a + b` before the residual add)
                a = (a.to(tl.float32) + tl.load(b_ptr + row * stride_b + h, mask=mask, other=0.0).to(tl.float32))
                a = a.to(a_ptr.dtype.element_ty)
            x = (x.to(tl.float32) + a.to(tl.float32))
            x = x.to(s_ptr.dtype.element_ty)
            tl.store(s_ptr + row * stride_s + h, x, mask=mask)
        xf = x.to(tl.float32)
        r = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / H + eps)
        w = tl.load(w_ptr + h, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_out + h, (xf * r * w).to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def swiglu_kernel(g_ptr, u_ptr, out_ptr, I, stride_g, stride_u, stride_out,
                      ROUND_SILU: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = i < I
        g = tl.load(g_ptr + row * stride_g + i, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + row * stride_u + i, mask=mask, other=0.0).to(tl.float32)
        a = g / (1.0 + tl.exp(-g))
        if ROUND_SILU:  # eager F.silu(g) * u on bf16 tensors rounds silu(g) before the product
            a = a.to(out_ptr.dtype.element_ty).to(tl.float32)
        tl.store(out_ptr + row * stride_out + i, (a * u).to(out_ptr.dtype.element_ty), mask=mask)

    # strides of the flash partial and its lse follow the chunk length: not specialised (a new value divisible by 16
    # or not would compile a new variant inside a measured iteration)
    @triton.jit(do_not_specialize=["N", "E", "s1n", "s1l", "s2n", "s2l", "l1n", "l1l", "l2n", "l2l", "son", "sol"])
    def lse_merge_kernel(o1_ptr, l1_ptr, o2_ptr, l2_ptr, out_ptr, N, E,
                         s1n, s1l, s2n, s2l, l1n, l1l, l2n, l2l, son, sol, BLOCK_E: tl.constexpr):
        nl = tl.program_id(0).to(tl.int64)
        n, l = nl % N, nl // N
        e = tl.arange(0, BLOCK_E)
        mask = e < E
        lse1 = tl.load(l1_ptr + n * l1n + l * l1l)
        lse2 = tl.load(l2_ptr + n * l2n + l * l2l)
        m = tl.maximum(lse1, lse2)
        w1, w2 = tl.exp(lse1 - m), tl.exp(lse2 - m)
        o1 = tl.load(o1_ptr + n * s1n + l * s1l + e, mask=mask, other=0.0).to(tl.float32)
        o2 = tl.load(o2_ptr + n * s2n + l * s2l + e, mask=mask, other=0.0).to(tl.float32)
        o = (o1 * w1 + o2 * w2) / (w1 + w2)
        tl.store(out_ptr + n * son + l * sol + e, o.to(out_ptr.dtype.element_ty), mask=mask)

    return rms_norm_kernel, swiglu_kernel, lse_merge_kernel


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x as a 2-D [rows, H] tensor with unit stride along H (a view when possible)."""
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x2 = _rows(x)
    out = torch.empty(x2.shape, device=x.device, dtype=x.dtype)
    if x2.shape[0]:
        H = x2.shape[1]
        _kernels()[0][(x2.shape[0],)](x2, x2, x2, w, out, out, H, x2.stride(0), 0, 0, 0, out.stride(0), eps,
                                      ADD=False, ADD_B=False, BLOCK=_np2(H), num_warps=8 if H > 2048 else 4)
    return out.view(x.shape)


def add_rms_norm(x: torch.Tensor, a: torch.Tensor, w: torch.Tensor, eps: float,
                 b: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    x2, a2 = _rows(x), _rows(a)
    b2 = a2 if b is None else _rows(b)
    s = torch.empty(x2.shape, device=x.device, dtype=x.dtype)
    out = torch.empty_like(s)
    if x2.shape[0]:
        H = x2.shape[1]
        _kernels()[0][(x2.shape[0],)](x2, a2, b2, w, s, out, H, x2.stride(0), a2.stride(0), b2.stride(0), s.stride(0),
                                      out.stride(0), eps, ADD=True, ADD_B=b is not None, BLOCK=_np2(H),
                                      num_warps=8 if H > 2048 else 4)
    return s.view(x.shape), out.view(x.shape)


#: SwiGLU features per program
SWIGLU_BLOCK = 1024


def _swiglu(g: torch.Tensor, u: torch.Tensor, round_silu: bool) -> torch.Tensor:
    A, I = g.shape
    out = torch.empty(A, I, device=g.device, dtype=g.dtype)
    if A:
        _kernels()[1][(A, -(-I // SWIGLU_BLOCK))](g, u, out, I, g.stride(0), u.stride(0), out.stride(0),
                                                   ROUND_SILU=round_silu, BLOCK=SWIGLU_BLOCK, num_warps=4)
    return out


def silu_mul(h_A2I: torch.Tensor, up_first: bool = False) -> torch.Tensor:
    """[A, 2I] gate | up (up | gate when up_first) -> silu(gate) * up (float32 math, one rounding)."""
    h = _rows(h_A2I)
    I = h.shape[1] // 2
    gate, up = (h[:, I:], h[:, :I]) if up_first else (h[:, :I], h[:, I:])
    return _swiglu(gate, up, round_silu=False)


def silu_mul_pair(g_TI: torch.Tensor, u_TI: torch.Tensor) -> torch.Tensor:
    """F.silu(g) * u on two GEMM outputs, with eager's rounding of silu(g) to their dtype."""
    return _swiglu(_rows(g_TI), _rows(u_TI), round_silu=g_TI.dtype != torch.float32)


def lse_merge(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor) -> torch.Tensor:
    """[1, N, L, e] partial outputs over disjoint keys with their [1, N, L] log-sum-exp -> merged [1, N, L, e]
    (o1's dtype), laid out [L, N, e] so the caller's transpose back is contiguous."""
    _, N, L, E = o1.shape
    if o1.stride(3) != 1 or o2.stride(3) != 1:
        raise ValueError("lse_merge: the value dim of o1 / o2 must have unit stride")
    out = torch.empty(L, N, E, device=o1.device, dtype=o1.dtype).permute(1, 0, 2)[None]
    if N * L:
        _kernels()[2][(N * L,)](o1, lse1, o2, lse2, out, N, E, o1.stride(1), o1.stride(2), o2.stride(1), o2.stride(2),
                                lse1.stride(1), lse1.stride(2), lse2.stride(1), lse2.stride(2), out.stride(1),
                                out.stride(2), BLOCK_E=_np2(E), num_warps=1 if E <= 128 else 2)
    return out
