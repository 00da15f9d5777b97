"""CUDA IPC transport: cudaIpcGetMemHandle on each buffer's allocation, cudaIpcOpenMemHandle in peers.

A handle names a whole cudaMalloc allocation, not a pointer inside it, so each export carries
(64 handle bytes, offset of the buffer from its allocation base). Own buffers are cudaMalloc'd one
per key (base == ptr, and independent of torch's allocator settings: expandable segments cannot be
IPC-exported); `export_handle` also serves pointers from torch's caching allocator.

Several processes may share one GPU: opening another process's handle on the same device works
(DESIGN.md 5). A process cannot open its own handle, so peer_buffer(own rank) is the local buffer.
Peers only read peer buffers (CUDA IPC maps are read-write; nothing enforces it).
"""
from __future__ import annotations

import ctypes
import os

import torch

from ..cuda_utils import CudaError, check, cuda_bindings, tensor_from_ptr
from . import group_ops
from .base import PeerTransport, TransportError
from .pidfd import pid_namespace, same_pid_namespace

IPC_HANDLE_BYTES = 64


def _handle_bytes(handle) -> bytes:
    # The 64 bytes of cudaIpcMemHandle_t, read through its address: `.reserved` exists only in some
    # cuda.bindings versions (and as signed chars), getPtr() in all of them.
    return ctypes.string_at(handle.getPtr(), IPC_HANDLE_BYTES)


def _handle_from_bytes(raw: bytes):
    runtime, _ = cuda_bindings()
    if len(raw) != IPC_HANDLE_BYTES:
        raise TransportError(f"ipc: handle must be {IPC_HANDLE_BYTES} bytes, got {len(raw)}")
    handle = runtime.cudaIpcMemHandle_t()
    ctypes.memmove(handle.getPtr(), raw, IPC_HANDLE_BYTES)
    return handle


def allocation_base(ptr: int) -> tuple[int, int]:
    """(base address, size) of the allocation holding device pointer `ptr` (cuMemGetAddressRange)."""
    _, driver = cuda_bindings()
    base, size = check(driver.cuMemGetAddressRange(ptr), "cuMemGetAddressRange")
    return int(base), int(size)


def export_handle(ptr: int) -> tuple[bytes, int]:
    """(64 IPC handle bytes, offset of `ptr` from its allocation base) for a device pointer."""
    runtime, _ = cuda_bindings()
    base, _ = allocation_base(ptr)
    handle = check(runtime.cudaIpcGetMemHandle(base), "cudaIpcGetMemHandle")
    return _handle_bytes(handle), ptr - base


def open_handle(raw: bytes) -> int:
    """Map another process's allocation into this one; returns its base address (close with close_handle)."""
    runtime, _ = cuda_bindings()
    return int(check(runtime.cudaIpcOpenMemHandle(_handle_from_bytes(raw), runtime.cudaIpcMemLazyEnablePeerAccess),
                     "cudaIpcOpenMemHandle"))


def close_handle(base: int) -> None:
    runtime, _ = cuda_bindings()
    check(runtime.cudaIpcCloseMemHandle(base), "cudaIpcCloseMemHandle")


