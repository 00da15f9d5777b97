"""Times peer pulls as DWDP issues them: each job is (destination, CopyPlan), run through the engine's CopyScheduler
(copy_scheduler.py: CUDA graph of the plan's copies on the destination's copy stream; on CPU its worker thread), all
jobs of a call at once, alone or beside a compute closure on the destination's compute stream.

The CopyTimer protocol is what the measurements (calibrate/peer.py, calibrate/interference.py) take, so the
multi-GPU logic is tested on CPU with a fake timer (tests/unit/test_calibrate.py). Every pull is checked bit-exact
after timing (sampled ops; a wrong copy raises, it is never timed into the file).

A one-source plan (pair, slice sweep, many-to-one) runs on the G-1 parallel copy chains a rank of a G-group runs
(`lanes`), so a sliced pull's efficiency is the engine's, not that of one chain.

Legend: rank r is device r of this process (cuda:r; on CPU, a logical rank whose buffers are host tensors).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Protocol, Sequence

import torch

from ..core.copy_plan import CopyOp, CopyPlan
from ..core.copy_scheduler import CopyScheduler

Job = tuple[int, CopyPlan]  # (destination rank, the plan it pulls; op.source_rank = source rank, tensor 0)
#: seconds one timed call may wait for its copies (a stuck copy raises, it never hangs the calibration)
WAIT_S = 120.0
#: host-side spin queued before every start event, so the jobs' start events line up (CUDA)
SPIN_S = 2e-3
#: ops of a plan compared after timing (first, last and evenly spaced between)
CHECK_OPS = 64


class CopyTimer(Protocol):
    """Times jobs run at once; both methods return per-job median milliseconds over the timer's repeats."""

    ranks: int

    def time_pulls(self, jobs: Sequence[Job]) -> list[float]: ...

    def time_with_compute(self, jobs: Sequence[Job], compute: Callable[[], None], calls: int) -> tuple[list[float], float]:
        """(per-job copy ms, ms of `calls` compute calls on the first job's destination), run at the same time."""
        ...

    def time_compute(self, rank: int, compute: Callable[[], None], calls: int) -> float: ...

    def release(self) -> None:
        """Free the pull buffers (the next call allocates what it needs)."""
        ...


def pull_plan(nbytes: int, source: int, slice_bytes: int, dest: int = 0) -> CopyPlan:
    """`nbytes` from `source`'s buffer to offset 0 of the destination's, in slices of `slice_bytes` (0: one op)."""
    step = slice_bytes or nbytes
    return CopyPlan(dest, tuple(CopyOp(source, 0, o, o, min(step, nbytes - o)) for o in range(0, nbytes, step)),
                    sliced=bool(slice_bytes))


def _need(plan: CopyPlan, src: bool) -> int:
    return max((op.src_offset if src else op.dst_offset) + op.nbytes for op in plan.ops)


