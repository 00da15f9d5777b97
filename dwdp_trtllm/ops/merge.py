"""The 'merge' baseline: gather experts from several buffers into one contiguous [E, N, K] tensor (D2D copies).

Legend: E experts, N out, K in. Expert e = weights[bidx[e]][row[e]]. Runs of experts that are consecutive in both
the destination and one source buffer are copied with one copy each (a DWDP layer is 2 runs: local + prefetched).
The maps are read on the host: pass them as lists or CPU tensors (placement is static); device tensors cost a sync.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def copy_runs(expert_buffer_idx: Sequence[int], expert_row: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """[(dst_start, buffer, src_start, n)] covering experts 0..E-1 in order, maximal runs."""
    runs: list[tuple[int, int, int, int]] = []
    for e, (b, r) in enumerate(zip(expert_buffer_idx, expert_row)):
        if runs and runs[-1][1] == b and runs[-1][2] + runs[-1][3] == r:
            d, bb, s, n = runs[-1]
            runs[-1] = (d, bb, s, n + 1)
        else:
            runs.append((e, int(b), int(r), 1))
    return runs


def merge_experts(weights: Sequence[torch.Tensor], expert_buffer_idx, expert_row,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Contiguous [E, N, K] copy of the experts (on the current stream); `out` is reused when given."""
    bidx = expert_buffer_idx.tolist() if isinstance(expert_buffer_idx, torch.Tensor) else list(expert_buffer_idx)
    rows = expert_row.tolist() if isinstance(expert_row, torch.Tensor) else list(expert_row)
    if len(bidx) != len(rows):
        raise ValueError(f"merge_experts: expert_buffer_idx has {len(bidx)} entries, expert_row {len(rows)}")
    w0 = weights[0]
    shape = (len(bidx), *w0.shape[1:])
    if out is None:
        out = torch.empty(shape, dtype=w0.dtype, device=w0.device)
    elif tuple(out.shape) != shape or out.dtype != w0.dtype:
        raise ValueError(f"merge_experts: out must be {w0.dtype} {shape}, got {out.dtype} {tuple(out.shape)}")
    for d, b, s, n in copy_runs(bidx, rows):
        if not 0 <= b < len(weights) or not (0 <= s and s + n <= weights[b].shape[0]):
            raise ValueError(f"merge_experts: expert {d}: buffer {b} rows [{s}, {s + n}) out of range")
        out[d:d + n].copy_(weights[b][s:s + n], non_blocking=True)
    return out
