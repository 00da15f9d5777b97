"""CopyScheduler on CPU (one process, peers simulated by local tensors): bit-exact, ordering, errors."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.copy_plan import ExpertLayout, build_copy_plan
from dwdp_trtllm.core.copy_scheduler import CopyScheduler
from dwdp_trtllm.core.placement import make_placement

pytestmark = pytest.mark.timeout(900)


def expert_bytes(layer: int, expert: int, t: int, nbytes: int) -> torch.Tensor:
    """Deterministic random content of one expert's tensor t (random data, never zeros)."""
    g = torch.Generator().manual_seed(1_000_003 * layer + 7919 * expert + t)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


class World:
    """Every rank's exported buffers of a group, in one process."""

    def __init__(self, G: int, E: int, layout: ExpertLayout, layers, redundant: int = 0):
        self.placement = make_placement(DwdpConfig(dwdp_size=G, redundant_experts=redundant), E)
        self.layout = layout
        self.bufs = {}
        for r in range(G):
            for layer in layers:
                for t, nb in enumerate(layout.tensor_bytes):
                    held = self.placement.local_experts[r]
                    self.bufs[(r, layer, t)] = torch.cat([expert_bytes(layer, e, t, nb) for e in held]) if held \
                        else torch.empty(0, dtype=torch.uint8)

    def slots(self, rank: int, num_slots: int):
        n = len(self.placement.fetch_experts(rank))
        return [[torch.full((n * nb,), 0xA5, dtype=torch.uint8) for nb in self.layout.tensor_bytes]
                for _ in range(num_slots)]

    def check_slot(self, rank: int, layer: int, slot_bufs) -> None:
        for t, nb in enumerate(self.layout.tensor_bytes):
            want = torch.cat([expert_bytes(layer, e, t, nb) for e in self.placement.fetch_experts(rank)])
            assert torch.equal(slot_bufs[t], want), f"rank {rank} layer {layer} tensor {t} differs"


@pytest.mark.parametrize("sliced,slice_bytes,max_inflight", [(False, 0, 0), (True, 300, 0), (True, 4096, 3)])
def test_cpu_scheduler_bit_exact_through_both_slots(sliced, slice_bytes, max_inflight):
    layout = ExpertLayout(("w13", "w2", "s"), (5000, 2501, 37))  # odd sizes, not multiples of any slice
    layers = [3, 4, 5, 6, 7]
    world = World(3, 10, layout, layers, redundant=1)
    rank = 1
    plan = build_copy_plan(world.placement, layout, rank, sliced=sliced, slice_bytes=slice_bytes or 2 << 20)
    if sliced:
        assert any(op.nbytes != slice_bytes for op in plan.ops) and max(op.nbytes for op in plan.ops) == slice_bytes
    slots = world.slots(rank, 2)
    with CopyScheduler(plan, src_buffer=lambda p, layer, t: world.bufs[(p, layer, t)],
                       dst_buffer=lambda s, t: slots[s][t], layers=layers, num_slots=2, device="cpu",
                       max_inflight_slices=max_inflight) as sched:
        assert sched.method == "torch"
        for i, layer in enumerate(layers):
            h = sched.issue(layer, i % 2)
            h.wait()
            assert h.nbytes == plan.total_bytes and h.elapsed_ms() >= 0
            world.check_slot(rank, layer, slots[i % 2])


def test_cpu_scheduler_waits_for_after_event_and_runs_in_order():
    layout = ExpertLayout(("w",), (4099,))
    world = World(2, 6, layout, [0, 1])
    plan = build_copy_plan(world.placement, layout, 0, sliced=True, slice_bytes=1024)
    slots = world.slots(0, 2)
    sched = CopyScheduler(plan, src_buffer=lambda p, layer, t: world.bufs[(p, layer, t)],
                          dst_buffer=lambda s, t: slots[s][t], layers=[0, 1], num_slots=2, device="cpu")
    try:
        gate = threading.Event()
        h0 = sched.issue(0, 0, after=gate)
        h1 = sched.issue(1, 1)  # queued behind h0: one worker, plan order
        time.sleep(0.2)
        assert not h0.done() and not h1.done()
        assert torch.all(slots[0][0] == 0xA5)  # the write-after-read guard held the copy back
        gate.set()
        h1.wait(timeout_s=30)
        assert h0.done() and h0.t_end <= h1.t_start
        world.check_slot(0, 0, slots[0])
        world.check_slot(0, 1, slots[1])
    finally:
        sched.close()


def test_cpu_scheduler_timeouts_and_worker_errors_surface():
    layout = ExpertLayout(("w",), (256,))
    world = World(2, 4, layout, [0])
    plan = build_copy_plan(world.placement, layout, 1, sliced=False)
    slots = world.slots(1, 1)
    sched = CopyScheduler(plan, src_buffer=lambda p, layer, t: world.bufs[(p, layer, t)],
                          dst_buffer=lambda s, t: slots[s][t], layers=[0], num_slots=1, device="cpu", timeout_s=0.3)
    try:
        h = sched.issue(0, 0, after=threading.Event())  # never set
        with pytest.raises(TimeoutError, match="layer 0 into slot 0"):
            h.wait(timeout_s=0.05)
        with pytest.raises(RuntimeError, match="not set after 0.3 s"):
            h.wait(timeout_s=120)  # the worker gave up on `after` and reports it here (at once; 120: load's margin)

        class Broken:
            def wait(self, timeout):
                raise OSError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            sched.issue(0, 0, after=Broken()).wait(timeout_s=10)
        sched.issue(0, 0).wait(timeout_s=10)  # the worker survives failed jobs
        world.check_slot(1, 0, slots[0])
        with pytest.raises(KeyError, match="no copy table for layer 9"):
            sched.issue(9, 0)
    finally:
        sched.close()
    sched.close()  # idempotent
    with pytest.raises(RuntimeError, match="after close"):
        sched.issue(0, 0)


def test_cpu_scheduler_rejects_bad_arguments():
    layout = ExpertLayout(("w",), (100,))
    world = World(2, 4, layout, [0])
    plan = build_copy_plan(world.placement, layout, 0, sliced=False)
    src = lambda p, layer, t: world.bufs[(p, layer, t)]  # noqa: E731
    good = torch.zeros(200, dtype=torch.uint8)
    kw = dict(src_buffer=src, layers=[0], device="cpu")
    with pytest.raises(ValueError, match="holds 150 bytes; the plan needs 200"):
        CopyScheduler(plan, dst_buffer=lambda s, t: good[:150], num_slots=1, **kw)
    with pytest.raises(ValueError, match="needs a cuda device"):
        CopyScheduler(plan, dst_buffer=lambda s, t: good, num_slots=1, method="batch", **kw)
    with pytest.raises(ValueError, match="expected one of"):
        CopyScheduler(plan, dst_buffer=lambda s, t: good, num_slots=1, method="dma", **kw)
    with pytest.raises(ValueError, match="num_slots"):
        CopyScheduler(plan, dst_buffer=lambda s, t: good, num_slots=0, **kw)
    with pytest.raises(ValueError, match="contiguous"):
        CopyScheduler(plan, dst_buffer=lambda s, t: torch.zeros(400, dtype=torch.uint8)[::2], num_slots=1, **kw)
