"""Device-to-device copy primitives for the copy scheduler: batched (one driver call) and per-op.

cuda.bindings wraps cuMemcpyBatchAsync/cudaMemcpyBatchAsync with Python lists, marshalling each
element (~5 us per op measured on the H200, DESIGN.md 5: ~20 ms for one DeepSeek-R1 layer's 4000
slices). `BatchMemcpy` instead calls the driver entry point through ctypes with pointers to
prebuilt numpy uint64 arrays, so one call costs microseconds whatever the op count.

Driver ABI: CUDA 12.8 exported cuMemcpyBatchAsync(..., size_t *failIdx, CUstream); CUDA 13.0 added
cuMemcpyBatchAsync_v2 without failIdx. Both are looked up by name in libcuda.so.1; v2 is preferred.
All arrays are uint64 (CUdeviceptr and size_t are 64-bit on every platform CUDA supports here).
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from .cuda_utils import CudaError

_SRC_ACCESS_ORDER_STREAM = 1  # CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: sources are read in stream order


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _MemcpyAttributes(ctypes.Structure):  # CUmemcpyAttributes_v1 (cuda.h 12.8 and 13.0)
    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", _MemLocation), ("dstLocHint", _MemLocation),
                ("flags", ctypes.c_uint)]


@functools.cache
def _libcuda() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise CudaError(f"libcuda.so.1 not loadable ({e}): batched copies need an NVIDIA driver") from e


def _error_name(code: int) -> str:
    name = ctypes.c_char_p()
    try:
        _libcuda().cuGetErrorName(code, ctypes.byref(name))
    except Exception:  # pragma: no cover - diagnostic only
        return str(code)
    return name.value.decode() if name.value else str(code)


class BatchMemcpy:
    """One cuMemcpyBatchAsync call over prebuilt uint64 arrays (dsts, srcs, sizes) on a stream."""

    def __init__(self) -> None:
        lib = _libcuda()
        p = ctypes.c_void_p
        if hasattr(lib, "cuMemcpyBatchAsync_v2"):
            self._fn, self._has_fail_idx = lib.cuMemcpyBatchAsync_v2, False
            self._fn.argtypes = [p, p, p, ctypes.c_size_t, p, p, ctypes.c_size_t, p]
        elif hasattr(lib, "cuMemcpyBatchAsync"):
            self._fn, self._has_fail_idx = lib.cuMemcpyBatchAsync, True
            self._fn.argtypes = [p, p, p, ctypes.c_size_t, p, p, ctypes.c_size_t, p, p]
        else:
            raise CudaError("the driver has no cuMemcpyBatchAsync (needs CUDA 12.8+ driver >= 570): use method per_op")
        self._fn.restype = ctypes.c_int
        self._attrs = _MemcpyAttributes(srcAccessOrder=_SRC_ACCESS_ORDER_STREAM)  # hints unused for device memory
        self._attr_idx = (ctypes.c_size_t * 1)(0)
        self._fail_idx = ctypes.c_size_t(0)
        self._attrs_p = ctypes.cast(ctypes.byref(self._attrs), ctypes.c_void_p)
        self._idx_p = ctypes.cast(self._attr_idx, ctypes.c_void_p)

    @staticmethod
    def arrays(dsts, srcs, sizes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Contiguous uint64 copies of three equal-length integer sequences (keep them alive while used)."""
        out = tuple(np.ascontiguousarray(np.asarray(a, dtype=np.uint64)) for a in (dsts, srcs, sizes))
        if not (len(out[0]) == len(out[1]) == len(out[2])):
            raise ValueError(f"dsts/srcs/sizes lengths differ: {[len(a) for a in out]}")
        return out  # type: ignore[return-value]

    def __call__(self, dsts: np.ndarray, srcs: np.ndarray, sizes: np.ndarray, stream: int) -> None:
        """Enqueue len(dsts) copies on `stream` (a raw cudaStream_t, not the legacy NULL stream)."""
        self.raw(dsts.ctypes.data, srcs.ctypes.data, sizes.ctypes.data, len(dsts), stream)

    def raw(self, dsts_p: int, srcs_p: int, sizes_p: int, count: int, stream: int) -> None:
        """As __call__, with host addresses of uint64 arrays the caller keeps alive (no per-call lookups)."""
        if count == 0:
            return
        if self._has_fail_idx:
            code = self._fn(dsts_p, srcs_p, sizes_p, count, self._attrs_p, self._idx_p, 1,
                            ctypes.addressof(self._fail_idx), stream)
        else:
            code = self._fn(dsts_p, srcs_p, sizes_p, count, self._attrs_p, self._idx_p, 1, stream)
        if code != 0:
            where = f" (first failing op {self._fail_idx.value})" if self._has_fail_idx else ""
            raise CudaError(f"cuMemcpyBatchAsync of {count} copies failed: {_error_name(code)} ({code}){where}")


@functools.cache
def batch_memcpy_available() -> bool:
    try:
        BatchMemcpy()
        return True
    except CudaError:
        return False


class DriverMemcpy:
    """cuMemcpyAsync through ctypes (~1 us a call): used to record copies into CUDA graphs."""

    def __init__(self) -> None:
        self._fn = _libcuda().cuMemcpyAsync
        self._fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
        self._fn.restype = ctypes.c_int

    def __call__(self, dsts: list[int], srcs: list[int], sizes: list[int], stream: int) -> None:
        fn = self._fn
        for d, s, n in zip(dsts, srcs, sizes):
            code = fn(d, s, n, stream)
            if code:
                raise CudaError(f"cuMemcpyAsync(dst {d:#x}, src {s:#x}, {n} bytes) failed: {_error_name(code)} ({code})")


def per_op_memcpy(dsts: list[int], srcs: list[int], sizes: list[int], stream: int) -> None:
    """One cudaMemcpyAsync per op through cuda.bindings.runtime (the unbatched path)."""
    from .cuda_utils import cuda_bindings
    runtime, _ = cuda_bindings()
    kind = runtime.cudaMemcpyKind.cudaMemcpyDeviceToDevice
    fn = runtime.cudaMemcpyAsync
    for d, s, n in zip(dsts, srcs, sizes):
        err = fn(d, s, n, kind, stream)[0]
        if err:  # cudaError_t is an int enum; cudaSuccess == 0
            raise CudaError(f"cudaMemcpyAsync(dst {d:#x}, src {s:#x}, {n} bytes) failed: {err}")
