"""FP8 activation quantisation on CUDA in one pass: 1x128 groups (DeepSeek-V3 recipe), optionally fused with the
SwiGLU that produces the down projection's input. Hand-written Triton kernels.

Why not torch.compile: Inductor splits "amax per group, then divide" into a reduction kernel and a pointwise
kernel that each read the whole input (and recompute the SwiGLU): on the H200 at 16K tokens x top-8 the fused
SwiGLU + quantisation took 2.0 ms per MoE layer and the quantisation of the [16K, 7168] tokens 0.5 ms (profile of
2026-12-03, docs/BENCHMARKS.md section 7). Here one program loads GB groups of one row once, reduces, scales and
stores codes and scales.

Contract (the same math as the eager references, ops/reference.py quantize_fp8_blockwise with block (1, 128) and
moe_compute.silu_mul):
    quant_1x128(a_AD)      -> (q_AD float8_e4m3fn, scale_AG float32), D % 128 == 0
    silu_mul_quant(h_A2I, up_first) -> the same of silu(gate) * up rounded to h's dtype first, I % 128 == 0
                              (gate | up halves of h, or up | gate with up_first)
scale = max(amax of the group, 1e-12) / 448; q = clamp(x / scale, -448, 448) rounded to nearest e4m3.
Rows may be strided (stride(1) == 1); outputs are contiguous. No host sync.
With rows_to=R the outputs have A rounded up to a multiple of R rows (padding rows: codes 0, scales 1, written by
the same launch), and with
scale_col_major the scales are stored outer-dim-major (a [A, G] view of a [G, A] buffer): the layout
torch._scaled_mm's 1x128 block-scale recipe reads (engine/fp8_linear.py).
"""
from __future__ import annotations

import functools

import torch

FP8_MAX = 448.0
GROUP = 128
#: groups per program (GB x 128 elements of one row)
GB = 8


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    # A (the real rows) varies per call: not specialised (no variant compiled inside a measured iteration)
    @triton.jit(do_not_specialize=["A"])
    def quant_kernel(x_ptr, q_ptr, s_ptr, A, G, gate_off, up_off, stride_x, stride_q, stride_s, stride_sg,
                     SILU: tl.constexpr, GB: tl.constexpr, GROUP: tl.constexpr, FP8_MAX: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        real = row < A  # rows [A, Ap) are padding: codes 0, scales 1, written here (no fill kernels)
        g = tl.program_id(1) * GB + tl.arange(0, GB)
        col = g[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
        mask = (g < G)[:, None]
        base = x_ptr + row * stride_x
        if SILU:
            gate = tl.load(base + gate_off + col, mask=mask & real, other=0.0).to(tl.float32)
            up = tl.load(base + up_off + col, mask=mask & real, other=0.0).to(tl.float32)
            v = gate / (1.0 + tl.exp(-gate)) * up
            v = v.to(x_ptr.dtype.element_ty).to(tl.float32)  # eager rounds the SwiGLU output to h's dtype
        else:
            v = tl.load(base + col, mask=mask & real, other=0.0).to(tl.float32)
        scale = tl.where(real, tl.maximum(tl.max(tl.abs(v), axis=1), 1e-12) / FP8_MAX, 1.0)
        q = tl.minimum(tl.maximum(v / scale[:, None], -FP8_MAX), FP8_MAX)
        tl.store(q_ptr + row * stride_q + col, q.to(q_ptr.dtype.element_ty), mask=mask)
        tl.store(s_ptr + row * stride_s + g * stride_sg, scale, mask=g < G)

    return quant_kernel


def _launch(x: torch.Tensor, width: int, silu: bool, up_first: bool = False, rows_to: int = 1,
            scale_col_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    if width % GROUP:
        raise ValueError(f"quant_cuda: the quantised width {width} must be a multiple of {GROUP}")
    if x.stride(1) != 1:
        x = x.contiguous()
    A, G = x.shape[0], width // GROUP
    Ap = -(-A // rows_to) * rows_to
    q = torch.empty(Ap, width, device=x.device, dtype=torch.float8_e4m3fn)
    s = torch.empty(G, Ap, device=x.device, dtype=torch.float32).t() if scale_col_major else \
        torch.empty(Ap, G, device=x.device, dtype=torch.float32)
    if Ap:  # one launch over all Ap rows: the kernel writes the padding rows too (finite; the caller drops their GEMM rows)
        gate_off, up_off = (width, 0) if up_first else (0, width)
        _kernel()[(Ap, -(-G // GB))](x, q, s, A, G, gate_off, up_off, x.stride(0), q.stride(0), s.stride(0),
                                     s.stride(1), SILU=silu, GB=GB, GROUP=GROUP, FP8_MAX=FP8_MAX, num_warps=4)
    return q, s


def quant_1x128(a_AD: torch.Tensor, *, rows_to: int = 1, scale_col_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _launch(a_AD, a_AD.shape[1], silu=False, rows_to=rows_to, scale_col_major=scale_col_major)


def silu_mul_quant(h_A2I: torch.Tensor, up_first: bool = False, *, rows_to: int = 1,
                   scale_col_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _launch(h_A2I, h_A2I.shape[1] // 2, silu=True, up_first=up_first, rows_to=rows_to,
                   scale_col_major=scale_col_major)
