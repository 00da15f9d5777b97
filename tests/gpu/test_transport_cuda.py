"""CUDA transports across processes sharing one GPU: ipc and vmm_fd export/open, scheduled pulls bit-exact."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.copy_plan import ExpertLayout, build_copy_plan
from dwdp_trtllm.core.copy_scheduler import CopyScheduler
from dwdp_trtllm.core.cuda_utils import tensor_from_ptr
from dwdp_trtllm.core.placement import make_placement
from dwdp_trtllm.core.transport import make_transport

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(240),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")]

LAYERS = [0, 1, 2, 3]
TBYTES = ((1 << 20) + 4097, 555555, 1031)


def _bytes(seed: int, n: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=g)


def _worker(rank: int, G: int, store_path: str, kind: str) -> None:
    torch.cuda.set_device(0)  # every process shares the one GPU
    dist.init_process_group("gloo", store=dist.FileStore(store_path, G), rank=rank, world_size=G,
                            timeout=timedelta(seconds=120))
    group = dist.new_group(list(range(G)))
    try:
        layout = ExpertLayout(("w13", "w2", "scale"), TBYTES)
        placement = make_placement(DwdpConfig(dwdp_size=G, redundant_experts=1), 10)
        nloc = [len(x) for x in placement.local_experts]
        tp = make_transport(kind, group=group, dwdp_rank=rank, dwdp_size=G, device=torch.device("cuda", 0),
                            tag=f"gputest{os.getppid()}")
        bufs = tp.allocate({f"L{layer}.t{t}": nloc[rank] * nb for layer in LAYERS for t, nb in enumerate(TBYTES)})
        for layer in LAYERS:
            for t, nb in enumerate(TBYTES):
                bufs[f"L{layer}.t{t}"].copy_(_bytes(1000 * rank + 10 * layer + t, nloc[rank] * nb))
        del bufs
        tp.open_peers()
        for peer in range(G):
            assert torch.equal(tp.peer_buffer(peer, "L2.t1"), _bytes(1000 * peer + 21, nloc[peer] * TBYTES[1])), peer
        if kind == "ipc":
            _check_ipc_offset_export(rank, G, group)
        n = len(placement.fetch_experts(rank))
        slots = [[torch.full((n * nb,), 0xA5, dtype=torch.uint8, device="cuda") for nb in TBYTES] for _ in range(2)]
        compute = torch.cuda.current_stream()
        for method in ("batch", "per_op", "graph", "torch"):
            for sliced in (False, True):
                plan = build_copy_plan(placement, layout, rank, sliced=sliced, slice_bytes=(512 << 10) + 3)
                sched = CopyScheduler(plan, src_buffer=lambda p, layer, t: tp.peer_buffer(p, f"L{layer}.t{t}"),
                                      dst_buffer=lambda s, t: slots[s][t], layers=LAYERS, num_slots=2,
                                      device=torch.device("cuda", 0), method=method)
                handles = {LAYERS[i]: sched.issue(LAYERS[i], i % 2) for i in range(2)}
                for i, layer in enumerate(LAYERS):
                    handles[layer].wait(compute)
                    got = [slots[i % 2][t].clone() for t in range(3)]
                    done = torch.cuda.Event()
                    done.record(compute)
                    if i + 2 < len(LAYERS):
                        handles[LAYERS[i + 2]] = sched.issue(LAYERS[i + 2], i % 2, after=done)
                    for t, nb in enumerate(TBYTES):
                        want = torch.cat([_bytes(1000 * s + 10 * layer + t, nloc[s] * nb).view(-1, nb)
                                          [placement.local_experts[s].index(e)] for e, s in placement.sources[rank]])
                        assert torch.equal(got[t], want), (kind, method, sliced, rank, layer, t)
                sched.close()
        torch.cuda.synchronize()
        dist.barrier(group=group)  # nobody copies from our buffers any more
        tp.close()
        tp.close()
    finally:
        dist.destroy_process_group()


def _check_ipc_offset_export(rank: int, G: int, group) -> None:
    """A pointer inside a torch caching-allocator block: handle of the allocation + offset."""
    from dwdp_trtllm.core.transport.cuda_ipc import close_handle, export_handle, open_handle
    x = _bytes(777 + rank, 3 << 20)
    raw, offset = export_handle(x[12345:].data_ptr())
    table: list = [None] * G
    dist.all_gather_object(table, (raw, offset), group=group)
    peer = (rank + 1) % G
    base = open_handle(table[peer][0])
    view = tensor_from_ptr(base + table[peer][1], ((3 << 20) - 12345,), torch.uint8, torch.device("cuda", 0))
    assert torch.equal(view, _bytes(777 + peer, 3 << 20)[12345:])
    del view
    dist.barrier(group=group)
    close_handle(base)
    dist.barrier(group=group)
    del x


def _pidfd_reason() -> str:
    """'' when this process may pidfd_getfd a child's fd (what vmm_fd needs), else the precise reason."""
    from dwdp_trtllm.core.transport.pidfd import getfd_permitted
    code = "import os,sys; r,w=os.pipe(); print(r, flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ok, why = getfd_permitted(child.pid, int(child.stdout.readline()))
    finally:
        child.stdin.close()
        child.wait(10)
    return "" if ok else why


def _run(kind: str, G: int, tmp_path) -> None:
    ctx = mp.start_processes(_worker, args=(G, str(tmp_path / f"store_{kind}"), kind), nprocs=G, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + 200
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind} workers did not finish within 200 s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)


def test_ipc_three_processes_one_gpu(tmp_path):
    _run("ipc", 3, tmp_path)


def test_vmm_fd_three_processes_one_gpu(tmp_path):
    reason = _pidfd_reason()
    if reason:
        pytest.skip(f"vmm_fd needs pidfd_getfd between processes: {reason}")
    _run("vmm_fd", 3, tmp_path)
