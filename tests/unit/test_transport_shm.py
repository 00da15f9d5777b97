"""Shared-memory transport across real processes: export, open peers, scheduled pulls bit-exact, clean close."""
from __future__ import annotations

import glob
import os
import threading
import time
import uuid
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.copy_plan import ExpertLayout, build_copy_plan
from dwdp_trtllm.core.copy_scheduler import CopyScheduler
from dwdp_trtllm.core.placement import make_placement
from dwdp_trtllm.core.transport import TransportError, make_transport
from dwdp_trtllm.core.transport.shm import ShmTransport, segment_name

pytestmark = pytest.mark.timeout(900)

# (num_experts, redundant, tensor bytes, sliced, slice_bytes, max_inflight_slices)
SCENARIOS = [
    (7, 0, (3001, 1500, 17), False, 0, 0),
    (7, 1, (3001, 1500, 17), True, 1000, 0),   # slices do not divide the tensor bytes
    (9, 2, (4096, 333), True, 256, 5),
]
LAYERS = [0, 1, 2, 3]


def _rank_bytes(rank: int, layer: int, t: int, nbytes: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(10_007 * rank + 101 * layer + t)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def _worker(rank: int, G: int, store_path: str, tag: str) -> None:
    store = dist.FileStore(store_path, G)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=G, timeout=timedelta(seconds=300))
    group = dist.new_group(list(range(G)))
    try:
        for si, (E, red, tbytes, sliced, slice_bytes, inflight) in enumerate(SCENARIOS):
            layout = ExpertLayout(tuple(f"t{i}" for i in range(len(tbytes))), tbytes)
            placement = make_placement(DwdpConfig(dwdp_size=G, redundant_experts=red), E)
            held = placement.local_experts[rank]
            tp = make_transport("auto", group=group, dwdp_rank=rank, dwdp_size=G, device=torch.device("cpu"),
                                tag=f"{tag}s{si}")
            assert isinstance(tp, ShmTransport)
            sizes = {f"L{layer}.{n}": len(held) * nb for layer in LAYERS for n, nb in zip(layout.tensor_names, tbytes)}
            bufs = tp.allocate(sizes)
            for layer in LAYERS:  # random bytes, seeded per rank (replicas differ: a wrong source is caught)
                for t, (n, nb) in enumerate(zip(layout.tensor_names, tbytes)):
                    bufs[f"L{layer}.{n}"].copy_(_rank_bytes(rank, layer, t, len(held) * nb))
            del bufs
            tp.open_peers()
            # every peer has mapped our segments: their names are gone (a kill from now on leaves nothing)
            assert not glob.glob(f"/dev/shm/{tag}s{si}_{rank}_*")
            for peer in range(G):  # every peer's view is that peer's bytes
                view = tp.peer_buffer(peer, "L1.t0")
                assert torch.equal(view, _rank_bytes(peer, 1, 0, len(placement.local_experts[peer]) * tbytes[0]))
            plan = build_copy_plan(placement, layout, rank, sliced=sliced, slice_bytes=slice_bytes or 2 << 20)
            n_fetch = len(placement.fetch_experts(rank))
            slots = [[torch.full((n_fetch * nb,), 0x5A, dtype=torch.uint8) for nb in tbytes] for _ in range(2)]
            sched = CopyScheduler(plan, src_buffer=lambda p, layer, t: tp.peer_buffer(p, f"L{layer}.{layout.tensor_names[t]}"),
                                  dst_buffer=lambda s, t: slots[s][t], layers=LAYERS, num_slots=2, device="cpu",
                                  max_inflight_slices=inflight, timeout_s=60)
            # Slot ring: layer i+2 is issued into layer i's slot while layer i is still being read,
            # guarded by the event that marks the end of that read (write-after-read).
            released = {layer: threading.Event() for layer in LAYERS}
            handles = {LAYERS[i]: sched.issue(LAYERS[i], i % 2) for i in range(2)}
            for i, layer in enumerate(LAYERS):
                slot = i % 2
                handles[layer].wait(timeout_s=60)
                if i + 2 < len(LAYERS):
                    handles[LAYERS[i + 2]] = sched.issue(LAYERS[i + 2], slot, after=released[layer])
                for t, nb in enumerate(tbytes):  # reference: each fetched expert from its chosen source
                    want = [_rank_bytes(s, layer, t, len(placement.local_experts[s]) * nb)
                            .view(-1, nb)[placement.local_experts[s].index(e)] for e, s in placement.sources[rank]]
                    assert torch.equal(slots[slot][t], torch.cat(want)), (si, rank, layer, t)
                released[layer].set()
            sched.close()
            dist.barrier(group=group)  # nobody reads our segments any more
            tp.close()
            tp.close()  # idempotent
            assert not glob.glob(f"/dev/shm/{tag}s{si}_{rank}_*")
    finally:
        dist.destroy_process_group()


def test_shm_transport_and_scheduler_bit_exact_three_processes(tmp_path):
    G, tag = 3, f"dwdptest{uuid.uuid4().hex[:10]}"
    ctx = mp.start_processes(_worker, args=(G, str(tmp_path / "store"), tag), nprocs=G, join=False, start_method="spawn")
    deadline = time.monotonic() + 600  # a hang bound: three spawned torch processes take minutes on a loaded machine
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError("shm transport workers did not finish within 600 s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)
        leftovers = glob.glob(f"/dev/shm/{tag}*")
        for f in leftovers:
            os.unlink(f)
    assert not leftovers, f"segments left behind: {leftovers}"


def test_shm_allocate_errors_and_leftover_detection():
    tag = f"dwdptest{uuid.uuid4().hex[:10]}"
    tp = ShmTransport(group=None, dwdp_rank=0, dwdp_size=2, device=torch.device("cpu"), tag=tag)
    try:
        bufs = tp.allocate({"L0.w13": 1000, "L0.empty": 0})
        assert bufs["L0.w13"].numel() == 1000 and bufs["L0.empty"].numel() == 0
        assert os.path.exists(f"/dev/shm/{segment_name(tag, 0, 'L0.w13')}")
        with pytest.raises(TransportError, match="already allocated"):
            tp.allocate({"L0.w13": 10})
        with pytest.raises(TransportError, match="collides"):
            tp.allocate({"a/b": 10, "a_b": 10})
        with pytest.raises(TransportError, match="int >= 0"):
            tp.allocate({"x": -1})
        with pytest.raises(TransportError, match="before open_peers"):
            tp.peer_buffer(1, "L0.w13")
        assert tp.peer_buffer(0, "L0.w13").data_ptr() == bufs["L0.w13"].data_ptr()
        del bufs
        other = ShmTransport(group=None, dwdp_rank=0, dwdp_size=2, device=torch.device("cpu"), tag=tag)
        with pytest.raises(TransportError, match="already exists.*crashed run"):
            other.allocate({"L0.w13": 1000})  # a leftover segment of the same name is never reused silently
    finally:
        tp.close()
    assert not glob.glob(f"/dev/shm/{tag}*")
    with pytest.raises(TransportError, match="runs on cpu"):
        ShmTransport(group=None, dwdp_rank=0, dwdp_size=1, device=torch.device("cuda", 0))
