"""TensorRT-LLM's MoE weights on the DWDP core: transport, CopyScheduler and Prefetcher (no tensorrt_llm import).

Legend: L MoE layers in forward order (position p), S slots (prefetch_depth + 1), E experts, t tensor index.

The backend module of each MoE layer ("owner": CutlassFusedMoE) holds its local experts [n_local, ...]
per weight name. AdapterRuntime:
 1. moves each owner tensor into the transport's exported buffer `L{p}.t{t}` (same storage, no duplicate);
 2. builds the expert views the stock kernel reads, per (p, slot), once:
    - composite_view (CUDA + VMM transport): weights are one [E, ...] virtual range [run | local | run]
      (composite_slots.py): the local experts are mapped, never copied; the small FP8 block scales
      live in a full [E, ...] plain slot filled with local + peer copies;
    - merge (fallback): every tensor in a full [E, ...] slot, local experts copied in every layer
      (full_slot.py); the log says why it was chosen;
    - on CPU (tests), composite_view runs as a stand-in (composite_cpu.py): same slot runs and copy plan, the
      [E, ...] tensor assembled by concatenation at bind time;
 3. drives the copies with the same CopyScheduler (graph / batch issue from prebuilt tables) and
    Prefetcher (slot ring, sequence numbers wrapping across forwards) as the embedded engine.
Per-layer host work on the forward thread: wait (one stream wait_event), bind (param.data = prebuilt
view, one assignment per tensor), release (one event record + one scheduler issue).
Streams: copies on the scheduler's copy stream; waits and release events on the current (compute) stream.
"""
from __future__ import annotations

import logging
from typing import Sequence

import torch

from ..composite_slots import CompositeSlots, CompositeUnsupported, local_run
from ..copy_plan import CopyPlan, ExpertLayout, build_copy_plan
from ..copy_scheduler import CopyScheduler
from ..placement import ExpertPlacement
from ..prefetcher import Prefetcher
from .composite_cpu import CpuCompositeStandIn
from .full_slot import full_slot_ops

log = logging.getLogger("dwdp_trtllm.integration")


def is_scale(name: str) -> bool:
    """FP8 block scales / NVFP4 scales: small, not granularity-sized, kept in plain full slots."""
    return name.endswith("_scale") or name.endswith("_scaling_factor")


def key(pos: int, t: int) -> str:
    return f"L{pos}.t{t}"


