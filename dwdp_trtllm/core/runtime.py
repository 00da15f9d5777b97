"""DwdpRuntime: the one owner of a rank's DWDP state (transport, buffers, copy plan, scheduler, prefetcher).

Shape legend: E experts, N out features, K in features of one expert tensor.

    rt = DwdpRuntime(cfg, spec, group=g, dwdp_rank=r, device=dev, tag=run_tag)
    rt.local_tensor(moe_idx, "w13")[i] = ...   # fill own experts (local_experts[r][i])
    rt.open()                                  # * collective: exchange handles, build scheduler, start prefetch
    slot = rt.prefetcher.acquire(m); weights = rt.expert_sources(m, slot); ...; rt.prefetcher.release(m)
    rt.close()                                 # * collective: drain copies, barrier, unmap, free
Layers never see the process group: everything distributed lives here.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ..spec.config import DwdpConfig
from .copy_plan import build_copy_plan
from .expert_buffers import expert_layout, expert_tensor_specs
from .prefetcher import prefetch_slot_count
from ..spec.models import ModelSpec
from .placement import make_placement
from .prefetcher import Prefetcher
from .transport import make_transport
from .close_sequence import close_in_order

log = logging.getLogger("dwdp_trtllm.core.runtime")

@dataclass(frozen=True)
class ExpertSources:
    """Where each expert's tensors live for one MoE layer: buffers + per-expert (buffer, row) map.

    buffers[name]: [local view [n_local, ...], slot view [n_fetch, ...]] per tensor name;
    expert_buffer_idx_E / expert_row_E: int32 on the device (constant for the run).
    """

    buffers: dict[str, list[torch.Tensor]]
    expert_buffer_idx_E: torch.Tensor
    expert_row_E: torch.Tensor


def expert_maps(placement, rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert_buffer_idx_E, expert_row_E) of buffers [local, slot] for `rank` (placement.expert_location), int32
    on the device. Built once per run: the engine caches work per map object (expert_maps._gather_rows)."""
    loc = placement.expert_location(rank)
    return (torch.tensor([b for b, _ in loc], dtype=torch.int32, device=device),
            torch.tensor([r for _, r in loc], dtype=torch.int32, device=device))


def typed_rows(buf_u8: torch.Tensor, rows: int, shape, dtype: torch.dtype) -> torch.Tensor:
    """The first `rows` experts of a uint8 buffer as a [rows, *shape] tensor of `dtype` (a view, no copy)."""
    per_expert = torch.Size(shape).numel() * dtype.itemsize
    return buf_u8[: rows * per_expert].view(dtype).view(rows, *shape)


def local_slot_sources(specs, local_u8, slot_u8, n_local: int, n_fetch: int,
                       maps: tuple[torch.Tensor, torch.Tensor]) -> ExpertSources:
    """ExpertSources of one (layer, slot): for each tensor t, specs[t] = (name, shape, dtype), the [n_local, ...] view
    of local_u8[t] and the [n_fetch, ...] view of slot_u8[t]; maps from expert_maps. The embedded engine
    (DwdpRuntime.expert_sources) and the TensorRT-LLM host (integration/adapter.py) build them the same way."""
    return ExpertSources({name: [typed_rows(local_u8[t], n_local, shape, dtype),
                                 typed_rows(slot_u8[t], n_fetch, shape, dtype)]
                          for t, (name, shape, dtype) in enumerate(specs)}, *maps)


