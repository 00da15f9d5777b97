"""CUDA VMM transport: cuMemCreate'd buffers exported as POSIX fds (x86 H100/H200) or fabric handles (NVL72).

Per buffer: cuMemCreate(size rounded up to the allocation granularity, requested handle type) ->
cuMemAddressReserve + cuMemMap + cuMemSetAccess (local view) -> cuMemExportToShareableHandle.
fd: peers receive (pid, fd, size) through the group and duplicate the fd with pidfd_getfd (the
exporter keeps its fds open until a barrier says every peer has imported). fabric: the 64-byte
fabric handle itself crosses the group (needs an IMEX channel on multi-node NVLink systems).
Import: cuMemImportFromShareableHandle -> reserve VA -> map -> set access. Peers only read.
"""
from __future__ import annotations

import os

import torch

from ..cuda_utils import CudaError, check, cuda_bindings, tensor_from_ptr
from . import group_ops
from .base import PeerTransport, TransportError
from .pidfd import PidfdError, getfd_from, pid_namespace, same_pid_namespace

HANDLE_TYPES = ("fd", "fabric")


def choose_handle_type(machine: str, fabric_supported: bool, fd_supported: bool, requested: str = "auto") -> str:
    """Which VMM shareable-handle type to use (pure).

    machine: platform.machine() ("x86_64", "aarch64"); fabric_supported / fd_supported: the device
    attributes CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED / ..._POSIX_FILE_DESCRIPTOR_SUPPORTED.
    auto prefers fabric where the device supports it (NVL72-class, Grace/aarch64 hosts: the fabric
    handle reaches peers on other nodes of the NVLink domain), else fd.
    """
    if requested not in ("auto", *HANDLE_TYPES):
        raise TransportError(f"vmm handle type {requested!r}: expected auto, fd or fabric")
    if requested == "fabric" and not fabric_supported:
        raise TransportError(
            f"vmm_fabric: this device ({machine}) does not support CU_MEM_HANDLE_TYPE_FABRIC (needs an NVLink-fabric "
            "system such as GB200 NVL72 with IMEX channels); use transport: vmm_fd or ipc")
    if requested == "fd" and not fd_supported:
        raise TransportError(f"vmm_fd: this device ({machine}) does not support POSIX fd handles; use transport: ipc")
    if requested != "auto":
        return requested
    if fabric_supported and (machine in ("aarch64", "arm64") or not fd_supported):
        return "fabric"
    if fd_supported:
        return "fd"
    if fabric_supported:
        return "fabric"
    raise TransportError(f"vmm: the device ({machine}) supports neither POSIX fd nor fabric handles; use transport: ipc")


