"""CUDA VMM composite view: physical allocations (local experts, prefetch slot) mapped back to back into one
reserved virtual-address range, so a stock grouped GEMM (torch._grouped_mm / torch._scaled_grouped_mm) sees one
[E, N, K] tensor without copying.

Legend: E experts, N out, K in. Granularity: cuMemGetAllocationGranularity(MINIMUM) of the device (2 MiB on H200).
Every chunk's size must be a multiple of it (one DeepSeek-V3 w13 expert in bf16 is 56 MiB = 28 x 2 MiB); other
sizes are refused with an error naming the size and the granularity, never padded silently. cuMemMap maps whole
physical allocations only (offset 0; a non-zero offset gave CUDA_ERROR_NOT_SUPPORTED on the H200, driver 580,
2026-12-02), so a chunk is one whole VmmAllocation: to map any subset of experts, allocate each expert (or each run
of experts that always travels together) as its own VmmAllocation.
Mapping and unmapping are host calls (not stream-ordered): build views at setup, not per forward. close() must
only run once no stream still reads the view (callers synchronise or hold an event first).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..byte_units import fmt_bytes
from .cuda_utils import check, cuda_bindings, tensor_from_ptr


def _driver():
    _, drv = cuda_bindings()
    check(drv.cuInit(0), "cuInit")
    return drv


def _prop(drv, device: int):
    prop = drv.CUmemAllocationProp()
    prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    return prop


def granularity(device: int) -> int:
    """Minimum VMM granularity of `device` in bytes."""
    drv = _driver()
    return int(check(drv.cuMemGetAllocationGranularity(
        _prop(drv, device), drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity"))


def check_chunks(chunks: Sequence[tuple[int, int]], gran: int, alloc_sizes: Sequence[int]) -> int:
    """Validate (offset_bytes, nbytes) chunks against granularity and their allocation sizes; returns total bytes."""
    total = 0
    for i, ((off, n), size) in enumerate(zip(chunks, alloc_sizes)):
        if n <= 0 or n % gran:
            raise ValueError(f"CompositeView: chunk {i} size {n} bytes is not a positive multiple of the VMM "
                             f"granularity {gran} bytes (expert sizes must be multiples of {fmt_bytes(gran, 'MiB', digits=None)})")
        if off != 0 or n != size:
            raise ValueError(f"CompositeView: chunk {i} maps bytes [{off}, {off + n}) of a {size}-byte allocation; "
                             "cuMemMap maps whole allocations only (offset 0, nbytes = allocation size): allocate "
                             "each expert (or run of experts) as its own VmmAllocation")
        total += n
    return total


def _set_access(drv, ptr: int, nbytes: int, device: int) -> None:
    desc = drv.CUmemAccessDesc()
    desc.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = device
    desc.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    check(drv.cuMemSetAccess(ptr, nbytes, [desc], 1), "cuMemSetAccess")


class VmmAllocation:
    """One physical allocation (cuMemCreate), also mapped on its own VA range so it can be used as a tensor."""

    def __init__(self, handle, ptr: int, nbytes: int, device: int):
        self.handle, self.ptr, self.nbytes, self.device = handle, ptr, nbytes, device
        self._closed = False

    @classmethod
    def create(cls, nbytes: int, device: int | torch.device = 0) -> "VmmAllocation":
        """Allocate >= nbytes (rounded up to the granularity) of device memory."""
        device = torch.device(device).index if not isinstance(device, int) else device
        device = torch.cuda.current_device() if device is None else device
        if nbytes <= 0:
            raise ValueError(f"VmmAllocation.create: nbytes must be > 0, got {nbytes}")
        torch.cuda.init()
        drv = _driver()
        gran = granularity(device)
        size = -(-nbytes // gran) * gran
        handle = check(drv.cuMemCreate(size, _prop(drv, device), 0), f"cuMemCreate({size} bytes)")
        try:
            ptr = int(check(drv.cuMemAddressReserve(size, gran, 0, 0), "cuMemAddressReserve"))
            check(drv.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap")
            _set_access(drv, ptr, size, device)
        except Exception:
            drv.cuMemRelease(handle)
            raise
        return cls(handle, ptr, size, device)

    def tensor(self, shape: Sequence[int], dtype: torch.dtype, offset_bytes: int = 0) -> torch.Tensor:
        """A tensor view (no copy, no ownership) of `shape` elements at `offset_bytes`."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        n = itemsize
        for s in shape:
            n *= s
        if offset_bytes < 0 or offset_bytes + n > self.nbytes:
            raise ValueError(f"VmmAllocation.tensor: {n} bytes at offset {offset_bytes} exceed {self.nbytes} bytes")
        return tensor_from_ptr(self.ptr + offset_bytes, tuple(shape), dtype, self.device)

    def close(self) -> None:
        if self._closed:
            return
        drv = _driver()
        check(drv.cuMemUnmap(self.ptr, self.nbytes), "cuMemUnmap")
        check(drv.cuMemAddressFree(self.ptr, self.nbytes), "cuMemAddressFree")
        check(drv.cuMemRelease(self.handle), "cuMemRelease")
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CompositeView:
    """Chunks [(allocation, offset_bytes, nbytes), ...] mapped back to back into one VA range."""

    def __init__(self, chunks: Sequence[tuple[VmmAllocation, int, int]]):
        if not chunks:
            raise ValueError("CompositeView: chunks must not be empty")
        devices = {c[0].device for c in chunks}
        if len(devices) != 1:
            raise ValueError(f"CompositeView: all chunks must be on one device, got {sorted(devices)}")
        self.device = devices.pop()
        drv = _driver()
        gran = granularity(self.device)
        self.nbytes = check_chunks([(o, n) for _, o, n in chunks], gran, [a.nbytes for a, _, _ in chunks])
        self._allocs = [a for a, _, _ in chunks]  # keep the physical handles alive while mapped
        self.ptr = int(check(drv.cuMemAddressReserve(self.nbytes, gran, 0, 0), "cuMemAddressReserve"))
        self._mapped: list[tuple[int, int]] = []
        try:
            pos = 0
            for alloc, off, n in chunks:
                check(drv.cuMemMap(self.ptr + pos, n, off, alloc.handle, 0), "cuMemMap")
                self._mapped.append((self.ptr + pos, n))
                pos += n
            _set_access(drv, self.ptr, self.nbytes, self.device)
        except Exception:
            self.close()
            raise

    def tensor(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """The whole range as a tensor of `shape` (e.g. [E, N, K]); its byte size must equal the view's."""
        n = torch.empty((), dtype=dtype).element_size()
        for s in shape:
            n *= s
        if n != self.nbytes:
            raise ValueError(f"CompositeView.tensor: {tuple(shape)} of {dtype} is {n} bytes, the view is {self.nbytes}")
        return tensor_from_ptr(self.ptr, tuple(shape), dtype, self.device)

    def close(self) -> None:
        if self.ptr is None:
            return
        drv = _driver()
        for p, n in self._mapped:
            check(drv.cuMemUnmap(p, n), "cuMemUnmap")
        self._mapped = []
        check(drv.cuMemAddressFree(self.ptr, self.nbytes), "cuMemAddressFree")
        self.ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
