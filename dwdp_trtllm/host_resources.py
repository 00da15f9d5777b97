"""What this machine has free right now: /dev/shm bytes, host memory, per-process cap, GPU memory (one reading).

`read_free()` is the one place that reads the machine (statvfs, /proc/meminfo, the cgroup's memory limit,
RLIMIT_AS, NVML); the pre-flight check (bench/preflight.py) and the launcher's diagnosis of a rank killed
by SIGBUS / SIGKILL (engine/launcher.py) both call it, and tests replace it with a fake reading.

GPU memory is read through NVML (libnvidia-ml, loaded with ctypes) so that this process creates no CUDA
context on GPUs its ranks are about to fill; without NVML the GPUs are reported as not read (None).
"""
from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass, field

SHM_DIR = "/dev/shm"
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))  # v1


@dataclass(frozen=True)
class FreeResources:
    """Bytes free now; None where the reading was not possible (then nothing is checked against it)."""

    shm_free: int | None  # /dev/shm: statvfs f_bavail * f_frsize
    shm_total: int | None
    host_available: int | None  # min(MemAvailable, the cgroup's limit - its usage)
    host_limit_source: str = "MemAvailable"  # which of the two decided host_available
    process_cap: int | None = None  # RLIMIT_AS of a process (None: unlimited)
    gpu_free: tuple[int, ...] | None = None  # per GPU index, NVML free bytes
    gpu_total: tuple[int, ...] | None = field(default=None)


def shm_space(path: str = SHM_DIR) -> tuple[int, int] | tuple[None, None]:
    """(free, total) bytes of the filesystem at `path` (what an unprivileged process may still write)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """The container's memory limit minus its usage (None: no limit, or not readable)."""
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
            with open(usage_file) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None
        return max(0, int(limit) - usage)
    return None


def host_available() -> tuple[int | None, str]:
    """(bytes a new process can still take, which limit decided it)."""
    avail, room = _meminfo_available(), _cgroup_room()
    if room is not None and (avail is None or room < avail):
        return room, "the container's memory limit (cgroup) minus its usage"
    return avail, "MemAvailable in /proc/meminfo"


def process_cap() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def gpu_memory() -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """((free, ...), (total, ...)) per GPU index from NVML; None when NVML is absent or fails."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        free, total = [], []
        for i in range(count.value):
            handle, mem = ctypes.c_void_p(), _NvmlMemory()
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                return None
            if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) != 0:
                return None
            free.append(int(mem.free))
            total.append(int(mem.total))
        return tuple(free), tuple(total)
    except (AttributeError, OSError):
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except (AttributeError, OSError):
            pass


def read_free(*, gpus: bool = False) -> FreeResources:
    """One reading of this machine (gpus: also NVML's free memory per GPU)."""
    shm_free, shm_total = shm_space()
    host, source = host_available()
    g = gpu_memory() if gpus else None
    return FreeResources(shm_free=shm_free, shm_total=shm_total, host_available=host, host_limit_source=source,
                         process_cap=process_cap(), gpu_free=g[0] if g else None, gpu_total=g[1] if g else None)