class CudaIpcTransport(PeerTransport):
    kind = "ipc"

    def __init__(self, *, group, dwdp_rank: int, dwdp_size: int, device: torch.device, tag: str = "dwdp"):
        device = torch.device(device)
        if device.type != "cuda":
            raise TransportError(f"ipc transport needs a cuda device, got {device}: use shm on cpu")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        super().__init__(group=group, dwdp_rank=dwdp_rank, dwdp_size=dwdp_size, device=device, tag=tag)
        self._own_ptrs: dict[str, int] = {}
        self._sizes: dict[str, int] = {}
        self._peers: dict[int, dict[str, torch.Tensor]] = {}
        self._opened_bases: list[int] = []
        self._opened = False

    def _runtime(self):
        runtime, _ = cuda_bindings()
        torch.cuda.set_device(self.device)  # torch creates/activates the primary context of this device
        # cuda.bindings links its own cudart: its current device is separate from torch's.
        check(runtime.cudaSetDevice(self.device.index), "cudaSetDevice")
        return runtime

    def allocate(self, sizes: dict[str, int]) -> dict[str, torch.Tensor]:
        runtime = self._runtime()
        for key, nbytes in sizes.items():
            if not isinstance(nbytes, int) or nbytes < 0:
                raise TransportError(f"allocate: size of buffer {key!r} must be an int >= 0, got {nbytes!r}")
            if key in self._sizes:
                raise TransportError(f"allocate: buffer {key!r} already allocated on dwdp_rank {self.dwdp_rank}")
        for key, nbytes in sizes.items():
            try:
                ptr = int(check(runtime.cudaMalloc(max(nbytes, 1)), f"cudaMalloc({nbytes}) for buffer {key!r}"))
            except CudaError as e:
                raise TransportError(f"ipc: {e} on {self.device}") from e
            self._own_ptrs[key], self._sizes[key] = ptr, nbytes
            self.local[key] = tensor_from_ptr(ptr, (max(nbytes, 1),), torch.uint8, self.device)[:nbytes]
        return {k: self.local[k] for k in sizes}

    def open_peers(self) -> None:
        """Collective: all_gather (rank, key -> (handle, offset, size)); open every peer's handles."""
        if self._opened:
            raise TransportError("ipc: open_peers called twice")
        self._runtime()
        torch.cuda.synchronize(self.device)  # peers may read as soon as they open: own fills must be done
        table = {key: (*export_handle(ptr), self._sizes[key]) for key, ptr in self._own_ptrs.items()}
        tables = group_ops.all_gather_object(self.group, {"rank": self.dwdp_rank, "pid": os.getpid(),
                                                          "pidns": pid_namespace(), "buffers": table})
        for peer, entry in enumerate(tables):
            if entry["rank"] != peer:
                raise TransportError(f"ipc: group member {peer} reports dwdp_rank {entry['rank']}: the group must list "
                                     "the DWDP ranks in dwdp_rank order")
            if peer == self.dwdp_rank:
                continue
            if same_pid_namespace(entry.get("pidns")):  # a pid of another namespace cannot be watched from here
                self.peer_pids[peer] = entry["pid"]
            views = {}
            for key, (raw, offset, nbytes) in entry["buffers"].items():
                try:
                    base = open_handle(raw)
                except CudaError as e:
                    raise TransportError(
                        f"ipc: opening peer {peer}'s buffer {key!r} failed on {self.device}: {e}. Peers must be on the "
                        "same host and see each other's GPU (same container/CUDA_VISIBLE_DEVICES superset, no MPS "
                        "isolation); try transport: vmm_fd") from e
                self._opened_bases.append(base)
                views[key] = tensor_from_ptr(base + offset, (max(nbytes, 1),), torch.uint8, self.device)[:nbytes]
            self._peers[peer] = views
        self._opened = True

    def peer_buffer(self, peer: int, key: str) -> torch.Tensor:
        if peer == self.dwdp_rank:
            if key not in self.local:
                raise TransportError(f"ipc: no local buffer {key!r} on dwdp_rank {peer}; have {sorted(self.local)}")
            return self.local[key]
        if not self._opened:
            raise TransportError("ipc: peer_buffer before open_peers")
        if peer not in self._peers:
            raise TransportError(f"ipc: peer {peer} is not in the group of size {self.dwdp_size}")
        try:
            return self._peers[peer][key]
        except KeyError:
            raise TransportError(f"ipc: peer {peer} exported no buffer {key!r}; it has {sorted(self._peers[peer])}") from None

    def close(self) -> None:
        """Close peer maps and free own buffers. Collective by convention: a rank must not free buffers a
        peer is still copying from, so callers synchronize their copy streams and barrier first."""
        if not (self._own_ptrs or self._opened_bases):
            return
        runtime = self._runtime()
        torch.cuda.synchronize(self.device)
        self._peers.clear()
        self.local.clear()
        for base in self._opened_bases:
            try:
                close_handle(base)
            except CudaError:
                pass  # close never raises; the map dies with the process
        self._opened_bases.clear()
        for ptr in self._own_ptrs.values():
            runtime.cudaFree(ptr)
        self._own_ptrs.clear()
        self._sizes.clear()
        self._opened = False
