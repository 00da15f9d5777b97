"""Slot ring state machine of the DWDP prefetch: issue(n + S) -> acquire(n) -> release(n).

Every MoE-layer execution gets a sequence number n (iteration * L + moe_idx for L MoE layers);
execution n reads slot n % S (S = prefetcher.prefetch_slot_count: min(prefetch_depth + 1, L), at least 2). Timeline with S = 2:

    compute stream : attn(l) | MoE(l) reads slot l%2 | attn(l+1) | MoE(l+1) reads slot (l+1)%2 | ...
    copy stream    :   pull(l+1) -> slot (l+1)%2  |  pull(l+2) -> slot l%2 (after MoE(l) released it)

- start():       issue n = 0..S-1 (the first layers of the first iteration)
- acquire(m):    the compute stream waits for execution n's copy (no host sync on CUDA)
- release(m):    record that MoE(n) finished reading slot n % S, then issue n + S into it,
                 guarded by that event (write-after-read) — or, with pacing, defer the issue until
                 on_attention_done() of the next MoE layer.
Sequence numbers wrap across iterations, so layer 0 of iteration i+1 is pulled during the last
layers of iteration i, as upstream's prefetch_first_layers does.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from ..spec.config import DwdpConfig


def prefetch_slot_count(cfg: DwdpConfig, num_moe_layers: int) -> int:
    """Prefetch slots one DWDP rank allocates: the one count runtime.DwdpRuntime allocates and deploy/memory.rank_memory prices.

    min(prefetch_depth + 1, MoE layers): slot n % S serves MoE execution n, so with S = L every layer already has
    its own slot and the copy of its next use starts as soon as its GEMM has read it; an (L + 1)-th slot would only
    hold a copy no layer waits for. At least 2: the prefetcher's ring needs two (Prefetcher below), so a model
    with one MoE layer holds two."""
    return max(2, min(cfg.num_slots, num_moe_layers))


class SpanSink(Protocol):
    """Where the prefetcher reports its waits and copies (a host's timer, e.g. engine.timing.PhaseTimer,
    set as `Prefetcher.timer`; the core defines only what it calls)."""

    def mark(self, name: str, layer: int, start_s: float, end_s: float) -> None:
        """A span on the host clock (perf_counter seconds)."""

    def mark_events(self, name: str, layer: int, a: object, b: object) -> None:
        """A span between two CUDA events."""


class Prefetcher:
    """Owns the order of copies into the slot ring; the CopyScheduler owns how bytes move."""

    def __init__(self, scheduler: Any, *, num_layers: int, num_slots: int, device: torch.device,
                 pacing: str = "none", timeout_s: float = 300.0):
        if num_layers < 1 or num_slots < 2:
            raise ValueError(f"need num_layers >= 1 and num_slots >= 2, got {num_layers}, {num_slots}")
        self.scheduler, self.L, self.S, self.device = scheduler, num_layers, num_slots, device
        self.pacing, self.timeout_s = pacing, timeout_s
        self.cuda = device.type == "cuda"
        self.n = 0  # sequence number of the next acquire
        self.handles: dict[int, Any] = {}  # sequence -> CopyHandle in flight or done
        self.pending: tuple[int, Any] | None = None  # deferred issue (pacing)
        self.timer: SpanSink | None = None  # injected by the host for the iterations it times
        self.copied_bytes = 0
        self._finished: list[Any] = []

    def _issue(self, seq: int, after: Any = None) -> None:
        layer, slot = seq % self.L, seq % self.S
        self.handles[seq] = self.scheduler.issue(layer, slot, after=after)

    def start(self) -> None:
        for seq in range(self.S):
            self._issue(seq)

    def acquire(self, moe_idx: int) -> int:
        """Make the current stream (CUDA) or thread (CPU) wait for this layer's copy; return its slot."""
        seq = self.n
        if seq % self.L != moe_idx:
            raise RuntimeError(f"DWDP prefetch order broken: expected MoE layer {seq % self.L}, got {moe_idx}")
        self._flush_pending()
        handle = self.handles.pop(seq)
        timer = self.timer
        if self.cuda:
            if timer is None:
                handle.wait(torch.cuda.current_stream(self.device))
            else:  # the wait's span on the compute stream, read back by the timer at the end of the iteration
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                handle.wait(torch.cuda.current_stream(self.device))
                b.record()
                timer.mark_events("prefetch_wait", moe_idx, a, b)
        else:
            t = time.perf_counter()
            handle.wait(timeout_s=self.timeout_s)
            if timer is not None:
                timer.mark("prefetch_wait", moe_idx, t, time.perf_counter())
        self.copied_bytes += handle.nbytes
        self._finished.append((moe_idx, handle))
        return seq % self.S

    def release(self, moe_idx: int) -> None:
        """MoE `moe_idx` has enqueued its last read of the slot: reuse it for sequence n + S."""
        seq = self.n
        after = None
        if self.cuda:
            after = torch.cuda.Event()
            after.record()
        self.n += 1
        if self.pacing == "after_attention":
            self.pending = (seq + self.S, after)
        else:
            self._issue(seq + self.S, after)

    def on_attention_done(self, moe_idx: int) -> None:
        self._flush_pending()

    def _flush_pending(self) -> None:
        if self.pending is not None:
            seq, after = self.pending
            self.pending = None
            self._issue(seq, after)

    def report_copies(self) -> None:
        """Hand the spans of finished copies to the timer (end of an iteration)."""
        timer = self.timer
        for moe_idx, handle in self._finished:
            if timer is not None:
                if self.cuda:
                    timer.mark_events("copy", moe_idx, handle.start, handle.end)
                elif handle.t_start == handle.t_start:  # not NaN: the copy ran
                    timer.mark("copy", moe_idx, handle.t_start, handle.t_end)
        self._finished.clear()

    def drain(self, deadline: float | None = None) -> None:
        """Wait (host) for every copy in flight; call before peers may unmap our buffers. deadline: the
        time.monotonic() by which all must be done (a shutdown's one deadline, close_sequence.py), TimeoutError naming
        every copy still in flight past it; None: each copy waits up to timeout_s."""
        self._flush_pending()
        for handle in self.handles.values():
            if deadline is None:
                handle.synchronize(timeout_s=self.timeout_s)
                continue
            try:
                handle.synchronize(timeout_s=max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                busy = [f"layer {h.layer} into slot {h.slot}" for h in self.handles.values() if not h.done()]
                raise TimeoutError(f"{len(busy)} copies still in flight at the deadline: {', '.join(busy)}") from None
        self.handles.clear()