class SchedulerCopyTimer:
    """CopyTimer on `ranks` devices of type `device` ("cuda" or "cpu"), median of `reps` after one warm-up."""

    def __init__(self, device: str, ranks: int, *, reps: int = 5):
        self.device, self.ranks, self.reps = device, ranks, reps
        self._src: dict[int, torch.Tensor] = {}
        self._dst: dict[int, torch.Tensor] = {}
        if device == "cuda":
            for i in range(ranks):  # a tiny copy each way makes torch enable peer access between the pair
                for j in range(ranks):
                    if i != j:
                        torch.ones(1, device=f"cuda:{i}").to(f"cuda:{j}")
            torch.cuda.synchronize()

    def _dev(self, r: int) -> torch.device:
        return torch.device("cuda", r) if self.device == "cuda" else torch.device("cpu")

    def _buf(self, table: dict, r: int, nbytes: int, fill: bool) -> torch.Tensor:
        have = table.get(r)
        if have is None or have.numel() < nbytes:
            table.pop(r, None)
            g = torch.Generator(device=self._dev(r)).manual_seed(r)
            t = (torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=self._dev(r), generator=g) if fill
                 else torch.empty(nbytes, dtype=torch.uint8, device=self._dev(r)))
            table[r] = have = t
        return have

    def _schedulers(self, jobs: Sequence[Job]) -> list[CopyScheduler]:
        for dest, plan in jobs:
            self._buf(self._dst, dest, _need(plan, False), False)
            for s in {op.source_rank for op in plan.ops}:
                self._buf(self._src, s, _need(plan, True), True)
        return [CopyScheduler(plan, src_buffer=lambda p, layer, t: self._src[p], dst_buffer=lambda s, t, d=dest: self._dst[d],
                              layers=[0], num_slots=1, device=self._dev(dest), timeout_s=WAIT_S, lanes=self.lanes(plan))
                for dest, plan in jobs]

    def lanes(self, plan: CopyPlan) -> int:
        """Graph chains of a plan: one per source (the engine's copy_lanes 0) when it pulls from several; a one-source
        plan on the G-1 chains a rank of this group runs, so its slices overlap their per-copy cost as the engine's do
        (at most one chain per op)."""
        if len({op.source_rank for op in plan.ops}) > 1:
            return 0
        return max(1, min(self.ranks - 1, len(plan.ops)))

    def _check(self, jobs: Sequence[Job]) -> None:
        for dest, plan in jobs:
            n = len(plan.ops)
            for i in sorted({0, n - 1, *range(0, n, max(1, n // CHECK_OPS))}):
                op = plan.ops[i]
                got = self._dst[dest][op.dst_offset:op.dst_offset + op.nbytes]
                want = self._src[op.source_rank][op.src_offset:op.src_offset + op.nbytes]
                if not torch.equal(got.cpu(), want.cpu()):
                    raise RuntimeError(f"peer pull into rank {dest} from rank {op.source_rank} is not bit-exact "
                                       f"(op {i}, {op.nbytes} bytes at {op.dst_offset}): not timed into the file")

    def _run(self, jobs: Sequence[Job], compute: Callable[[], None] | None, calls: int) -> tuple[list[float], float]:
        scheds = self._schedulers(jobs)
        cuda = self.device == "cuda"
        copy_ms: list[list[float]] = [[] for _ in jobs]
        comp_ms: list[float] = []
        try:
            for rep in range(self.reps + 1):  # rep 0 warms up (graph upload, first touch)
                if cuda:
                    for (dest, _), s in zip(jobs, scheds):
                        with torch.cuda.device(dest), torch.cuda.stream(s.stream):
                            torch.cuda._sleep(int(SPIN_S * 2e9))
                handles = [s.issue(0, 0) for s in scheds]
                if compute is not None:  # behind the same spin as the copies: both start together
                    comp_ms.append(self._compute_ms(jobs[0][0], compute, calls, spin=cuda))
                for k, h in enumerate(handles):
                    h.synchronize(timeout_s=WAIT_S)
                    if rep:
                        copy_ms[k].append(h.elapsed_ms())
            self._check(jobs)
        finally:
            for s in scheds:
                s.close()
        return [statistics.median(t) for t in copy_ms], (statistics.median(comp_ms[1:]) if comp_ms else 0.0)

    def _compute_ms(self, rank: int, compute: Callable[[], None], calls: int, spin: bool = False) -> float:
        """ms of `calls` compute calls on `rank`'s current stream (CUDA events; after a SPIN_S spin when `spin`)."""
        if self.device != "cuda":
            t = time.perf_counter()
            for _ in range(calls):
                compute()
            return (time.perf_counter() - t) * 1e3
        with torch.cuda.device(rank):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if spin:
                torch.cuda._sleep(int(SPIN_S * 2e9))
            a.record()
            for _ in range(calls):
                compute()
            b.record()
            b.synchronize()
            return a.elapsed_time(b)

    def time_pulls(self, jobs: Sequence[Job]) -> list[float]:
        return self._run(jobs, None, 0)[0]

    def time_with_compute(self, jobs: Sequence[Job], compute: Callable[[], None], calls: int) -> tuple[list[float], float]:
        return self._run(jobs, compute, calls)

    def time_compute(self, rank: int, compute: Callable[[], None], calls: int) -> float:
        compute()  # warm-up
        return statistics.median(self._compute_ms(rank, compute, calls) for _ in range(self.reps))

    def release(self) -> None:
        self._src.clear(), self._dst.clear()
        if self.device == "cuda":
            torch.cuda.empty_cache()
