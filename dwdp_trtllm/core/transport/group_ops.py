"""The DWDP group's few collectives, through the ProcessGroup object itself (ranks are group ranks).

A transport exchanges handles (all_gather_object, barrier) and the close barrier sends one token per peer. These go
through the group's own methods (`ProcessGroup.allgather`, `send`, `recv`, `barrier`), not torch.distributed's
module functions, because those need the default world (`dist.get_rank(group)` reads it). So one code path serves:
- a group registered with torch.distributed (the embedded engine: `dist.new_group` on its own gloo world; None
  means that default world);
- a `PrivateGroup` (the TensorRT-LLM host, integration/group.py): a `ProcessGroupGloo` over its own store, made
  without `init_process_group`, so TensorRT-LLM's processes keep an uninitialised default world (a later
  `init_process_group` by TensorRT-LLM, or any code gated on `dist.is_initialized()`, sees nothing of ours).
Every wait is bounded: by the timeout the caller gives, HANDSHAKE_TIMEOUT_S for the transports' handle exchange.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


#: seconds a transport's handle exchange (all_gather_object, barrier at open_peers) waits for its peers
HANDSHAKE_TIMEOUT_S = 300.0


@dataclass(eq=False)
class PrivateGroup:
    """A gloo group outside torch.distributed's registry. pg: the ProcessGroupGloo (group ranks 0..size-1);
    ranks: the members' global ranks in group-rank order (for messages); store: kept alive with the group (the
    rendezvous master serves from it). closed: destroy() ran (the group carries nothing more; pg is None then)."""

    pg: dist.ProcessGroup | None
    ranks: tuple[int, ...]
    store: object
    closed: bool = False


def process_group(group) -> dist.ProcessGroup | None:
    """The ProcessGroup whose methods run the collectives; None when there is none (no group, or a closed private
    group, or group None without an initialised default world)."""
    if isinstance(group, PrivateGroup):
        return None if group.closed else group.pg
    if group is None:
        return dist.group.WORLD if dist.is_initialized() else None
    return group if dist.is_initialized() else None  # a registered group dies with its default world


def members(group) -> tuple[int, ...]:
    """Global ranks of the group's members in group-rank order (for messages)."""
    if isinstance(group, PrivateGroup):
        return group.ranks
    pg = process_group(group)
    return () if pg is None else tuple(dist.get_process_group_ranks(pg))


def all_gather_object(group, obj, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> list:
    """Every member's `obj` (picklable), in group-rank order; waits at most timeout_s for each of its two steps."""
    pg = process_group(group)
    if pg is None:
        raise RuntimeError("all_gather_object: no process group (torch.distributed torn down, or the group closed)")
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    n = pg.size()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    pg.allgather([sizes], [torch.tensor([data.numel()], dtype=torch.int64)]).wait(timedelta(seconds=timeout_s))
    width = int(max(s.item() for s in sizes))
    padded = torch.zeros(width, dtype=torch.uint8)
    padded[:data.numel()] = data
    got = [torch.empty(width, dtype=torch.uint8) for _ in range(n)]
    pg.allgather([got], [padded]).wait(timedelta(seconds=timeout_s))
    return [pickle.loads(g[:int(s.item())].numpy().tobytes()) for g, s in zip(got, sizes)]


def barrier(group, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:
    """Every member reached this call (at most timeout_s)."""
    pg = process_group(group)
    if pg is None:
        raise RuntimeError("barrier: no process group (torch.distributed torn down, or the group closed)")
    pg.barrier().wait(timedelta(seconds=timeout_s))


def destroy(group) -> None:
    """Release a private group (its gloo connections; the store goes with the last reference). A registered group is
    destroyed through torch.distributed."""
    if isinstance(group, PrivateGroup):
        if not group.closed:
            group.closed = True
            group.pg.shutdown()
            # shutdown() leaves gloo's worker threads running; they are joined only when the ProcessGroupGloo is freed
            # (its destructor releases the GIL). Freed here, while Python is alive: a worker still dropping the last
            # reference to a collective's tensors once finalisation has begun is killed taking the GIL, and the
            # process aborts ("terminate called without an active exception")
            group.pg = None
        return
    if group is not None and dist.is_initialized():
        dist.destroy_process_group(group)
