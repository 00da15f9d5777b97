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

LayerSlots (below) is the same ring keyed by MoE position instead of by sequence number, for hosts whose forwards may
repeat or skip MoE layers (the TensorRT-LLM adapter: one-model MTP, a forward that stops early).
"""
from __future__ import annotations

import time
from collections import deque
from itertools import chain, islice
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
        drain_handles(list(self.handles.values()), deadline, self.timeout_s)
        self.handles.clear()


def drain_handles(handles: list, deadline: float | None, timeout_s: float) -> None:
    """Host wait for every handle (see Prefetcher.drain: one deadline for all, or timeout_s each)."""
    for handle in handles:
        if deadline is None:
            handle.synchronize(timeout_s=timeout_s)
            continue
        try:
            handle.synchronize(timeout_s=max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            busy = [f"layer {h.layer} into slot {h.slot}" for h in handles if not h.done()]
            raise TimeoutError(f"{len(busy)} copies still in flight at the deadline: {', '.join(busy)}") from None


#: LayerSlots.recent keeps this many issues (a serving process runs forwards without end: no unbounded record)
RECENT_ISSUES = 256


class LayerSlots:
    """Prefetch slots keyed by MoE position (the TensorRT-LLM adapter's): any order of MoE layers per forward.

    A TensorRT-LLM forward need not run every MoE layer once in order: one-model MTP runs the checkpoint's MTP layer
    (one more MoE layer, after the trunk) once per draft step, 1 or 3 times with upstream's recipe
    (tensorrt_llm/_torch/speculative/mtp.py @ 23ee85ee, MTPEagleWorker.forward: `draft_model.mtp_layers[0]` in a loop
    of mtp_num_modules), and a forward may stop before the last layers. Upstream keys its double buffer by layer
    (tensorrt_llm/_torch/modules/dwdp/weight_manager.py @ 11eba269, `next_moe_layer`; weight_buffer.py @ 92fd50cb,
    `WeightBuffer.buffer_index_for_layer`) and re-primes the first layers at each forward start (pyexecutor/dwdp.py,
    `DwdpManager.prefetch_first_layers`). Here each slot records which position it holds, so:

    - acquire(p) binds the slot holding p; if none does (a layer that was not predicted), p's copy is issued now into
      the slot needed last (a miss: correct, only not overlapped; `misses` counts them);
    - release(p) keeps the slot holding p as p's (its bytes are still p's experts) and fills the slots with the next
      num_slots positions predicted, so a repeated layer is read again without a copy;
    - begin_forward() (forward start) ends the previous forward's record and makes the first positions held.
    The prediction is the previous forward's sequence of positions while this forward follows it (a repeated MTP
    layer), else layer order from the current position (first the layer just run, while it has run fewer times in a
    row than it did last time), the next forward's first positions after the last. With no repeat and no skipped tail
    this issues exactly Prefetcher's copies (p + S into p's slot). Host work per layer: O(num_slots) list steps.

    Hazards: the copies of every slot are issued on one copy stream (CUDA) or one worker thread (CPU), in issue order,
    so a copy into a slot never overtakes an earlier one into it; a copy into a slot waits for the event recorded on
    the compute stream when its last reader was released (CUDA; on CPU the reader finished before release)."""

    def __init__(self, scheduler: Any, *, num_layers: int, num_slots: int, device: torch.device,
                 timeout_s: float = 300.0):
        if num_layers < 1 or num_slots < 2:
            raise ValueError(f"need num_layers >= 1 and num_slots >= 2, got {num_layers}, {num_slots}")
        self.scheduler, self.L, self.S, self.device, self.timeout_s = scheduler, num_layers, num_slots, device, timeout_s
        self.cuda = device.type == "cuda"
        self.held: list[int | None] = [None] * num_slots  # the position whose copy each slot holds (issued)
        self.handles: list[Any] = [None] * num_slots  # that copy's handle
        self.consumed: list[Any] = [None] * num_slots  # CUDA: event after the slot's last reader
        self.bound: tuple[int, int] | None = None  # (position, slot) between acquire and release
        self.current: list[int] = []  # positions acquired in this forward, in order
        self.previous: list[int] = []  # the previous forward's
        self.following = True  # this forward has acquired exactly previous[:len(current)] so far
        self.run_length: dict[int, int] = {}  # position -> times in a row it ran the last time its streak ended
        self.copied_bytes = 0
        self.misses = 0  # acquires that found their position not held (issued then, not overlapped)
        self.copies = 0  # copies issued (one per (position, slot) fill)
        self.recent: deque[tuple[int, int]] = deque(maxlen=RECENT_ISSUES)  # (position, slot) of the last copies issued

    def start(self) -> None:
        self.begin_forward()

    def begin_forward(self) -> None:
        """Forward start: the previous forward's record ends; the first positions are made held."""
        if self.bound is not None:
            raise RuntimeError(f"forward start while MoE position {self.bound[0]} is bound (never released)")
        if self.current:
            self._end_streak()
            self.previous, self.current = self.current, []
        self.following = True
        self._fill(self._distinct(chain(self.previous, range(self.L))))

    def _distinct(self, seq) -> list[int]:
        out: list[int] = []
        for p in seq:
            if p not in out:
                out.append(p)
                if len(out) == self.S:
                    break
        return out

    def _upcoming(self) -> list[int]:
        """The next S distinct positions this forward (then the next forward) is predicted to acquire."""
        i, prev = len(self.current), self.previous
        if self.following and i < len(prev):
            rest = islice(prev, i, None)
        else:  # no record, this forward left it or ran past its end: layer order from the current position (a full
            # forward is the usual case, so a stop is never predicted); the layer just run
            # again while it has run fewer times in a row than the last time it ran (MTP draft steps), or, never seen
            # ending a streak, when it just ran twice in a row
            cur = self.current
            rest = range(cur[-1] + 1, self.L) if cur else range(self.L)
            if cur:
                k, seen = self._streak(), self.run_length.get(cur[-1])
                if (k < seen) if seen is not None else k >= 2:
                    rest = chain((cur[-1],), rest)
        return self._distinct(chain(rest, prev, range(self.L)))  # layer order pads a short record

    def _streak(self) -> int:
        """How many times in a row the last acquired position ran, up to now (bounded by the runs of one layer)."""
        cur, k = self.current, 0
        while k < len(cur) and cur[-1 - k] == cur[-1]:
            k += 1
        return k

    def _end_streak(self) -> None:
        if self.current:
            self.run_length[self.current[-1]] = self._streak()

    def _victim(self, want: list[int]) -> int:
        """The slot to overwrite: not bound; empty, else holding no wanted position, else the one wanted last."""
        free = [s for s in range(self.S) if self.bound is None or s != self.bound[1]]
        def need(s: int) -> int:
            h = self.held[s]
            return -1 if h is None else (len(want) if h not in want else want.index(h))
        return max(free, key=lambda s: (need(s) == -1, need(s)))

    def _issue(self, pos: int, slot: int) -> None:
        self.handles[slot] = self.scheduler.issue(pos, slot, after=self.consumed[slot])
        self.held[slot] = pos
        self.copied_bytes += self.handles[slot].nbytes
        self.copies += 1
        self.recent.append((pos, slot))

    def _fill(self, want: list[int]) -> None:
        for pos in want:
            if pos in self.held:
                continue
            slot = self._victim(want)
            if self.held[slot] in want:  # every free slot holds a wanted position needed sooner
                return
            self._issue(pos, slot)

    def acquire(self, pos: int) -> int:
        """Make the current stream (CUDA) or thread (CPU) wait for position pos's copy; return its slot."""
        if not 0 <= pos < self.L:
            raise ValueError(f"MoE position {pos} out of range 0..{self.L - 1}")
        if self.bound is not None:
            raise RuntimeError(f"acquire({pos}) while MoE position {self.bound[0]} is bound (never released)")
        if pos not in self.held:
            self.misses += 1
            self._issue(pos, self._victim([pos] + self._upcoming()))
        slot = self.held.index(pos)
        handle = self.handles[slot]
        if self.cuda:
            handle.wait(torch.cuda.current_stream(self.device))
        else:
            handle.wait(timeout_s=self.timeout_s)
        self.bound = (pos, slot)
        if self.current and self.current[-1] != pos:
            self._end_streak()
        i = len(self.current)
        self.following = self.following and i < len(self.previous) and self.previous[i] == pos
        self.current.append(pos)
        return slot

    def release(self, pos: int) -> None:
        """Position pos's kernels are enqueued: its slot may be refilled after them; the predicted positions issued."""
        if self.bound is None or self.bound[0] != pos:
            raise RuntimeError(f"release({pos}) without acquire({pos}) (bound: {self.bound})")
        slot = self.bound[1]
        if self.cuda:
            ev = torch.cuda.Event()
            ev.record()
            self.consumed[slot] = ev
        self.bound = None
        self._fill(self._upcoming())

    def drain(self, deadline: float | None = None) -> None:
        """As Prefetcher.drain: every copy issued is done (host wait) before peers may unmap our buffers."""
        drain_handles([h for h in self.handles if h is not None], deadline, self.timeout_s)
