"""The DWDP process group of a TensorRT-LLM context rank, formed by the context ranks alone.

Under `trtllm-serve disaggregated_mpi_worker` every process (context AND generation servers) shares
one MPI COMM_WORLD; `disagg_utils.split_world_comm` (disagg_utils.py @ 0228a7122341) puts the context servers
first (global ranks 0..W-1, W = num_groups * dwdp_size). Generation ranks never call into DWDP, so
a collective over COMM_WORLD (MPI_Comm_split) made by the context ranks only never completes.
Like upstream `DwdpManager._init_dwdp_group` (tensorrt_llm/_torch/pyexecutor/dwdp.py @ 198af045 /
753d71cc, and `_create_dwdp_comm` in the VMM era, stored id 56230681187) we use
`COMM_WORLD.Create_group(COMM_WORLD.group.Incl(ranks))`: MPI_Comm_create_group is collective over
the members of the group only.

The group is private (transport/group_ops.PrivateGroup): a gloo ProcessGroup made directly over a TCPStore, without
`torch.distributed.init_process_group`. TensorRT-LLM's workers keep an uninitialised default world, so a later
`init_process_group` (TorchDist, the Ray orchestrator) and every collective gated on `dist.is_initialized()` see
nothing of ours. Where the store is:
- MPI launch (`trtllm-serve disaggregated_mpi_worker`, mpirun): context rank 0 opens a store on a free port and
  publishes (host, port) over the context communicator above;
- rendezvous launch (one single-GPU `trtllm-serve` per context rank, no MPI world between them): the store is at
  TRTLLM_DWDP_MASTER_ADDR:TRTLLM_DWDP_MASTER_PORT, served by the process whose TRTLLM_DWDP_RANK is 0 (env.py
  `dwdp_rendezvous`; the variables NVIDIA's srt-slurm launcher sets for TensorRT-LLM's DWDP prefill workers,
  `src/srtctl/backends/trtllm.py`, `TRTLLMBackend.get_process_environment`).
Each model a process builds gets groups of its own (a key prefix per model, in build order, the same on every rank).
Every wait has a timeout.
"""
from __future__ import annotations

import atexit
import socket
import uuid
import weakref
from datetime import timedelta

from .. import env
from ..core.transport.group_ops import PrivateGroup, destroy

#: the rendezvous store of this process (its port is fixed by the launch: opened once, shared by later models)
_rendezvous: dict = {}
#: models whose groups this process made (the key prefix of the next one)
_models = [0]
#: private groups not destroyed yet: shut down at interpreter exit (a ProcessGroupGloo still alive when the
#: interpreter tears down aborts the process: "terminate called without an active exception")
_live: "weakref.WeakSet[PrivateGroup]" = weakref.WeakSet()


@atexit.register
def _shutdown_live_groups() -> None:
    for group in list(_live):
        destroy_group(group)


def context_comm(comm_world, world_size: int):
    """MPI communicator of global ranks 0..world_size-1; only those ranks may call this."""
    rank = comm_world.Get_rank()
    if rank >= world_size:
        raise RuntimeError(f"global rank {rank} is not a DWDP context rank (0..{world_size - 1}); "
                           "generation ranks must not form the DWDP group")
    return comm_world.Create_group(comm_world.group.Incl(list(range(world_size))))


def _mpi_store(world: int, comm_world, timeout: timedelta):
    """(store, context rank): rank 0 of the context communicator serves a store on a free port."""
    import torch.distributed as dist
    if comm_world is None:
        from mpi4py import MPI  # TensorRT-LLM launches its workers with MPI
        comm_world = MPI.COMM_WORLD
    comm = context_comm(comm_world, world)
    try:
        me = comm.Get_rank()
        store, where = None, None
        if me == 0:  # its failure is broadcast too: the other ranks would otherwise wait in bcast with no timeout
            try:
                store = dist.TCPStore(socket.gethostname(), 0, world, True, timeout=timeout, wait_for_workers=False)
                where = (socket.gethostname(), store.port)
            except Exception as e:  # noqa: BLE001 - re-raised below on every rank, named
                where = ("", f"{type(e).__name__}: {e}")
        host, port = comm.bcast(where, root=0)
        if not host:
            raise RuntimeError(f"the DWDP group's store could not be opened on context rank 0: {port}")
        if me != 0:
            store = dist.TCPStore(host, port, world, False, timeout=timeout)
    finally:
        comm.Free()
    # rank 0 serves the store: it goes on only once every context rank has connected (bounded by the store's
    # timeout), so it cannot finish and take the store down before a late rank reaches it
    if store.add("dwdp_joined", 1) == world:
        store.set("dwdp_all_joined", "1")
    if me == 0:
        store.wait(["dwdp_all_joined"], timeout)
    return store, me


