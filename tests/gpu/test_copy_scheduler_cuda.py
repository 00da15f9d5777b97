"""CopyScheduler on one CUDA device (peers stood in by local buffers): methods bit-exact, stream ordering."""
from __future__ import annotations

import pytest
import torch

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.copy_plan import ExpertLayout, build_copy_plan
from dwdp_trtllm.core.copy_scheduler import CopyScheduler, resolve_method
from dwdp_trtllm.core.placement import make_placement

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(180),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")]


def _bytes(seed: int, n: int, device) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device=device, generator=g)


class World:
    def __init__(self, G, E, layout, layers, redundant, device):
        self.placement = make_placement(DwdpConfig(dwdp_size=G, redundant_experts=redundant), E)
        self.layout, self.device = layout, device
        self.bufs = {(r, layer, t): _bytes(1009 * r + 31 * layer + t, len(self.placement.local_experts[r]) * nb, device)
                     for r in range(G) for layer in layers for t, nb in enumerate(layout.tensor_bytes)}

    def expected(self, rank, layer, t):
        nb = self.layout.tensor_bytes[t]
        return torch.cat([self.bufs[(s, layer, t)].view(-1, nb)[self.placement.local_experts[s].index(e)]
                          for e, s in self.placement.sources[rank]])


@pytest.mark.parametrize("method", ["per_op", "batch", "torch", "graph", "graph5"])
@pytest.mark.parametrize("sliced,slice_bytes,inflight", [(False, 0, 0), (True, (256 << 10) + 4, 0), (True, 65536, 7)])
def test_cuda_scheduler_bit_exact(method, sliced, slice_bytes, inflight):
    lanes = 5 if method == "graph5" else 0  # graph5: more parallel chains than sources
    method = method.rstrip("5")
    dev = torch.device("cuda", torch.cuda.current_device())
    layout = ExpertLayout(("w13", "w2", "scale"), ((1 << 20) + 12345, 700001, 4099))
    layers = [0, 1, 2, 3, 4]
    world = World(4, 13, layout, layers, 1, dev)
    rank = 2
    plan = build_copy_plan(world.placement, layout, rank, sliced=sliced, slice_bytes=slice_bytes or 2 << 20)
    n = len(world.placement.fetch_experts(rank))
    slots = [[torch.full((n * nb,), 0xA5, dtype=torch.uint8, device=dev) for nb in layout.tensor_bytes] for _ in range(2)]
    sched = CopyScheduler(plan, src_buffer=lambda p, layer, t: world.bufs[(p, layer, t)],
                          dst_buffer=lambda s, t: slots[s][t], layers=layers, num_slots=2, device=dev, method=method,
                          max_inflight_slices=inflight, lanes=lanes)
    compute = torch.cuda.current_stream(dev)
    try:
        assert sched.method == method
        if method == "graph":
            assert sched.lanes == (lanes or len(plan.bytes_per_source()))
        released = {}
        handles = {layers[i]: sched.issue(layers[i], i % 2) for i in range(2)}
        for i, layer in enumerate(layers):
            slot = i % 2
            handles[layer].wait(compute)  # compute stream waits on the copy event, no host sync
            got = [slots[slot][t].clone() for t in range(3)]  # the "GEMM" reading the slot
            released[layer] = torch.cuda.Event()
            released[layer].record(compute)
            if i + 2 < len(layers):
                handles[layers[i + 2]] = sched.issue(layers[i + 2], slot, after=released[layer])
            for t in range(3):
                assert torch.equal(got[t], world.expected(rank, layer, t)), (method, layer, t)
        for h in handles.values():
            h.synchronize(timeout_s=30)
            assert h.elapsed_ms() > 0 and h.nbytes == plan.total_bytes
    finally:
        sched.close()


def test_after_event_orders_copy_behind_compute_and_timeout():
    dev = torch.device("cuda", torch.cuda.current_device())
    layout = ExpertLayout(("w",), (3 << 20,))
    world = World(2, 4, layout, [0], 0, dev)
    plan = build_copy_plan(world.placement, layout, 0, sliced=True, slice_bytes=1 << 20)
    slot = torch.empty(2 * (3 << 20), dtype=torch.uint8, device=dev)
    sched = CopyScheduler(plan, src_buffer=lambda p, layer, t: world.bufs[(p, layer, t)],
                          dst_buffer=lambda s, t: slot, layers=[0], num_slots=1, device=dev)
    compute = torch.cuda.current_stream(dev)
    try:
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU cycles on the compute stream
        slot.fill_(7)  # the last "reader" of the slot still owns it; the copy must land after this
        after = torch.cuda.Event()
        after.record(compute)
        h = sched.issue(0, 0, after=after)
        with pytest.raises(TimeoutError, match="layer 0 into slot 0"):
            h.synchronize(timeout_s=0.001)
        h.synchronize(timeout_s=30)
        assert torch.equal(slot, world.expected(0, 0, 0))
    finally:
        sched.close()


def test_auto_picks_graph_on_cuda():
    from dwdp_trtllm.core.memcpy import batch_memcpy_available
    dev = torch.device("cuda", torch.cuda.current_device())
    assert resolve_method("auto", dev) == "graph"
    assert batch_memcpy_available(), "driver lacks cuMemcpyBatchAsync (needs >= 570 / CUDA 12.8)"
