"""FP8 activation quantisation on CUDA in one pass: 1x128 groups (DeepSeek-V3 recipe), optionally fused with the
SwiGLU that produces the down projection's input. Hand-written Triton kernels.

Why not torch.compile: Inductor splits "amax per group, then divide" into a reduction kernel and a pointwise
kernel that each read the whole input (and recompute the SwiGLU): on the H200 at 16K tokens x top-8 the fused
SwiGLU + quantisation took 2.0 ms per MoE layer and the quantisation of the [16K, 7168] tokens 0.5 ms (profile of
2026-12-03, docs/history/benchmarks-2026-12.md section 7). Here one program loads GB groups of one row once, reduces, scales and
stores codes and scales.

Contract (the same math as the eager references, ops/reference.py quantize_fp8_blockwise with block (1, 128) and
moe_compute.silu_mul):
    quant_1x128(a_AD)      -> (q_AD float8_e4m3fn, scale_AG float32), D % 128 == 0
    quant_1x128_parts([a_AD, ...]) -> the same of their row concatenation, without concatenating them
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

    # A (the real rows) and R0 (the first output row) vary per call: not specialised (no variant compiled inside a
    # measured iteration); the outputs are passed whole with R0 rather than as offset views, whose pointers'
    # alignment would specialise
    @triton.jit(do_not_specialize=["A", "R0"])
    def quant_kernel(x_ptr, q_ptr, s_ptr, A, R0, G, gate_off, up_off, stride_x, stride_q, stride_s, stride_sg,
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
        out_row = row + R0
        tl.store(q_ptr + out_row * stride_q + col, q.to(q_ptr.dtype.element_ty), mask=mask)
        tl.store(s_ptr + out_row * stride_s + g * stride_sg, scale, mask=g < G)

    return quant_kernel


def _outputs(A: int, width: int, device, rows_to: int, scale_col_major: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if width % GROUP:
        raise ValueError(f"quant_cuda: the quantised width {width} must be a multiple of {GROUP}")
    G, Ap = width // GROUP, -(-A // rows_to) * rows_to
    q = torch.empty(Ap, width, device=device, dtype=torch.float8_e4m3fn)
    s = torch.empty(G, Ap, device=device, dtype=torch.float32).t() if scale_col_major else \
        torch.empty(Ap, G, device=device, dtype=torch.float32)
    return q, s


def _run(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, r0: int, rows: int, width: int, silu: bool,
         up_first: bool) -> None:
    """One launch writing rows [r0, r0 + rows) of q / s: x's rows, then padding rows (finite; the caller drops
    their GEMM rows)."""
    if rows:
        if x.stride(1) != 1:
            x = x.contiguous()
        G = width // GROUP
        gate_off, up_off = (width, 0) if up_first else (0, width)
        _kernel()[(rows, -(-G // GB))](x, q, s, x.shape[0], r0, G, gate_off, up_off, x.stride(0), q.stride(0),
                                       s.stride(0), s.stride(1), SILU=silu, GB=GB, GROUP=GROUP, FP8_MAX=FP8_MAX,
                                       num_warps=4)


def _launch(x: torch.Tensor, width: int, silu: bool, up_first: bool = False, rows_to: int = 1,
            scale_col_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    q, s = _outputs(x.shape[0], width, x.device, rows_to, scale_col_major)
    _run(x, q, s, 0, q.shape[0], width, silu, up_first)  # one launch over all Ap rows, the padding rows included
    return q, s


def check_row_parts(parts: list[torch.Tensor], name: str) -> int:
    """The width D of `parts`, row blocks [A_i, D] of one D to be read as their row concatenation; ValueError naming
    `name` (the caller and its argument), the expected shape and the shapes given otherwise (no part, a part not 2-D,
    widths that differ). The one check of quant_1x128_parts and fp8_linear.prepare_parts."""
    if not parts:
        raise ValueError(f"{name}: expected at least one 2-D [rows, D] part, got none")
    shapes = [tuple(p.shape) for p in parts]
    d = shapes[0][1] if len(shapes[0]) == 2 else "D"
    if any(len(sh) != 2 for sh in shapes) or len({sh[1] for sh in shapes}) != 1:
        raise ValueError(f"{name}: expected 2-D [rows_i, {d}] parts, one width for all, got shapes {shapes}")
    return shapes[0][1]


def quant_1x128_parts(parts_AD: list[torch.Tensor], *, rows_to: int = 1,
                      scale_col_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """quant_1x128(torch.cat(parts_AD)) without the concatenation: one launch per part writes its rows of the shared
    outputs (the last one also the padding rows). Parts: [A_i, D] row blocks with unit stride along D, one D for all
    (ValueError otherwise, before any launch: check_row_parts)."""
    D = check_row_parts(parts_AD, "quant_1x128_parts: parts_AD")
    A = sum(p.shape[0] for p in parts_AD)
    q, s = _outputs(A, D, parts_AD[0].device, rows_to, scale_col_major)
    r = 0
    for i, x in enumerate(parts_AD):
        last = i == len(parts_AD) - 1
        _run(x, q, s, r, q.shape[0] - r if last else x.shape[0], q.shape[1], False, False)
        r += x.shape[0]
    return q, s


def quant_1x128(a_AD: torch.Tensor, *, rows_to: int = 1, scale_col_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _launch(a_AD, a_AD.shape[1], silu=False, rows_to=rows_to, scale_col_major=scale_col_major)


def silu_mul_quant(h_A2I: torch.Tensor, up_first: bool = False, *, rows_to: int = 1,
                   scale_col_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _launch(h_A2I, h_A2I.shape[1] // 2, silu=True, up_first=up_first, rows_to=rows_to,
                   scale_col_major=scale_col_major)
