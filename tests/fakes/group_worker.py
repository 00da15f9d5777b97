"""One rank of a fake `trtllm-serve disaggregated_mpi_worker` world, for the DWDP group test.

Every rank first runs the startup split of disagg_utils.split_world_comm (TensorRT-LLM
`tensorrt_llm/llmapi/disagg_utils.py`, `split_world_comm`: each rank calls COMM_WORLD.Split(color=instance_idx)
once; context servers come first). Generation ranks then never call into DWDP and leave. Context ranks form the DWDP
group with GROUP_FN (module:function) and all-reduce their rank in it. Prints "ok <sum>" on success, then
"default_world <True|False>" (torch.distributed's default world initialised after the group formed) and, with
FAKE_LATER_INIT set, "later_init <sum>": the context ranks then initialise a default gloo world of their own (as
TensorRT-LLM's TorchDist would) and all-reduce in it while the DWDP group is still alive.
With TRTLLM_DWDP_RANK set (a rendezvous launch) there is no MPI world: the process is its own single-rank world.
"""
import importlib
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.transport import group_ops

ctx = int(os.environ["FAKE_CTX_RANKS"])
dwdp_size = int(os.environ["FAKE_DWDP_SIZE"])
if "TRTLLM_DWDP_RANK" in os.environ:
    rank = int(os.environ["TRTLLM_DWDP_RANK"])
else:
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    MPI.COMM_WORLD.Split(color=0 if rank < ctx else 1, key=rank)  # split_world_comm: every rank, once
    if rank >= ctx:
        print("generation rank: no DWDP calls")
        sys.exit(0)
mod, fn = os.environ.get("GROUP_FN", "dwdp_trtllm.integration.group:dwdp_process_group").split(":")
cfg = DwdpConfig(dwdp_size=dwdp_size, num_groups=ctx // dwdp_size)
res = getattr(importlib.import_module(mod), fn)(cfg, rank)
group = res[0] if isinstance(res, tuple) else res
t = torch.tensor([float(rank)])
group_ops.process_group(group).allreduce([t]).wait(timedelta(seconds=300))
print("ok", int(t.item()))
print("default_world", dist.is_initialized())
if os.environ.get("FAKE_LATER_INIT"):
    dist.init_process_group("gloo", init_method=f"file://{os.environ['FAKE_LATER_INIT']}", rank=rank, world_size=ctx,
                            timeout=timedelta(seconds=300))
    w = torch.tensor([float(rank)])
    dist.all_reduce(w)
    print("later_init", int(w.item()))
    t2 = torch.tensor([1.0])  # the DWDP group still works beside the new default world
    group_ops.process_group(group).allreduce([t2]).wait(timedelta(seconds=300))
    print("group_after", int(t2.item()))
if dist.is_initialized():
    dist.destroy_process_group()
