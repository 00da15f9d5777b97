"""The DWDP process group of a TensorRT-LLM context rank, formed by the context ranks alone.

Under `trtllm-serve disaggregated_mpi_worker` every process (context AND generation servers) shares
one MPI COMM_WORLD; `disagg_utils.split_world_comm` (stored id 56914744111) puts the context servers
first (global ranks 0..W-1, W = num_groups * dwdp_size). Generation ranks never call into DWDP, so
a collective over COMM_WORLD (MPI_Comm_split) made by the context ranks only never completes.
Like upstream `DwdpManager._init_dwdp_group` (tensorrt_llm/_torch/pyexecutor/dwdp.py @ 198af045 /
753d71cc, and `_create_dwdp_comm` in the VMM era, stored id 56230681187) we use
`COMM_WORLD.Create_group(COMM_WORLD.group.Incl(ranks))`: MPI_Comm_create_group is collective over
the members of the group only.

Over that communicator rank 0 publishes a TCP rendezvous for a gloo torch.distributed world of the
W context ranks (the transports exchange handles through torch.distributed); one sub-group per DWDP
group is then created on it. Every wait has a timeout.
"""
from __future__ import annotations

import socket
from datetime import timedelta


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def context_comm(comm_world, world_size: int):
    """MPI communicator of global ranks 0..world_size-1; only those ranks may call this."""
    rank = comm_world.Get_rank()
    if rank >= world_size:
        raise RuntimeError(f"global rank {rank} is not a DWDP context rank (0..{world_size - 1}); "
                           "generation ranks must not form the DWDP group")
    return comm_world.Create_group(comm_world.group.Incl(list(range(world_size))))


def dwdp_process_group(cfg, rank: int, *, comm_world=None, timeout_s: float = 300.0):
    """(torch.distributed group of this rank's DWDP group, run tag shared by the group).

    cfg: DwdpConfig (world_size = num_groups * dwdp_size context ranks). Initialises the default
    gloo world over the context ranks when torch.distributed is not initialised yet; an existing
    default world must be exactly the context ranks (anything larger would make new_group a
    collective that generation ranks never join).
    """
    import torch.distributed as dist
    if comm_world is None:
        from mpi4py import MPI  # TensorRT-LLM launches its workers with MPI
        comm_world = MPI.COMM_WORLD
    world = cfg.world_size
    comm = context_comm(comm_world, world)
    try:
        info = comm.bcast((socket.gethostname(), _free_port()) if comm.Get_rank() == 0 else None, root=0)
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"tcp://{info[0]}:{info[1]}", rank=comm.Get_rank(),
                                    world_size=world, timeout=timedelta(seconds=timeout_s))
        elif dist.get_world_size() != world:
            raise RuntimeError(f"torch.distributed is already initialised with {dist.get_world_size()} ranks; the "
                               f"DWDP groups need a world of exactly the {world} context ranks")
    finally:
        comm.Free()
    groups = [dist.new_group(list(range(g * cfg.dwdp_size, (g + 1) * cfg.dwdp_size)))
              for g in range(cfg.num_groups)]
    return groups[rank // cfg.dwdp_size], f"dwdp_trtllm_{info[1]}"


def destroy_group(group) -> str | None:
    """Destroy this rank's DWDP process group at the model's close, after the shutdown barrier (the group carries
    nothing more then: transport/close_barrier.py), as upstream's DwdpManager.cleanup frees its DWDP communicator
    (`self.dwdp_group.Free()`, tensorrt_llm/_torch/pyexecutor/dwdp.py, stored id 56230681187). Without it every model
    of a process leaves its gloo group (and its connections) behind. None: destroyed, or nothing to destroy (no group,
    torch.distributed gone); else why it could not be (the caller logs it)."""
    import torch.distributed as dist
    if group is None or not dist.is_initialized():
        return None
    try:
        dist.destroy_process_group(group)
    except Exception as e:  # noqa: BLE001 - said by the caller; shutdown goes on
        return f"{type(e).__name__}: {e}"
    return None
