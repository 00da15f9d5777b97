"""CPU stand-in for the composite view on the TensorRT-LLM host (tests; no tensorrt_llm import).

On CUDA, composite_slots.CompositeSlots maps, per (layer, slot, tensor), [run before | local | run after] into
one [E, ...] virtual range: the slot runs are what the copy scheduler fills (peer experts in fetched order), the
local run is the transport's own allocation of that layer, nothing is copied. A CPU has no VMM, so this stand-in
keeps the same slot buffers and the same copy plan (peer ops into the runs, fetched order) and assembles the
[E, ...] tensor by concatenation when the layer is bound, after its copies completed. It exercises everything of
the composite path except the mapping itself (which tests/gpu/test_trtllm_adapter_cuda.py covers); it copies
the local experts per bind, so it is never a performance path.
"""
from __future__ import annotations

import torch

from ..core.composite_slots import local_run
from ..core.placement import ExpertPlacement


class CpuCompositeStandIn:
    """What AdapterRuntime reads of CompositeSlots: `slot_tensor[(slot, t)]` (uint8 runs, fetched order),
    `composite[(layer, slot, t)]` (a callable returning the assembled [E, ...] tensor), `close()`."""

    def __init__(self, *, placement: ExpertPlacement, rank: int, specs, tensor_bytes, num_layers: int,
                 num_slots: int, mapped, local_buffer):
        """local_buffer(layer, t) -> the uint8 buffer holding this rank's experts of that layer (the transport's)."""
        E = placement.num_experts
        a, b = local_run(placement, rank)  # CompositeUnsupported when the local experts wrap around
        self.slot_tensor: dict[tuple[int, int], torch.Tensor] = {}
        self.composite: dict[tuple[int, int, int], object] = {}
        for s in range(num_slots):
            for t in mapped:
                nb = tensor_bytes[t]
                run = torch.empty((E - (b - a)) * nb, dtype=torch.uint8)
                self.slot_tensor[(s, t)] = run
                name, shape, dtype = specs[t]
                for layer in range(num_layers):
                    self.composite[(layer, s, t)] = self._assemble(run, local_buffer(layer, t), a * nb, E, shape, dtype)

    @staticmethod
    def _assemble(run: torch.Tensor, local: torch.Tensor, split: int, E: int, shape, dtype):
        def view() -> torch.Tensor:
            return torch.cat([run[:split], local, run[split:]]).view(dtype).view(E, *shape)
        return view

    def close(self) -> None:
        self.slot_tensor.clear()
        self.composite.clear()
