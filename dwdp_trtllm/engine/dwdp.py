"""DWDP executor: every rank computes all experts of a layer from its own + prefetched weights.

Shape legend: T tokens on this rank, H hidden, K top-k, E experts.

No collective in the forward pass: MoE(l) waits only on its own prefetch event (Prefetcher.acquire),
reads local experts in place and fetched experts from the slot, then releases the slot so the copy
of a later layer can reuse it. Streams and events: the compute stream is torch's current stream;
copies run on the CopyScheduler's copy stream; acquire() makes the compute stream wait on the copy's
end event; release() records the write-after-read event the next copy into that slot waits on.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

from .. import env

from ..core.runtime import DwdpRuntime
from .moe_compute import gather_experts, identity_map, routed_experts_forward
from .timing import PhaseTimer, phase


# torch's sync debug mode warns with this text at each synchronizing call (c10/cuda/CUDAFunctions.cpp);
# its one-time "Synchronization debug mode is a prototype feature ..." notice is not a sync
SYNC_WARNING = "called a synchronizing CUDA operation"


def is_sync_warning(message: str) -> bool:
    """True for the warning torch's sync debug mode ("warn") raises at a host-synchronizing CUDA call."""
    return SYNC_WARNING in message


class DwdpExperts:
    """ExpertBackend for DWDP over a DwdpRuntime (which owns every distributed resource)."""

    def __init__(self, runtime: DwdpRuntime, *, gemm: str, timer: PhaseTimer | None = None):
        self.rt, self.gemm, self.timer = runtime, gemm, timer
        self.num_experts = runtime.spec.num_experts
        # DWDP_CHECK_SYNC=1: count host syncs inside this layer (torch's sync debug mode, warn level)
        self.check_sync = env.check_sync() and runtime.device.type == "cuda"
        self.host_syncs = 0
        # dwdp_size 1 (or a placement that gives this rank everything): the local buffers are the layer, in
        # expert order, so the GEMM reads them in place (no merge copy, no slot)
        self.all_local = list(runtime.local_ids) == list(range(self.num_experts))
        self.sync_sites: list[str] = []

    @contextmanager
    def _sync_check(self):
        if not self.check_sync:
            yield
            return
        prev = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode(prev)
        hits = [w for w in caught if is_sync_warning(str(w.message))]
        self.host_syncs += len(hits)
        for w in hits[:3]:  # where they come from, for the report (first few distinct)
            where = f"{w.filename}:{w.lineno}: {w.message}"
            if where not in self.sync_sites and len(self.sync_sites) < 5:
                self.sync_sites.append(where)

    def set_timer(self, timer: PhaseTimer | None) -> None:
        self.timer = timer
        if self.rt.prefetcher is not None:
            self.rt.prefetcher.timer = timer

    def on_attention_done(self, moe_idx: int) -> None:
        self.rt.prefetcher.on_attention_done(moe_idx)

    def forward(self, moe_idx: int, x_TH: torch.Tensor, topk_ids_TK: torch.Tensor,
                topk_weights_TK: torch.Tensor) -> torch.Tensor:
        with self._sync_check():
            return self._forward(moe_idx, x_TH, topk_ids_TK, topk_weights_TK)

    def _forward(self, moe_idx: int, x_TH: torch.Tensor, topk_ids_TK: torch.Tensor,
                 topk_weights_TK: torch.Tensor) -> torch.Tensor:
        """The routed-expert op the TensorRT-LLM host runs (moe_compute.routed_experts_forward: sort, gather +
        quantisation, fc1, SwiGLU + quantisation, fc2, combine), over this rank's [local | slot] buffers, the
        composite view or the local buffers alone; timed as one expert_gemm phase (its floor is the GEMMs alone)."""
        slot = self.rt.prefetcher.acquire(moe_idx)  # times its own wait as prefetch_wait
        src = self.rt.expert_sources(moe_idx, slot)
        with phase(self.timer, "expert_gemm", moe_idx):
            b = src.buffers
            if self.all_local:
                names = ("w13", "w2", "w13_scale", "w2_scale")
                w = {n: [self.rt.local_tensor(moe_idx, n)] for n in names if n in b}
                bidx_E, row_E = identity_map(self.num_experts, x_TH.device)
            elif self.rt.composite is not None:
                # one [E, ...] view per tensor (local + slot mapped side by side): identity expert map;
                # fp8 block scales are small and gathered from [local, slot]
                view = self.rt.composite_weights(moe_idx, slot)
                w = {"w13": [view["w13"]], "w2": [view["w2"]]}
                w |= {n: [gather_experts(b[n], src.expert_buffer_idx_E, src.expert_row_E)] for n in b if n.endswith("scale")}
                bidx_E, row_E = identity_map(self.num_experts, x_TH.device)
            else:
                w, bidx_E, row_E = b, src.expert_buffer_idx_E, src.expert_row_E
            y_TH = routed_experts_forward(x_TH, topk_ids_TK, topk_weights_TK, w["w13"], w["w2"], bidx_E, row_E,
                                          gemm=self.gemm, w13_scale_sources=w.get("w13_scale"),
                                          w2_scale_sources=w.get("w2_scale"))
        self.rt.prefetcher.release(moe_idx)
        return y_TH
