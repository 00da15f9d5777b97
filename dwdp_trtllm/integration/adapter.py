"""TensorRT-LLM's MoE weights on the DWDP core: transport, CopyScheduler and LayerSlots (no tensorrt_llm import).

Legend: L MoE layers in forward order (position p), S slots (prefetcher.prefetch_slot_count: min(prefetch_depth + 1, L), at least 2), E experts, t tensor index.

The backend module of each MoE layer ("owner": CutlassFusedMoE) holds its local experts [n_local, ...]
per weight name. AdapterRuntime:
 1. moves each owner tensor into the transport's exported buffer `L{p}.t{t}` (same storage, no duplicate);
 2. builds the expert views the stock kernel reads, per (p, slot), once:
    - composite_view (CUDA + VMM transport): weights are one [E, ...] virtual range [run | local | run]
      (composite_slots.py): the local experts are mapped, never copied; the small FP8 block scales
      live in a full [E, ...] plain slot filled with local + peer copies;
    - multi_buffer (first for FP8 block scales on sm_90: moe_evidence.default_gemm; else where the composite view cannot be built):
      the slot holds only the fetched experts [n_fetch, ...] (the copy plan's ops as they are); the owner's tensors
      keep the local experts and are never rebound; the host's execution unit (TensorRT-LLM:
      integration/trtllm/moe_unit.py, installed as the backend's run_moe) reads [local, slot] in place through
      dwdp::grouped_gemm with `bound_sources(p)`;
    - merge (fallback): every tensor in a full [E, ...] slot, local experts copied in every layer
      (full_slot.py); the log says why it was chosen (gemm_choice.choose_gemm);
    - on CPU (tests), composite_view runs as a stand-in (composite_cpu.py): same slot runs and copy plan, the
      [E, ...] tensor assembled by concatenation at bind time;
 3. drives the copies with the same CopyScheduler (graph / batch issue from prebuilt tables) as the embedded
    engine, ordered by prefetcher.LayerSlots (slots keyed by MoE position: a repeated MTP layer or a forward that
    stops early keeps the ring consistent);
 4. at executor shutdown (close, close_sequence.close_in_order: the whole of it bounded by the integration YAML's
    shutdown_timeout_s) drains, waits at the DWDP group's shutdown barrier (transport/close_barrier.py), releases
    everything it built and the transport, then destroys the model's process group.
Per-layer host work on the forward thread: wait (one stream wait_event), bind (param.data = prebuilt
view, one assignment per tensor; multi_buffer: one tuple store), release (one event record + one scheduler issue).
Streams: copies on the scheduler's copy stream; waits and release events on the current (compute) stream.
"""
from __future__ import annotations

import logging
from typing import Sequence

import torch

from ..core.composite_slots import CompositeSlots, CompositeUnsupported
from ..core.copy_plan import CopyPlan, ExpertLayout, build_copy_plan
from ..core.copy_scheduler import CopyScheduler
from ..byte_units import fmt_bytes
from ..core.prefetcher import LayerSlots, prefetch_slot_count
from ..deploy.memory import slot_experts
from ..core.placement import ExpertPlacement
from .composite_cpu import CpuCompositeStandIn
from .full_slot import full_slot_ops
from .group import destroy_group
from .gemm_choice import NO_UNIT, choose_gemm, device_sm, expert_weight_dtype, is_scale
from .moe_evidence import default_gemm, measured_case
from .settings import DEFAULT_SHUTDOWN_TIMEOUT_S
from ..core.runtime import ExpertSources, expert_maps, local_slot_sources
from ..core.close_sequence import close_in_order
from ..core.transport.liveness import PeerWatch

log = logging.getLogger("dwdp_trtllm.integration")


def key(pos: int, t: int) -> str:
    return f"L{pos}.t{t}"