class AdapterRuntime:
    def __init__(self, *, owners: Sequence[torch.nn.Module], names: Sequence[str], placement: ExpertPlacement,
                 dwdp_rank: int, cfg, transport, device: torch.device, timeout_s: float = 300.0):
        """owners[p]: the module holding MoE position p's expert tensors `names` ([n_local, ...] each).
        Collective over the DWDP group (transport.open_peers); call on every rank in the same order."""
        self.owners, self.names, self.placement, self.dwdp_rank = list(owners), tuple(names), placement, dwdp_rank
        self.cfg, self.transport, self.device = cfg, transport, device
        E, n_local = placement.num_experts, len(placement.local_experts[dwdp_rank])
        L, S = len(self.owners), cfg.num_slots
        o0 = self.owners[0]
        self.shapes = {n: (tuple(getattr(o0, n).shape[1:]), getattr(o0, n).dtype) for n in names}
        per_expert = [getattr(o0, n)[0].numel() * getattr(o0, n).element_size() for n in names]
        self.layout = ExpertLayout(self.names, tuple(per_expert))

        exported = transport.allocate({key(p, t): n_local * nb for p in range(L) for t, nb in enumerate(per_expert)})
        self.local_u8 = exported  # this rank's experts per (position, tensor): what the composite view maps
        for p, o in enumerate(self.owners):
            for t, n in enumerate(names):
                param = getattr(o, n)
                buf_u8 = exported[key(p, t)]
                buf_u8.copy_(param.data.contiguous().view(torch.uint8).reshape(-1))
                param.data = buf_u8.view(param.dtype).view(param.shape)  # own storage now lives in the exported buffer
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # local experts are written before peers may read them
        transport.open_peers()

        self.gemm, self.reason = self._choose_gemm()
        plan = build_copy_plan(placement, self.layout, dwdp_rank, sliced=cfg.contention_opt, slice_bytes=cfg.slice_bytes)
        full_ops = full_slot_ops(placement, self.layout, dwdp_rank, plan)
        self.composite = None
        if self.gemm == "composite_view":
            mapped = [t for t, n in enumerate(names) if not is_scale(n)]
            specs = [(n, *self.shapes[n]) for n in names]
            try:
                if device.type == "cuda":
                    self.composite = CompositeSlots(
                        placement=placement, rank=dwdp_rank, specs=specs, tensor_bytes=self.layout.tensor_bytes,
                        num_layers=L, num_slots=S, device=device, mapped=mapped,
                        local_alloc=lambda m, t: transport.allocation(key(m, t)))
                else:
                    self.composite = CpuCompositeStandIn(
                        placement=placement, rank=dwdp_rank, specs=specs, tensor_bytes=self.layout.tensor_bytes,
                        num_layers=L, num_slots=S, mapped=mapped, local_buffer=lambda m, t: exported[key(m, t)])
            except CompositeUnsupported as e:  # e.g. expert bytes off the VMM granularity
                self.gemm, self.reason = "merge", str(e)
                log.info("dwdp_trtllm: falling back to merge (%s)", e)
        if self.gemm == "composite_view":
            # weights: the plan's peer ops into the slot runs (fetched order); scales: full-slot ops
            ops = tuple(op for op in plan.ops if op.tensor_idx in mapped) + \
                tuple(op for op in full_ops if op.tensor_idx not in mapped)
        else:
            mapped = []
            ops = full_ops
        log.info("dwdp_trtllm: expert weights via %s (%s)", self.gemm, self.reason)
        self.plan = CopyPlan(dwdp_rank, ops, plan.sliced)
        self.slots = [[self.composite.slot_tensor.get((s, t), torch.empty(1, dtype=torch.uint8, device=device))
                       if t in mapped else torch.empty(E * nb, dtype=torch.uint8, device=device)
                       for t, nb in enumerate(per_expert)] for s in range(S)]
        # the [E, ...] tensors each (position, slot) binds, built once (binding is then attribute stores only)
        self.views: dict[tuple[int, int], list[torch.Tensor]] = {}
        for p in range(L):
            for s in range(S):
                row = []
                for t, n in enumerate(names):
                    shape, dtype = self.shapes[n]
                    row.append(self.composite.composite[(p, s, t)] if t in mapped
                               else self.slots[s][t].view(dtype).view(E, *shape))
                self.views[(p, s)] = row
        self.scheduler = CopyScheduler(
            self.plan, src_buffer=lambda peer, layer, t: transport.peer_buffer(peer, key(layer, t)),
            dst_buffer=lambda slot, t: self.slots[slot][t], layers=range(L), num_slots=S, device=device,
            method=cfg.copy_method, max_inflight_slices=cfg.max_inflight_slices, lanes=cfg.copy_lanes,
            timeout_s=timeout_s)
        self.prefetcher = Prefetcher(self.scheduler, num_layers=L, num_slots=S, device=device, pacing="none",
                                     timeout_s=timeout_s)
        self.prefetcher.start()  # positions 0..S-1 of the first forward; later forwards' are issued by release()
        self._closed = False

    def _choose_gemm(self) -> tuple[str, str]:
        """composite_view where it can be built, else merge; the reason goes to the log and check output."""
        want = self.cfg.gemm
        if want == "merge":
            return "merge", "gemm: merge requested"
        note = ""
        if want in ("multi_buffer", "reference"):
            # no Hopper MoE execution unit calling dwdp::grouped_gemm in this integration yet
            note = f"gemm: {want} has no TensorRT-LLM execution unit yet; "
        cpu = self.device.type != "cuda"
        if cpu and want != "composite_view":
            return "merge", note + "composite_view needs CUDA VMM allocations; this device is cpu"
        if not cpu and getattr(self.transport, "kind", "") not in ("vmm_fd", "vmm_fabric"):
            return "merge", note + f"composite_view needs transport vmm_fd or vmm_fabric, got {self.transport.kind}"
        try:
            local_run(self.placement, self.dwdp_rank)
        except CompositeUnsupported as e:
            return "merge", note + str(e)
        if cpu:  # requested explicitly: the test stand-in (composite_cpu.py)
            return "composite_view", ("cpu stand-in for tests: slot runs and copy plan of the composite view, the "
                                      "[E, ...] tensor assembled per bind (no VMM on cpu)")
        return "composite_view", note + "local experts mapped beside the slot (no local copy)"

    # -- per layer (forward thread) -------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.owners)

    def at_forward_start(self) -> bool:
        return self.prefetcher.n % self.num_layers == 0

    def wait_and_bind(self, pos: int) -> None:
        """The current stream waits for position pos's copies; its owner's tensors point at the slot's views."""
        slot = self.prefetcher.acquire(pos)
        o = self.owners[pos]
        for n, view in zip(self.names, self.views[(pos, slot)]):
            getattr(o, n).data = view() if callable(view) else view  # callable: the CPU composite stand-in

    def release(self, pos: int) -> None:
        """Position pos's kernels are enqueued: the slot may be refilled after them (next forward wraps)."""
        self.prefetcher.release(pos)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.prefetcher.drain()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        finally:
            self.scheduler.close()
            if self.composite is not None:
                self.composite.close()
