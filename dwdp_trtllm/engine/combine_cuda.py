"""The MoE combine on CUDA: y_TH = sum_k w[t, k] * y_sorted[inv[t*K + k]], one hand-written Triton kernel.

Why not torch.compile: Inductor makes a reduction over the K axis of a [T, K, H] gather whose programs read
rows K apart; on the H200 at 16K tokens x top-8 x 7168 it took 5.4 ms per MoE layer (profile of 2026-12-02,
docs/history/benchmarks-2026-12.md section 7) for 1.9 GB of reads, about 0.35 TB/s. Here one program owns a [BLOCK_H] slice
of one token and reads its K rows with 16-byte coalesced loads, accumulating in float32 in routing order
(k = 0..K-1), so the bytes are read once at close to HBM speed.

Contract: combine_cuda(y_sorted_AH, inv_A, w_TK, out_dtype) -> y_TH [T, H] in out_dtype, T = A / K. inv_A[t*K + k]
is the row of y_sorted holding token t's k-th routed copy (moe_compute.inverse_permutation of sort_by_expert's
perm, or its padded row: y_sorted may be a padded GEMM output whose other rows are never read). Inputs on one CUDA device; y_sorted rows contiguous; w float32 or y's dtype. No host sync.
The reference beside it is moe_compute.combine's CPU path (index_add_ in expert order, float32).
"""
from __future__ import annotations

import functools

import torch


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def combine_kernel(y_ptr, inv_ptr, w_ptr, out_ptr, H, stride_y, stride_out,
                       K: tl.constexpr, BLOCK_H: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        mask = h < H
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for k in tl.static_range(K):
            row = tl.load(inv_ptr + t * K + k).to(tl.int64)
            wk = tl.load(w_ptr + t * K + k).to(tl.float32)
            y = tl.load(y_ptr + row * stride_y + h, mask=mask, other=0.0)
            acc += y.to(tl.float32) * wk
        tl.store(out_ptr + t * stride_out + h, acc.to(out_ptr.dtype.element_ty), mask=mask)

    return combine_kernel


#: features per program: 1024 bf16 = 2 KiB per row read, 8 rows in flight per program at top-8
BLOCK_H = 1024
NUM_WARPS = 4


def combine_cuda(y_sorted_AH: torch.Tensor, inv_A: torch.Tensor, w_TK: torch.Tensor,
                 out_dtype: torch.dtype = torch.float32, *, block_h: int = 0, num_warps: int = 0) -> torch.Tensor:
    """block_h / num_warps: tile overrides for scripts/bench_moe_kernels.py (0: the module's choice)."""
    T, K = w_TK.shape
    H = y_sorted_AH.shape[1]
    if inv_A.numel() != T * K:  # y_sorted may hold more rows (a padded GEMM output): only inv_A's are read
        raise ValueError(f"combine_cuda: inv_A has {inv_A.numel()} entries, expected T*K = {T}*{K}")
    if y_sorted_AH.stride(1) != 1:
        y_sorted_AH = y_sorted_AH.contiguous()
    out_TH = torch.empty(T, H, device=y_sorted_AH.device, dtype=out_dtype)
    if T == 0 or H == 0:
        return out_TH
    block_h, num_warps = block_h or BLOCK_H, num_warps or NUM_WARPS
    grid = (T, -(-H // block_h))
    _kernel()[grid](y_sorted_AH, inv_A.contiguous(), w_TK.contiguous(), out_TH, H, y_sorted_AH.stride(0), out_TH.stride(0),
                    K=K, BLOCK_H=block_h, num_warps=num_warps)
    return out_TH
