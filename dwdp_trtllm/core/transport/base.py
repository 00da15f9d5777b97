"""Transport interface: allocate exportable buffers, exchange handles once, open peers, close.

Lifecycle (collective calls marked *; every rank of the DWDP group calls them in the same order):
    t = make_transport(kind, group=..., dwdp_rank=..., dwdp_size=..., device=...)   # select.py
    bufs = t.allocate({"L3.w13": nbytes, ...})   # uint8 1-D tensors this rank fills and exports
    t.open_peers()                               # * exchange handles through the group, map peers
    view = t.peer_buffer(peer, "L3.w13")         # uint8 1-D read-only view of peer's buffer (this device)
    t.close()                                    # * unmap/close peers, free own buffers
The group is a torch.distributed ProcessGroup over exactly the DWDP group's ranks, in dwdp_rank order.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class TransportError(RuntimeError):
    """Opening or exporting peer memory failed; the message names peer, buffer, backend and a remedy."""


class PeerTransport(ABC):
    kind: str = "?"
    #: whether what open_peers mapped stays readable after the peer's process exits (transport/liveness.py)
    keeps_peer_memory: bool = False

    def __init__(self, *, group, dwdp_rank: int, dwdp_size: int, device: torch.device, tag: str = "dwdp"):
        self.group, self.dwdp_rank, self.dwdp_size, self.device, self.tag = group, dwdp_rank, dwdp_size, device, tag
        self.local: dict[str, torch.Tensor] = {}
        #: pid of every peer's process (dwdp rank -> pid), filled by open_peers; empty where pids are not exchanged
        self.peer_pids: dict[int, int] = {}

    @abstractmethod
    def allocate(self, sizes: dict[str, int]) -> dict[str, torch.Tensor]:
        """Allocate this rank's exportable buffers (uint8, 1-D, `sizes[key]` bytes each) and return them."""

    @abstractmethod
    def open_peers(self) -> None:
        """Collective: exchange handles with every peer in the group and map their buffers."""

    @abstractmethod
    def peer_buffer(self, peer: int, key: str) -> torch.Tensor:
        """uint8 1-D view of dwdp_rank `peer`'s buffer `key` (the local buffer when peer == dwdp_rank)."""

    @abstractmethod
    def close(self) -> None:
        """Unmap peers and free own buffers; idempotent, never raises for already-closed state."""

    def __enter__(self) -> "PeerTransport":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def resolve_kind(kind: str, device: torch.device) -> str:
    """auto -> shm on CPU, ipc on CUDA; rejects CPU/CUDA mismatches."""
    if kind == "auto":
        return "shm" if device.type == "cpu" else "ipc"
    if (kind == "shm") != (device.type == "cpu"):
        raise TransportError(f"transport {kind!r} does not run on device {device}: use shm on cpu, ipc/vmm_fd/vmm_fabric on cuda")
    return kind