class AdapterRuntime:
    def __init__(self, *, owners: Sequence[torch.nn.Module], names: Sequence[str], placement: ExpertPlacement,
                 dwdp_rank: int, cfg, transport, device: torch.device, timeout_s: float = 300.0,
                 blocker: str | None = NO_UNIT, gemm_requested: str | None = None,
                 close_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S, group_label: str = "DWDP group",
                 owns_group: bool = False):
        """owners[p]: the module holding MoE position p's expert tensors `names` ([n_local, ...] each).
        blocker: None when the host has an execution unit that can read [local, slot] for these owners (it reads
        `bound_sources(p)`), else why not. gemm_requested: the gemm the integration config names
        (settings.IntegrationConfig.gemm_requested), tried first; None when it names none (cfg.gemm is then
        DwdpConfig's default, merge, which nobody asked for): the measured default for these weights
        (moe_evidence.default_gemm) is tried first instead, then the usual fallbacks. Collective over the DWDP group (transport.open_peers); call on every
        rank in the same order. The runtime owns `transport` from here on: close() releases it after the shutdown
        barrier, the whole close within close_timeout_s (group_label names the group in its log lines). owns_group:
        the transport's process group was made for this model (group.dwdp_process_group): close() destroys it after
        the barrier."""
        self.owners, self.names, self.placement, self.dwdp_rank = list(owners), tuple(names), placement, dwdp_rank
        self.cfg, self.transport, self.device = cfg, transport, device
        self.close_timeout_s, self.group_label, self.owns_group = close_timeout_s, group_label, owns_group
        self.close_info: dict | None = None  # close(): the barrier's result and when the transport was released
        E, n_local = placement.num_experts, len(placement.local_experts[dwdp_rank])
        L = len(self.owners)
        S = prefetch_slot_count(cfg, L)  # the count runtime.DwdpRuntime allocates and memory.rank_memory prices
        o0 = self.owners[0]
        self.shapes = {n: (tuple(getattr(o0, n).shape[1:]), getattr(o0, n).dtype) for n in names}
        per_expert = [getattr(o0, n)[0].numel() * getattr(o0, n).element_size() for n in names]
        self.layout = ExpertLayout(self.names, tuple(per_expert))

        exported = transport.allocate({key(p, t): n_local * nb for p in range(L) for t, nb in enumerate(per_expert)})
        for p, o in enumerate(self.owners):
            for t, n in enumerate(names):
                param = getattr(o, n)
                buf_u8 = exported[key(p, t)]
                buf_u8.copy_(param.data.contiguous().view(torch.uint8).reshape(-1))
                param.data = buf_u8.view(param.dtype).view(param.shape)  # own storage now lives in the exported buffer
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # local experts are written before peers may read them
        transport.open_peers()
        self.peers = PeerWatch(transport, group_label, log)  # a peer that exits while serving (transport/liveness.py)

        wd, sm = expert_weight_dtype(next(self.shapes[n][1] for n in names if not is_scale(n)), names), device_sm(device)
        fp8_sm90 = measured_case(wd, sm)
        want = gemm_requested if gemm_requested is not None else default_gemm(wd, sm)
        choose = dict(device_type=device.type, transport_kind=getattr(transport, "kind", ""), placement=placement,
                      rank=dwdp_rank, blocker=blocker, fp8_sm90=fp8_sm90, default=gemm_requested is None,
                      device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None)
        self.gemm, self.reason = choose_gemm(want, **choose)
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
                self.gemm, self.reason = choose_gemm(want, **choose, composite_error=str(e))
        n_fetch = len(placement.fetch_experts(dwdp_rank))
        if self.gemm == "composite_view":
            # weights: the plan's peer ops into the slot runs (fetched order); scales: full-slot ops
            ops = tuple(op for op in plan.ops if op.tensor_idx in mapped) + \
                tuple(op for op in full_ops if op.tensor_idx not in mapped)
        elif self.gemm == "multi_buffer":
            mapped = []
            ops = plan.ops  # peers' experts in fetched order into [n_fetch, ...] slots; local experts stay put
        else:
            mapped = []
            ops = full_ops
        log.info("dwdp_trtllm: expert weights via %s (%s)", self.gemm, self.reason)
        self.plan = CopyPlan(dwdp_rank, ops, plan.sliced)
        # rows of each plain slot tensor: memory.slot_experts, the count rank_memory prices for this path (the
        # composite view's plain slots are its block scales, kept full [E, ...])
        slot_rows = E if self.gemm == "composite_view" else slot_experts(self.gemm, n_fetch, E)
        if self.gemm == "merge":  # deployments are priced for the default paths' fetched-expert slots
            extra = S * (slot_rows - slot_experts("multi_buffer", n_fetch, E)) * sum(per_expert)
            log.warning("dwdp_trtllm: merge holds every expert in each of its %d prefetch slots: %s per rank more than "
                        "the fetched-expert slots of multi_buffer / composite_view (memory.rank_memory gemm=merge "
                        "prices it)", S, fmt_bytes(extra, digits=1))
        self.slots = [[self.composite.slot_tensor.get((s, t), torch.empty(1, dtype=torch.uint8, device=device))
                       if t in mapped else torch.empty(max(slot_rows * nb, 1), dtype=torch.uint8, device=device)
                       for t, nb in enumerate(per_expert)] for s in range(S)]
        # the [E, ...] tensors each (position, slot) binds, built once (binding is then attribute stores only);
        # multi_buffer: the [local, slot] sources each (position, slot) hands to the execution unit
        self.views: dict[tuple[int, int], list[torch.Tensor]] = {}
        self.sources: dict[tuple[int, int], ExpertSources] = {}
        # (position, its [local, slot] sources under multi_buffer else None) between wait_and_bind and release
        self._bound: tuple[int, ExpertSources | None] | None = None
        if self.gemm == "multi_buffer":  # the embedded engine's [local, slot] sources (runtime.local_slot_sources)
            maps = expert_maps(placement, dwdp_rank, device)
            specs = [(n, *self.shapes[n]) for n in names]
            for p in range(L):
                local = [exported[key(p, t)] for t in range(len(names))]
                for s in range(S):
                    self.sources[(p, s)] = local_slot_sources(specs, local, self.slots[s], n_local, n_fetch, maps)
        else:
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
        # keyed by MoE position: a forward may repeat a layer (one-model MTP) or stop early (prefetcher.LayerSlots)
        self.prefetcher = LayerSlots(self.scheduler, num_layers=L, num_slots=S, device=device, timeout_s=timeout_s)
        self.prefetcher.start()  # the first positions of the first forward; later ones are issued by release()
        self._closed = False

    # -- per layer (forward thread) -------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.owners)

    def begin_forward(self) -> None:
        """Forward start: the first MoE positions are made held (issued if not already), as upstream's
        DwdpManager.prefetch_first_layers re-primes them at every forward start. A peer that exited is dealt with
        before any copy is issued (PeerWatch.check)."""
        self.peers.check(forward_start=True)
        self.prefetcher.begin_forward()

    def wait_and_bind(self, pos: int) -> None:
        """The current stream waits for position pos's copies; its owner's tensors point at the slot's views
        (multi_buffer: the execution unit's [local, slot] sources are handed over instead). A peer that exited
        is dealt with first (PeerWatch.check: PeerLost where the transport does not keep its memory)."""
        self.peers.check(forward_start=pos == 0)
        slot = self.prefetcher.acquire(pos)
        if self.gemm == "multi_buffer":
            self._bound = (pos, self.sources[(pos, slot)])
            return
        o = self.owners[pos]
        for n, view in zip(self.names, self.views[(pos, slot)]):
            getattr(o, n).data = view() if callable(view) else view  # callable: the CPU composite stand-in
        self._bound = (pos, None)

    @property
    def bound_position(self) -> int | None:
        """The position bound by wait_and_bind and not yet released, else None."""
        return None if self._bound is None else self._bound[0]

    def bound_sources(self, pos: int) -> ExpertSources | None:
        """multi_buffer: where position pos's experts are between its wait_and_bind and release, else None."""
        b = self._bound
        return b[1] if b is not None and b[0] == pos else None

    def release(self, pos: int) -> None:
        """Position pos's kernels are enqueued: the slot may be refilled after them (next forward wraps). Where the
        transport does not keep a dead peer's memory, no refill is issued from a peer that exited (PeerLost)."""
        if not self.transport.keeps_peer_memory:
            self.peers.check(forward_start=False)
        self.prefetcher.release(pos)
        self._bound = None

    @property
    def closed(self) -> bool:
        """close() ran (HopperDwdpManager.check_free lets a new runtime replace a closed one)."""
        return self._closed

    def close(self, local=None) -> None:
        """Executor shutdown (HopperDwdpManager.cleanup); collective over the DWDP group, all of it (drain included)
        within close_timeout_s, one deadline. local: an executor_shutdown.LocalClose when the executor hung or its
        worker thread still runs: then nothing collective runs (no barrier: step 2 is skipped with its reason) and,
        when it says so, step 4 too (the composite view and transport stay mapped until the process exits); after a
        detected hang step 1 too (nothing waits for this rank's copies or device: the close returns at once).

        Order, as upstream's DWDPWeightManager.release (tensorrt_llm/_torch/modules/dwdp/weight_manager.py @ 11eba269:
        synchronize, peer views dropped, WeightBuffer released, then DWDPTransport.release,
        whose _cleanup_resources unmaps peer ranges and releases imported handles before the local ones,
        modules/dwdp/transport.py @ 205f8c25d5e2), plus the barrier upstream leaves to VMM reference counting:
         1. our prefetcher drained, the device synchronized: we read nothing of our peers any more;
         2. the shutdown barrier (transport.close_barrier, on the group the transport exchanged handles on), at most
            what step 1 left of close_timeout_s: every peer has drained its copies from our exported buffers. A peer
            that does not come is named in a warning (group, dwdp and global rank, why) and this rank releases anyway;
         3. the copy scheduler closed; the owners' expert tensors, which point into the exported buffers (their own
            storage since setup) or slot views, rebound to empty tensors, so nothing of the model points at released
            memory (a forward after shutdown fails on shapes instead);
         4. the composite view (slot mappings) and the transport closed: peer mappings unmapped and imported handles
            released, then our exported buffers (VMM handles / IPC memory / shm mappings; shm names were unlinked at setup already);
         5. owns_group: the model's process group destroyed (group.destroy_group; upstream frees its communicator).
        If step 1 fails, the barrier still runs (peers are not held up) and the scheduler is closed, but the composite
        view and the transport stay mapped, named in an error: copies of ours may still be reading peers' memory or
        writing our slot ranges, and unmapping them under those copies is worse than a leak.
        `close_info` records the barrier's result, when this rank entered it and when the transport was released
        (time.time(); None: left mapped), whether the drain finished and if not why. The policy is
        close_sequence.close_in_order, the one DwdpRuntime.close follows too."""
        if self._closed:
            return
        self._closed = True

        def release_shared():
            if self.composite is not None:
                self.composite.close()
            self.transport.close()

        def release_local():
            if local is not None and local.keep_shared:  # a live worker thread may still be inside a forward:
                self.peers.close()  # its scheduler, slots and bound tensors stay as they are, like the mappings
                return
            try:
                self.scheduler.close()
            finally:
                self.peers.close()
                self._unbind_owners()

        group = getattr(self.transport, "group", None)

        def destroy():  # the model's gloo group, after the barrier and the release (upstream: dwdp_group.Free())
            why = destroy_group(group) if self.owns_group else None
            if why is not None:
                log.warning("dwdp_trtllm: %s: its process group could not be destroyed (%s)", self.group_label, why)

        res = close_in_order(prefetcher=self.prefetcher, device=self.device, group=group,
                             timeout_s=self.close_timeout_s, label=self.group_label, log=log,
                             release_local=release_local, release_shared=release_shared, after_barrier=destroy,
                             local_only=None if local is None else local.why,
                             keep_shared=None if local is None else local.keep_shared,
                             skip_drain=local.why if local is not None and local.hung else None)
        self.close_info = res.as_info()

    def _unbind_owners(self) -> None:
        """Owners' expert tensors -> empty [0, ...] tensors of their dtype; the prebuilt views and sources dropped."""
        for o in self.owners:
            for n in self.names:
                shape, dtype = self.shapes[n]
                getattr(o, n).data = torch.empty((0, *shape), dtype=dtype, device=self.device)
        self.views.clear()
        self.sources.clear()
        self.slots = []
        self._bound = None