def round_up(nbytes: int, granularity: int) -> int:
    return max(granularity, -(-nbytes // granularity) * granularity)


def handle_type_watchable(handle_type: str) -> bool:
    """fd peers are processes of this node (their pid can be watched); fabric peers may be on other nodes."""
    return handle_type == "fd"


class VmmTransport(PeerTransport):
    keeps_peer_memory = True  # an imported handle keeps the peer's allocation (freed at its last release)
    def __init__(self, *, group, dwdp_rank: int, dwdp_size: int, device: torch.device, tag: str = "dwdp",
                 handle_type: str = "fd"):
        device = torch.device(device)
        if device.type != "cuda":
            raise TransportError(f"vmm_{handle_type} transport needs a cuda device, got {device}: use shm on cpu")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        super().__init__(group=group, dwdp_rank=dwdp_rank, dwdp_size=dwdp_size, device=device, tag=tag)
        if handle_type not in HANDLE_TYPES:
            raise TransportError(f"vmm handle_type {handle_type!r}: expected fd or fabric")
        self.handle_type = handle_type
        self.kind = f"vmm_{handle_type}"
        self._sizes: dict[str, int] = {}
        self._own: dict[str, tuple[int, int, int]] = {}  # key -> (alloc handle, va, padded size)
        self._mapped: list[tuple[int, int, int]] = []  # peers: (alloc handle, va, padded size)
        self._peers: dict[int, dict[str, torch.Tensor]] = {}
        self._opened = False

    # -- driver helpers ------------------------------------------------------------------------
    def _driver(self):
        _, driver = cuda_bindings()
        torch.cuda.set_device(self.device)  # makes the device's primary context current for driver calls
        torch.cuda.init()
        return driver

    def _enum(self):
        driver = self._driver()
        hts = driver.CUmemAllocationHandleType
        return driver, (hts.CU_MEM_HANDLE_TYPE_FABRIC if self.handle_type == "fabric"
                        else hts.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)

    def _prop(self):
        driver, ht = self._enum()
        prop = driver.CUmemAllocationProp()
        prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = self.device.index
        prop.requestedHandleTypes = ht
        return prop

    def _check_supported(self) -> None:
        import platform
        driver = self._driver()
        attr = driver.CUdevice_attribute
        dev = check(driver.cuDeviceGet(self.device.index), "cuDeviceGet")
        fab = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev),
                    "cuDeviceGetAttribute(FABRIC_SUPPORTED)")
        fd = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev),
                   "cuDeviceGetAttribute(POSIX_FILE_DESCRIPTOR_SUPPORTED)")
        choose_handle_type(platform.machine(), bool(fab), bool(fd), self.handle_type)

    def _map(self, handle, padded: int, writable_note: str) -> int:
        driver = self._driver()
        va = int(check(driver.cuMemAddressReserve(padded, 0, 0, 0), f"cuMemAddressReserve({padded}) {writable_note}"))
        try:
            check(driver.cuMemMap(va, padded, 0, handle, 0), f"cuMemMap {writable_note}")
            access = driver.CUmemAccessDesc()
            access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = self.device.index
            access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            check(driver.cuMemSetAccess(va, padded, [access], 1), f"cuMemSetAccess {writable_note}")
        except CudaError:
            driver.cuMemUnmap(va, padded)
            driver.cuMemAddressFree(va, padded)
            raise
        return va

    # -- interface -------------------------------------------------------------------------------
    def allocate(self, sizes: dict[str, int]) -> dict[str, torch.Tensor]:
        for key, nbytes in sizes.items():
            if not isinstance(nbytes, int) or nbytes < 0:
                raise TransportError(f"allocate: size of buffer {key!r} must be an int >= 0, got {nbytes!r}")
            if key in self._sizes:
                raise TransportError(f"allocate: buffer {key!r} already allocated on dwdp_rank {self.dwdp_rank}")
        self._check_supported()
        driver = self._driver()
        prop = self._prop()
        gran = int(check(driver.cuMemGetAllocationGranularity(
            prop, driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
            "cuMemGetAllocationGranularity"))
        for key, nbytes in sizes.items():
            padded = round_up(nbytes, gran)
            try:
                handle = check(driver.cuMemCreate(padded, prop, 0), f"cuMemCreate({padded}) for buffer {key!r}")
            except CudaError as e:
                raise TransportError(f"{self.kind}: {e} on {self.device}; try transport: ipc") from e
            try:
                va = self._map(handle, padded, f"for own buffer {key!r}")
            except CudaError as e:
                driver.cuMemRelease(handle)  # not in _own yet: close() would not free it
                raise TransportError(f"{self.kind}: {e} on {self.device}; try transport: ipc") from e
            self._own[key] = (handle, va, padded)
            self._sizes[key] = nbytes
            self.local[key] = tensor_from_ptr(va, (padded,), torch.uint8, self.device)[:nbytes]
        return {k: self.local[k] for k in sizes}

    def _export(self, handle) -> object:
        driver, ht = self._enum()
        out = check(driver.cuMemExportToShareableHandle(handle, ht, 0), f"cuMemExportToShareableHandle({self.kind})")
        if self.handle_type == "fabric":
            return bytes(bytearray(out.data))
        return int(out)

    def _import(self, peer: int, key: str, pid: int, exported) -> object:
        driver, ht = self._enum()
        if self.handle_type == "fabric":
            fh = driver.CUmemFabricHandle()
            fh.data = exported
            return check(driver.cuMemImportFromShareableHandle(fh.getPtr(), ht), "cuMemImportFromShareableHandle(fabric)")
        try:
            fd = getfd_from(pid, exported)
        except PidfdError as e:
            raise TransportError(f"{self.kind}: cannot receive peer {peer}'s buffer {key!r} (pid {pid}, fd {exported}): "
                                 f"{e}") from None
        try:
            return check(driver.cuMemImportFromShareableHandle(fd, ht), "cuMemImportFromShareableHandle(fd)")
        finally:
            os.close(fd)  # the imported allocation handle keeps the memory alive

    def open_peers(self) -> None:
        """Collective: export every own buffer, all_gather, import and map peers, barrier, close exported fds."""
        if self._opened:
            raise TransportError(f"{self.kind}: open_peers called twice")
        self._driver()
        torch.cuda.synchronize(self.device)
        exported = {key: (self._export(h), self._sizes[key], padded) for key, (h, _, padded) in self._own.items()}
        mine = {"rank": self.dwdp_rank, "pid": os.getpid(), "pidns": pid_namespace(), "buffers": exported}
        try:
            tables = group_ops.all_gather_object(self.group, mine)
            for peer, entry in enumerate(tables):
                if entry["rank"] != peer:
                    raise TransportError(f"{self.kind}: group member {peer} reports dwdp_rank {entry['rank']}: the group "
                                         "must list the DWDP ranks in dwdp_rank order")
                if peer == self.dwdp_rank:
                    continue
                if handle_type_watchable(self.handle_type) and same_pid_namespace(entry.get("pidns")):
                    self.peer_pids[peer] = entry["pid"]
                self._peers[peer] = {key: self._open_one(peer, key, entry["pid"], exp, nbytes, padded)
                                     for key, (exp, nbytes, padded) in entry["buffers"].items()}
        finally:
            # Peers must have duplicated our fds before we close them. A rank that failed above still
            # reaches this barrier, so the others do not hang; they fail on their own imports or later.
            group_ops.barrier(self.group)
            if self.handle_type == "fd":
                for exp, _, _ in exported.values():
                    os.close(exp)
        self._opened = True

    def _open_one(self, peer: int, key: str, pid: int, exported, nbytes: int, padded: int) -> torch.Tensor:
        driver = self._driver()
        handle = self._import(peer, key, pid, exported)
        try:
            va = self._map(handle, padded, f"for peer {peer}'s buffer {key!r}")
        except CudaError as e:
            driver.cuMemRelease(handle)
            raise TransportError(f"{self.kind}: mapping peer {peer}'s buffer {key!r} ({padded} bytes) failed: {e}; "
                                 "try transport: ipc") from e
        self._mapped.append((handle, va, padded))
        return tensor_from_ptr(va, (padded,), torch.uint8, self.device)[:nbytes]

    def allocation(self, key: str) -> tuple[object, int]:
        """(cuMem handle, padded bytes) of this rank's own buffer `key`, for mapping it again elsewhere
        (the composite view maps local experts next to the prefetch slot)."""
        try:
            handle, _, padded = self._own[key]
        except KeyError:
            raise TransportError(f"{self.kind}: no own buffer {key!r} on dwdp_rank {self.dwdp_rank}") from None
        return handle, padded

    def peer_buffer(self, peer: int, key: str) -> torch.Tensor:
        if peer == self.dwdp_rank:
            if key not in self.local:
                raise TransportError(f"{self.kind}: no local buffer {key!r} on dwdp_rank {peer}; have {sorted(self.local)}")
            return self.local[key]
        if not self._opened:
            raise TransportError(f"{self.kind}: peer_buffer before open_peers")
        if peer not in self._peers:
            raise TransportError(f"{self.kind}: peer {peer} is not in the group of size {self.dwdp_size}")
        try:
            return self._peers[peer][key]
        except KeyError:
            raise TransportError(f"{self.kind}: peer {peer} exported no buffer {key!r}; it has "
                                 f"{sorted(self._peers[peer])}") from None

    def close(self) -> None:
        """Unmap and release peers, then own buffers; never raises. Callers drain copy streams first."""
        if not (self._own or self._mapped):
            return
        driver = self._driver()
        torch.cuda.synchronize(self.device)
        self._peers.clear()
        self.local.clear()
        for handle, va, padded in [*self._mapped, *self._own.values()]:
            driver.cuMemUnmap(va, padded)
            driver.cuMemAddressFree(va, padded)
            driver.cuMemRelease(handle)
        self._mapped.clear()
        self._own.clear()
        self._sizes.clear()
        self._opened = False
