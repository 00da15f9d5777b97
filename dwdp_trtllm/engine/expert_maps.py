"""Expert maps over weight buffers: expert e's weights are row expert_row_E[e] of buffer
weights[expert_buffer_idx_E[e]] (engine/moe_compute.py's contract); gather_experts turns them into one [E, ...]
tensor on the device without a host sync, and identity_map is the map of one buffer already in expert order, which
every path recognises by identity (is_identity) and uses in place.

Shape legend: E experts, R rows of one buffer.
"""
from __future__ import annotations

import torch

from .weights import FP8_DTYPE

_IDENTITY: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}


def identity_map(num_experts: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert_buffer_idx_E, expert_row_E) for one buffer already in expert order (int32, cached per device).

    Holders of such a buffer (reference, DEP, the composite view) pass these exact tensors; gather_experts
    recognises them by identity (no host sync) and uses the buffer in place instead of copying it.
    """
    key = (num_experts, str(torch.device(device)))
    if key not in _IDENTITY:
        _IDENTITY[key] = (torch.zeros(num_experts, dtype=torch.int32, device=device),
                          torch.arange(num_experts, dtype=torch.int32, device=device))
    return _IDENTITY[key]


def is_identity(buf_idx_E: torch.Tensor, row_E: torch.Tensor) -> bool:
    """The maps are identity_map's own tensors (by object, not by value: no host sync)."""
    ident = _IDENTITY.get((buf_idx_E.shape[0], str(buf_idx_E.device)))
    return ident is not None and buf_idx_E is ident[0] and row_E is ident[1]


def gather_experts(buffers: list[torch.Tensor], buf_idx_E: torch.Tensor, row_E: torch.Tensor) -> torch.Tensor:
    """[E, ...] with expert e = buffers[buf_idx_E[e]][row_E[e]]: device-side maps, no host sync, every
    buffer read once. Rows a buffer holds but no expert uses (redundant copies) land in a scratch row E.
    The identity map of one expert-ordered buffer (identity_map) returns that buffer itself, no copy."""
    if len(buffers) == 1 and is_identity(buf_idx_E, row_E) and buffers[0].shape[0] == buf_idx_E.shape[0]:
        return buffers[0]
    if buffers[0].dtype == FP8_DTYPE:  # index_copy_/index_select lack fp8 kernels on some devices: move bytes
        return gather_experts([b.view(torch.uint8) for b in buffers], buf_idx_E, row_E).view(FP8_DTYPE)
    if len(buffers) == 1:
        return buffers[0].index_select(0, row_E)
    E = buf_idx_E.shape[0]
    out = torch.empty((E + 1, *buffers[0].shape[1:]), dtype=buffers[0].dtype, device=buffers[0].device)
    for buf, dst_R in zip(buffers, _gather_rows(buf_idx_E, row_E, tuple(b.shape[0] for b in buffers))):
        if dst_R is not None:
            out.index_copy_(0, dst_R, buf)
    return out[:E]


# (id(buf_idx_E), id(row_E), rows per buffer) -> (buf_idx_E, row_E, their versions, destinations): the maps
# of a run are built once (DwdpRuntime), so the destination rows are too; the tensors are held so the ids stay
# theirs, and an in-place change of a map (a new _version) recomputes
_GATHER_ROWS: dict[tuple[int, int, tuple[int, ...]], tuple[torch.Tensor, torch.Tensor, tuple[int, int], list]] = {}
_GATHER_ROWS_MAX = 64


def _gather_rows(buf_idx_E: torch.Tensor, row_E: torch.Tensor, rows: tuple[int, ...]) -> list[torch.Tensor | None]:
    """Per buffer b: dst_R[r] = the expert stored at row r of buffer b (E when none: the scratch row),
    None for an empty buffer. Device tensors, computed on the device (no host sync), cached per map."""
    key = (id(buf_idx_E), id(row_E), rows)
    version = (buf_idx_E._version, row_E._version)
    hit = _GATHER_ROWS.get(key)
    if hit is not None and hit[0] is buf_idx_E and hit[1] is row_E and hit[2] == version:
        return hit[3]
    E, dev = buf_idx_E.shape[0], buf_idx_E.device
    e_E = torch.arange(E, device=dev)
    dsts: list[torch.Tensor | None] = []
    for b, R in enumerate(rows):
        if R == 0:
            dsts.append(None)
            continue
        dst_R = torch.full((R + 1,), E, dtype=torch.int64, device=dev)  # row R absorbs the other buffers' experts
        dst_R.scatter_(0, torch.where(buf_idx_E == b, row_E.long(), R), e_E)
        dsts.append(dst_R[:R])
    if len(_GATHER_ROWS) >= _GATHER_ROWS_MAX:
        _GATHER_ROWS.clear()
    _GATHER_ROWS[key] = (buf_idx_E, row_E, version, dsts)
    return dsts