class DwdpRuntime:
    def __init__(self, cfg: DwdpConfig, spec: ModelSpec, *, group, dwdp_rank: int, device: torch.device,
                 tag: str, timeout_s: float = 300.0):
        self.cfg, self.spec, self.group, self.dwdp_rank, self.device = cfg, spec, group, dwdp_rank, device
        self.placement = make_placement(cfg, spec.num_experts)
        self.specs = expert_tensor_specs(spec, cfg.weight_dtype)
        self.layout = expert_layout(spec, cfg.weight_dtype)
        self.num_layers = spec.num_moe_layers
        #: prefetch slots: the count memory.rank_memory prices (min(prefetch_depth + 1, MoE layers), at least 2)
        self.num_slots = prefetch_slot_count(cfg, self.num_layers)
        self.local_ids = self.placement.local_experts[dwdp_rank]
        self.fetch_ids = self.placement.fetch_experts(dwdp_rank)
        transport = cfg.transport
        if cfg.gemm == "composite_view":
            # local experts must be cuMem allocations to be mapped next to the slot: the vmm transport makes them
            from .composite_slots import CompositeUnsupported, local_run
            if transport == "auto" and device.type == "cuda":
                transport = "vmm_fd"
            if transport not in ("vmm_fd", "vmm_fabric"):
                raise CompositeUnsupported(f"gemm: composite_view needs transport vmm_fd or vmm_fabric on cuda, "
                                           f"got transport {cfg.transport!r} on {device.type}")
            local_run(self.placement, dwdp_rank)
        self.transport = make_transport(transport, group=group, dwdp_rank=dwdp_rank, dwdp_size=cfg.dwdp_size,
                                        device=device, tag=tag)
        self.timeout_s = timeout_s
        n_local = len(self.local_ids)
        sizes = {self._key(m, t): n_local * nbytes for m in range(self.num_layers)
                 for t, nbytes in enumerate(self.layout.tensor_bytes)}
        self.local_bytes = sum(sizes.values())
        self._local = self.transport.allocate(sizes)
        n_fetch = len(self.fetch_ids)
        self.composite = None
        if cfg.gemm == "composite_view":
            from .composite_slots import CompositeSlots
            self.composite = CompositeSlots(
                placement=self.placement, rank=dwdp_rank, specs=self.specs, tensor_bytes=self.layout.tensor_bytes,
                num_layers=self.num_layers, num_slots=self.num_slots, device=device,
                local_alloc=lambda m, t: self.transport.allocation(self._key(m, t)))
        # Slots are plain device memory (only this rank reads and writes them), except the (slot, tensor)
        # pairs the composite view made of VMM run allocations: the scheduler fills those through their mapping.
        mapped = self.composite.slot_tensor if self.composite is not None else {}
        self.slots = [[mapped[(s, t)] if (s, t) in mapped else
                       torch.empty(max(n_fetch * nbytes, 1), dtype=torch.uint8, device=device)
                       for t, nbytes in enumerate(self.layout.tensor_bytes)] for s in range(self.num_slots)]
        self.slot_bytes = self.num_slots * n_fetch * self.layout.expert_bytes
        self.expert_maps = expert_maps(self.placement, dwdp_rank, device)
        self.prefetcher: Prefetcher | None = None
        self.scheduler = None
        self._closed = False
        self.close_result = None  # close(): close_sequence.CloseResult

    @staticmethod
    def _key(moe_idx: int, tensor_idx: int) -> str:
        return f"L{moe_idx}.t{tensor_idx}"

    def local_tensor(self, moe_idx: int, name: str) -> torch.Tensor:
        """[n_local, ...] typed view of this rank's own experts of `name` for MoE layer `moe_idx`."""
        t = self.layout.tensor_names.index(name)
        _, shape, dtype = self.specs[t]
        return typed_rows(self._local[self._key(moe_idx, t)], len(self.local_ids), shape, dtype)

    def open(self) -> None:
        """Collective over the DWDP group: map peers, build the copy plan and scheduler, start prefetching."""
        from .copy_scheduler import CopyScheduler

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # local experts are written before peers may read them
        self.transport.open_peers()
        plan = build_copy_plan(self.placement, self.layout, self.dwdp_rank, sliced=self.cfg.contention_opt,
                               slice_bytes=self.cfg.slice_bytes)
        self.scheduler = CopyScheduler(
            plan,
            src_buffer=lambda peer, layer, t: self.transport.peer_buffer(peer, self._key(layer, t)),
            dst_buffer=lambda slot, t: self.slots[slot][t],
            layers=range(self.num_layers), num_slots=self.num_slots, device=self.device,
            method=self.cfg.copy_method, max_inflight_slices=self.cfg.max_inflight_slices, lanes=self.cfg.copy_lanes,
            timeout_s=self.timeout_s)
        self.prefetcher = Prefetcher(self.scheduler, num_layers=self.num_layers, num_slots=self.num_slots,
                                     device=self.device, pacing=self.cfg.pacing, timeout_s=self.timeout_s)
        self.prefetcher.start()

    def composite_weights(self, moe_idx: int, slot: int) -> dict[str, torch.Tensor]:
        """gemm: composite_view: name -> [E, ...] view of all experts (local + this slot) of MoE layer moe_idx."""
        return {self.layout.tensor_names[t]: self.composite.composite[(moe_idx, slot, t)] for t in self.composite.mapped}

    def expert_sources(self, moe_idx: int, slot: int) -> ExpertSources:
        local = [self._local[self._key(moe_idx, t)] for t in range(len(self.specs))]
        return local_slot_sources(self.specs, local, self.slots[slot], len(self.local_ids), len(self.fetch_ids),
                                  self.expert_maps)

    def close(self) -> None:
        """Collective: finish copies, wait until no peer reads our buffers (transport.close_barrier), release
        everything, all within timeout_s: close_sequence.close_in_order, the TensorRT-LLM adapter's policy too (the
        barrier runs even when our copies did not drain; then the composite view and transport stay mapped)."""
        if self._closed:
            return
        self._closed = True

        def release_local():
            if self.scheduler is not None:
                self.scheduler.close()

        def release_shared():
            if self.composite is not None:
                self.composite.close()
            self.transport.close()

        self.close_result = close_in_order(
            prefetcher=self.prefetcher, device=self.device, group=self.group, timeout_s=self.timeout_s,
            label=f"DWDP group ({self.transport.tag})", log=log, release_local=release_local,
            release_shared=release_shared)

    def abort(self) -> None:
        """Release local resources without any collective (error path; peers are being torn down)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.scheduler is not None:
                self.scheduler.close()
            if self.composite is not None:
                self.composite.close()
        finally:
            self.transport.close()
