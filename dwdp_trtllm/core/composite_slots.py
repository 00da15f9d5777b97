"""Composite-view slots for gemm: composite_view — every expert of a layer at one [E, N, K] virtual address range.

Shape legend: E experts, N out features, K in features of one expert tensor.

cuMemMap maps whole physical allocations only, so the layout is built from whole allocations:
- the rank's local experts of (layer, tensor): ONE allocation made by the vmm transport (the experts
  peers pull from), which must hold one contiguous run of expert ids [a, b);
- the fetched experts of (slot, tensor): one allocation per run of consecutive fetched ids ([0, a) and
  [b, E)), mapped back to back as the slot the copy scheduler fills (same bytes as a plain slot);
- per (layer, slot, tensor): [run before | local | run after] mapped again into one [E, ...] range.
Copies land in the run allocations through the slot mapping; the GEMM reads them through the
composite mapping: no merge copy. Block scales (fp8) are small and not granularity-sized: they stay in
plain slots and are gathered per call.
Every size must be a multiple of the VMM granularity (DeepSeek w13/w2 experts are, in bf16 and fp8);
anything else is refused with the reason.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from ..byte_units import fmt_bytes
from .composite_view import CompositeView, VmmAllocation, granularity
from .placement import ExpertPlacement


class CompositeUnsupported(ValueError):
    """This placement/model cannot use gemm: composite_view; the message says why and what to use."""


def local_run(placement: ExpertPlacement, rank: int) -> tuple[int, int]:
    """[a, b) of this rank's local experts; raises when they are not one contiguous run."""
    ids = placement.local_experts[rank]
    a, b = ids[0], ids[-1] + 1
    if list(ids) != list(range(a, b)):
        raise CompositeUnsupported(
            f"gemm: composite_view needs each rank's local experts to be one contiguous run of expert ids; "
            f"dwdp_rank {rank} holds {len(ids)} experts that wrap around (redundant_experts): use multi_buffer")
    return a, b


class CompositeSlots:
    """Slot buffers made of VMM run allocations, and the composite [E, ...] views per (layer, slot)."""

    def __init__(self, *, placement: ExpertPlacement, rank: int, specs, tensor_bytes, num_layers: int,
                 num_slots: int, local_alloc, device: torch.device, mapped=None):
        """specs: [(name, per-expert shape, dtype)] in buffer order; tensor_bytes: per-expert bytes;
        local_alloc(layer, tensor_idx) -> (cuMem handle, padded bytes) of the transport's own allocation;
        mapped: tensor indices to map (default: names not ending in "scale"; the TensorRT-LLM host names
        its FP8 scales *_scaling_factor and passes its own list)."""
        self.device = device
        dev = device.index if device.index is not None else torch.cuda.current_device()
        gran = granularity(dev)
        E = placement.num_experts
        a, b = local_run(placement, rank)
        runs = [(0, a), (b, E)]
        self.mapped = list(mapped) if mapped is not None else [
            i for i, (name, _, _) in enumerate(specs) if not name.endswith("scale")]
        for t in self.mapped:
            for lo, hi in [(a, b)] + runs:
                if hi > lo and ((hi - lo) * tensor_bytes[t]) % gran:
                    raise CompositeUnsupported(
                        f"gemm: composite_view needs every run of experts to be a multiple of the {fmt_bytes(gran, 'MiB', digits=None)} VMM "
                        f"granularity; {specs[t][0]} experts are {tensor_bytes[t]} bytes, a run of {hi - lo} is not: "
                        f"use multi_buffer")
        self._allocs: list[VmmAllocation] = []
        self._views: list[CompositeView] = []
        self.slot_tensor: dict[tuple[int, int], torch.Tensor] = {}  # (slot, t) -> uint8 slot buffer
        self.composite: dict[tuple[int, int, int], torch.Tensor] = {}  # (layer, slot, t) -> [E, ...] view
        try:
            for s in range(num_slots):
                for t in self.mapped:
                    run_allocs = [VmmAllocation.create((hi - lo) * tensor_bytes[t], dev) if hi > lo else None
                                  for lo, hi in runs]
                    self._allocs += [r for r in run_allocs if r is not None]
                    chunks = [(r, 0, r.nbytes) for r in run_allocs if r is not None]
                    if chunks:
                        view = CompositeView(chunks)
                        self._views.append(view)
                        self.slot_tensor[(s, t)] = view.tensor((view.nbytes,), torch.uint8)
                    for layer in range(num_layers):
                        handle, padded = local_alloc(layer, t)
                        if padded != (b - a) * tensor_bytes[t]:
                            raise CompositeUnsupported(
                                f"gemm: composite_view: the local {specs[t][0]} allocation is {padded} bytes, its experts "
                                f"{(b - a) * tensor_bytes[t]}: sizes must be multiples of the allocation granularity")
                        local = SimpleNamespace(handle=handle, nbytes=padded, device=dev)
                        order = [run_allocs[0], local, run_allocs[1]]
                        view = CompositeView([(c, 0, c.nbytes) for c in order if c is not None])
                        self._views.append(view)
                        name, shape, dtype = specs[t]
                        self.composite[(layer, s, t)] = view.tensor((E, *shape), dtype)
        except Exception:
            self.close()
            raise

    @property
    def allocated_bytes(self) -> int:
        return sum(a.nbytes for a in self._allocs)

    def close(self) -> None:
        """Unmap every view, then release the run allocations (callers synchronise the device first)."""
        for v in self._views:
            v.close()
        for a in self._allocs:
            a.close()
        self._views, self._allocs = [], []
