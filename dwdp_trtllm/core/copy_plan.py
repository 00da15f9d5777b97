"""Copy plans: which bytes move from which peer into which prefetch-slot offset (pure).

Buffer layout contract (shared by transport, scheduler, engine and GEMM paths):
- Each rank exports, per (MoE layer, tensor), one buffer holding its local experts back to back in
  sorted expert-id order: expert local_experts[i] starts at i * tensor_bytes[t].
- Each prefetch slot holds, per tensor, the fetched experts back to back in sorted expert-id order.
A CopyOp's offsets are bytes into those two buffers; the scheduler adds the base addresses.

Unsliced plans issue one op per contiguous run per (source, tensor). Sliced plans (contention_opt)
cut every run into slice_bytes pieces and interleave them round-robin across sources, starting at a
destination-dependent source so that destinations do not all start on the same peer (paper 4.3.2).
"""
from __future__ import annotations

from dataclasses import dataclass

from .placement import ExpertPlacement


@dataclass(frozen=True, slots=True)
class CopyOp:
    source_rank: int  # dwdp_rank of the peer that serves these bytes
    tensor_idx: int  # index into ExpertLayout.tensor_names
    src_offset: int  # bytes into the source's exported buffer of that tensor
    dst_offset: int  # bytes into the destination slot's buffer of that tensor
    nbytes: int


@dataclass(frozen=True, slots=True)
class ExpertLayout:
    """Per-expert byte sizes of the routed-expert tensors, in buffer order (e.g. w13, w2, scales)."""

    tensor_names: tuple[str, ...]
    tensor_bytes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.tensor_names) != len(self.tensor_bytes) or any(b <= 0 for b in self.tensor_bytes):
            raise ValueError(f"bad ExpertLayout {self.tensor_names} {self.tensor_bytes}")

    @property
    def expert_bytes(self) -> int:
        return sum(self.tensor_bytes)


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """All copies that fill one rank's prefetch slot for one MoE layer (identical for every layer)."""

    dwdp_rank: int
    ops: tuple[CopyOp, ...]
    sliced: bool

    @property
    def total_bytes(self) -> int:
        return sum(op.nbytes for op in self.ops)

    def bytes_per_source(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for op in self.ops:
            out[op.source_rank] = out.get(op.source_rank, 0) + op.nbytes
        return out


def merge_adjacent(ops: list[CopyOp]) -> list[CopyOp]:
    """`ops` in order, each merged into its predecessor when source, tensor, source offset and
    destination offset all continue it (fewer, larger copies; the same bytes)."""
    out: list[CopyOp] = []
    for op in ops:
        last = out[-1] if out else None
        if (last is not None and last.source_rank == op.source_rank and last.tensor_idx == op.tensor_idx
                and last.src_offset + last.nbytes == op.src_offset and last.dst_offset + last.nbytes == op.dst_offset):
            out[-1] = CopyOp(op.source_rank, op.tensor_idx, last.src_offset, last.dst_offset, last.nbytes + op.nbytes)
        else:
            out.append(op)
    return out


def _runs(placement: ExpertPlacement, layout: ExpertLayout, rank: int) -> dict[int, list[CopyOp]]:
    """Unsliced ops per source, merged where source and destination are both contiguous."""
    per_source: dict[int, list[CopyOp]] = {}
    src_index = [{e: i for i, e in enumerate(held)} for held in placement.local_experts]
    for t, nbytes in enumerate(layout.tensor_bytes):
        for slot_idx, (e, s) in enumerate(placement.sources[rank]):
            per_source.setdefault(s, []).append(CopyOp(s, t, src_index[s][e] * nbytes, slot_idx * nbytes, nbytes))
    return {s: merge_adjacent(ops) for s, ops in per_source.items()}


def _slices(op: CopyOp, slice_bytes: int) -> list[CopyOp]:
    return [CopyOp(op.source_rank, op.tensor_idx, op.src_offset + o, op.dst_offset + o, min(slice_bytes, op.nbytes - o))
            for o in range(0, op.nbytes, slice_bytes)]


def build_copy_plan(placement: ExpertPlacement, layout: ExpertLayout, rank: int, *,
                    sliced: bool, slice_bytes: int = 2 << 20) -> CopyPlan:
    """The copy plan of dwdp_rank `rank`; covers every fetched byte exactly once."""
    if not 0 <= rank < placement.dwdp_size:
        raise ValueError(f"dwdp_rank {rank} not in [0, {placement.dwdp_size})")
    per_source = _runs(placement, layout, rank)
    # Start each destination at the next peer after itself (upstream: peer = (rank + off) % size).
    order = sorted(per_source, key=lambda s: (s - rank - 1) % placement.dwdp_size)
    if not sliced:
        return CopyPlan(rank, tuple(op for s in order for op in per_source[s]), sliced=False)
    queues = [[sl for op in per_source[s] for sl in _slices(op, slice_bytes)] for s in order]
    ops: list[CopyOp] = []
    for i in range(max((len(q) for q in queues), default=0)):
        ops.extend(q[i] for q in queues if i < len(q))
    return CopyPlan(rank, tuple(ops), sliced=True)


def split_batches(plan: CopyPlan, max_ops: int) -> list[tuple[CopyOp, ...]]:
    """The plan's ops in batches of at most max_ops (0 = one batch), order kept (pacing knob)."""
    if max_ops <= 0 or len(plan.ops) <= max_ops:
        return [plan.ops]
    return [plan.ops[i:i + max_ops] for i in range(0, len(plan.ops), max_ops)]
