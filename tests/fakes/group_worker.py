"""One rank of a fake `trtllm-serve disaggregated_mpi_worker` world, for the DWDP group test.

Every rank first runs the startup split of disagg_utils.split_world_comm (stored id 56914744111: each rank
calls COMM_WORLD.Split(color=instance_idx) once; context servers come first). Generation ranks then never
call into DWDP and leave. Context ranks form the DWDP group with GROUP_FN (module:function) and all-reduce
their rank in it. Prints one line "ok <sum>" on success.
"""
import importlib
import os
import sys

import torch
import torch.distributed as dist
from mpi4py import MPI

from dwdp_trtllm.spec.config import DwdpConfig

rank, ctx = MPI.COMM_WORLD.Get_rank(), int(os.environ["FAKE_CTX_RANKS"])
dwdp_size = int(os.environ["FAKE_DWDP_SIZE"])
MPI.COMM_WORLD.Split(color=0 if rank < ctx else 1, key=rank)  # split_world_comm: every rank, once
if rank >= ctx:
    print("generation rank: no DWDP calls")
    sys.exit(0)
mod, fn = os.environ.get("GROUP_FN", "dwdp_trtllm.integration.group:dwdp_process_group").split(":")
cfg = DwdpConfig(dwdp_size=dwdp_size, num_groups=ctx // dwdp_size)
res = getattr(importlib.import_module(mod), fn)(cfg, rank)
group = res[0] if isinstance(res, tuple) else res
t = torch.tensor([float(rank)])
dist.all_reduce(t, group=group)
print("ok", int(t.item()))
dist.destroy_process_group()