def _rendezvous_store(rv: dict, world: int, timeout: timedelta):
    """The rendezvous store (opened on first use; rank 0 serves it at the launch's address and port)."""
    import torch.distributed as dist
    if rv["rank"] >= world:
        raise RuntimeError(f"{env.TRTLLM_DWDP_RANK}={rv['rank']} is not a DWDP context rank (0..{world - 1}: "
                           "num_groups * dwdp_size of the integration config)")
    key = (rv["addr"], rv["port"])
    if key not in _rendezvous:
        # rank 0 serves the store and waits (up to the timeout) until every context rank has connected: a rank that
        # went on alone could finish and take the store down before a slow peer reached it
        _rendezvous[key] = dist.TCPStore(rv["addr"], rv["port"], world, rv["rank"] == 0, timeout=timeout,
                                         wait_for_workers=True)
    return _rendezvous[key], rv["rank"]


def dwdp_process_group(cfg, rank: int, *, comm_world=None, timeout_s: float = 300.0):
    """(this rank's DWDP group as a group_ops.PrivateGroup, run tag shared by the group).

    cfg: DwdpConfig (world_size = num_groups * dwdp_size context ranks); rank: this process's context rank. The
    default torch.distributed world is neither initialised nor used. Rendezvous launch when TRTLLM_DWDP_RANK is
    set (env.dwdp_rendezvous), else over MPI (comm_world: COMM_WORLD unless given)."""
    import torch.distributed as dist
    world, G = cfg.world_size, cfg.dwdp_size
    timeout = timedelta(seconds=timeout_s)
    rv = env.dwdp_rendezvous()
    store, me = (_rendezvous_store(rv, world, timedelta(seconds=rv["timeout_s"])) if rv is not None
                 else _mpi_store(world, comm_world, timeout))
    if me != rank:
        raise RuntimeError(f"context rank {rank} of this process differs from its rank {me} in the DWDP rendezvous")
    prefix = f"dwdp_model{_models[0]}"
    _models[0] += 1
    if me == 0:  # one tag per model and run: names the group in logs and the transport's segments
        store.set(f"{prefix}/tag", f"dwdp_trtllm_{uuid.uuid4().hex[:12]}")
    tag = store.get(f"{prefix}/tag").decode()
    g = me // G
    pg = dist.ProcessGroupGloo(dist.PrefixStore(f"{prefix}/g{g}", store), me % G, G, timeout)
    group = PrivateGroup(pg, tuple(range(g * G, (g + 1) * G)), store)
    _live.add(group)
    return group, tag


def destroy_group(group) -> str | None:
    """Destroy this rank's DWDP process group at the model's close, after the shutdown barrier (the group carries
    nothing more then: transport/close_barrier.py), as upstream's DwdpManager.cleanup frees its DWDP communicator
    (`self.dwdp_group.Free()`, tensorrt_llm/_torch/pyexecutor/dwdp.py @ 753d71cc, `DwdpManager.cleanup`). Without it
    every model of a process leaves its gloo group (and its connections) behind. None: destroyed, or nothing to
    destroy; else why it could not be (the caller logs it)."""
    if group is None:
        return None
    try:
        destroy(group)
    except Exception as e:  # noqa: BLE001 - said by the caller; shutdown goes on
        return f"{type(e).__name__}: {e}"
    return None
