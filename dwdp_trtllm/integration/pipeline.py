"""Per-layer prefetch pipeline driven by nn.Module hooks (no tensorrt_llm; CPU-testable).

Legend: L = MoE layers in forward order (position p = 0..L-1), S = slots = prefetch_depth + 1.

Order of events for one forward of the model (depth d, slot of position p = p % S):
    model pre-hook:        issue(0..d-1)                      copies of the first layers start
    MoE p pre-hook:        wait(p); bind(p); issue(p + d)     compute waits only for its own copies;
                                                              the copies of p+d overlap p's MoE and
                                                              the attention of the layers in between
    MoE p forward hook:    release(p)                         slot p % S may be overwritten
`issue` makes the copy stream wait for the release of the slot's previous user (WAR), so no step
blocks the host. Executors implement issue/wait/release (SlotCopyExecutor below: torch copies on a
side stream on CUDA, synchronous copies on CPU).
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

import torch

from ..copy_plan import CopyOp


class SlotExecutor(Protocol):
    num_slots: int

    def issue(self, pos: int, slot: int) -> None: ...
    def wait(self, pos: int, slot: int) -> None: ...
    def release(self, pos: int, slot: int) -> None: ...


class LayerPipeline:
    """Attach hooks to `model` and the MoE modules (forward order); `bind(module, pos, slot)` points
    the module's expert weights at slot `slot` (called after the wait, on the compute stream)."""

    def __init__(self, moe_modules: Sequence[torch.nn.Module], executor: SlotExecutor,
                 bind: Callable[[torch.nn.Module, int, int], None], prefetch_depth: int = 1):
        if prefetch_depth < 1 or executor.num_slots < prefetch_depth + 1:
            raise ValueError(f"prefetch_depth {prefetch_depth} needs >= {prefetch_depth + 1} slots, executor has {executor.num_slots}")
        self.modules, self.executor, self.bind, self.depth = list(moe_modules), executor, bind, prefetch_depth
        self.handles: list = []
        self.trace: list[tuple[str, int]] = []  # (event, position), kept for tests and debugging

    def slot(self, pos: int) -> int:
        return pos % self.executor.num_slots

    def _issue(self, pos: int) -> None:
        if pos < len(self.modules):
            self.trace.append(("issue", pos))
            self.executor.issue(pos, self.slot(pos))

    def start(self) -> None:
        for p in range(min(self.depth, len(self.modules))):
            self._issue(p)

    def attach(self, model: torch.nn.Module) -> "LayerPipeline":
        self.handles.append(model.register_forward_pre_hook(lambda m, a: self.start()))
        for pos, mod in enumerate(self.modules):
            self.handles.append(mod.register_forward_pre_hook(self._pre(pos)))
            self.handles.append(mod.register_forward_hook(self._post(pos)))
        return self

    def _pre(self, pos: int):
        def hook(module, args):
            self.trace.append(("wait", pos))
            self.executor.wait(pos, self.slot(pos))
            self.bind(module, pos, self.slot(pos))
            self._issue(pos + self.depth)
        return hook

    def _post(self, pos: int):
        def hook(module, args, output):
            self.trace.append(("release", pos))
            self.executor.release(pos, self.slot(pos))
        return hook

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


class SlotCopyExecutor:
    """Runs the same op list for every layer position: slot[s][t] (uint8, E*tensor_bytes[t]) <- source bytes.

    source(peer, pos, t) returns the uint8 1-D buffer of dwdp_rank `peer` for MoE position `pos`,
    tensor t (peer == own rank: the own exported buffer). On CUDA copies run on `copy_stream`
    with per-slot ready (RAW) and consumed (WAR) events; on CPU they run synchronously.
    TODO(perf): one cudaMemcpyBatchAsync per layer from prebuilt arrays (DESIGN 5) instead of one
    torch copy per op.
    """

    def __init__(self, ops: Sequence[CopyOp], slots: Sequence[Sequence[torch.Tensor]],
                 source: Callable[[int, int, int], torch.Tensor]):
        self.ops, self.slots, self.source = tuple(ops), [list(s) for s in slots], source
        self.num_slots = len(self.slots)
        dev = self.slots[0][0].device
        self.cuda = dev.type == "cuda"
        if self.cuda:
            self.copy_stream = torch.cuda.Stream(device=dev)
            self.ready = [torch.cuda.Event() for _ in range(self.num_slots)]
            self.consumed = [torch.cuda.Event() for _ in range(self.num_slots)]
            for ev in self.consumed:
                ev.record(torch.cuda.current_stream(dev))

    def _copy(self, pos: int, slot: int) -> None:
        for op in self.ops:
            src = self.source(op.source_rank, pos, op.tensor_idx)
            self.slots[slot][op.tensor_idx][op.dst_offset:op.dst_offset + op.nbytes].copy_(
                src[op.src_offset:op.src_offset + op.nbytes], non_blocking=self.cuda)

    def issue(self, pos: int, slot: int) -> None:
        if not self.cuda:
            self._copy(pos, slot)
            return
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(self.consumed[slot])
            self._copy(pos, slot)
            self.ready[slot].record(self.copy_stream)

    def wait(self, pos: int, slot: int) -> None:
        if self.cuda:
            torch.cuda.current_stream().wait_event(self.ready[slot])

    def release(self, pos: int, slot: int) -> None:
        if self.cuda:
            self.consumed[slot].record(torch.cuda.current_stream())
