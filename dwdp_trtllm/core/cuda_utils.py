"""Small cuda-python helpers shared by transport, scheduler and ops: error checks, raw pointers as tensors.

cuda-python is imported lazily: on a machine without a CUDA driver the package still imports and
every CUDA path reports a clear error instead of a traceback from deep inside cuda.bindings.
"""
from __future__ import annotations

import functools
from typing import Any

import torch


class CudaError(RuntimeError):
    """A CUDA driver/runtime call failed; the message names the call and the error."""


@functools.cache
def cuda_bindings() -> tuple[Any, Any]:
    """(cuda.bindings.runtime, cuda.bindings.driver) or CudaError saying why they cannot be used."""
    try:
        from cuda.bindings import driver, runtime
    except ImportError as e:  # pragma: no cover - depends on the install
        raise CudaError(f"cuda-python is not importable ({e}); install cuda-python>=12.8 on a CUDA machine") from e
    return runtime, driver


def check(result: Any, what: str) -> Any:
    """Unwrap a cuda-python call result `(err, *values)`; raise CudaError naming `what` on failure."""
    if not isinstance(result, tuple):
        result = (result,)
    err, *values = result
    code = int(err)
    if code != 0:
        name = getattr(err, "name", str(err))
        raise CudaError(f"{what} failed: {name} ({code})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


class _CudaArray:
    """Exposes a raw device pointer through __cuda_array_interface__ so torch can wrap it without copying."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str):
        self.__cuda_array_interface__ = {"data": (int(ptr), False), "shape": tuple(shape), "typestr": typestr, "version": 3}


_TYPESTR = {torch.uint8: "|u1", torch.int8: "|i1", torch.float32: "<f4", torch.int32: "<i4", torch.int64: "<i8",
            torch.float16: "<f2"}


def tensor_from_ptr(ptr: int, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | int) -> torch.Tensor:
    """A tensor viewing `prod(shape)` elements of `dtype` at device address `ptr` (no copy, no ownership).

    bf16/fp8 are not in the CUDA array interface: they are wrapped as bytes and viewed as `dtype`.
    The caller keeps the memory alive (and mapped) for the tensor's lifetime.
    """
    device = torch.device("cuda", device) if isinstance(device, int) else device
    itemsize = torch.empty((), dtype=dtype).element_size()
    if dtype in _TYPESTR:
        arr = _CudaArray(ptr, shape, _TYPESTR[dtype])
        with torch.cuda.device(device):
            return torch.as_tensor(arr, device=device)
    nbytes = itemsize
    for s in shape:
        nbytes *= s
    arr = _CudaArray(ptr, (nbytes,), "|u1")
    with torch.cuda.device(device):
        return torch.as_tensor(arr, device=device).view(dtype).view(shape)
