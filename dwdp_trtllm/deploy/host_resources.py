"""What this machine has free right now: /dev/shm bytes, inodes and writability, host memory, per-process cap, GPU
memory (one reading).

`read_free()` is the one place that reads the machine (statvfs, /proc/meminfo, the memory limit of every cgroup level
above this process, RLIMIT_AS, NVML); the pre-flight check (bench/preflight.py) and the launcher's diagnosis of a rank killed
by SIGBUS / SIGKILL (engine/launcher.py) both call it, and tests replace it with a fake reading.

GPU memory is read through NVML (libnvidia-ml, loaded with ctypes) so that this process creates no CUDA
context on GPUs its ranks are about to fill; without NVML the GPUs are reported as not read (None).
"""
from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass, field

from .. import env
from ..byte_units import fmt_bytes

SHM_DIR = "/dev/shm"
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"
#: (controller directory under CGROUP_ROOT, limit file, usage file): cgroup v2 (unified at the root), v1 (memory/)
_V2 = ("", "memory.max", "memory.current")
_V1 = ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
#: a limit at or above this is "no limit" (v1 writes 2^63 rounded down to a page)
_NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class FreeResources:
    """Bytes free now; None where the reading was not possible (then nothing is checked against it)."""

    shm_free: int | None  # /dev/shm: statvfs f_bavail * f_frsize
    shm_total: int | None
    host_available: int | None  # min(MemAvailable, the cgroup's limit - its usage)
    host_limit_source: str = "MemAvailable"  # which of the two decided host_available
    process_cap: int | None = None  # RLIMIT_AS of a process (None: unlimited)
    gpu_free: tuple[int, ...] | None = None  # per CUDA device index (cuda:i, CUDA_VISIBLE_DEVICES applied), NVML free bytes
    gpu_total: tuple[int, ...] | None = field(default=None)
    shm_files_free: int | None = None  # /dev/shm: statvfs f_favail, the files (inodes) an unprivileged process may create
    shm_readonly: bool = False  # /dev/shm mounted read-only (statvfs ST_RDONLY)


def shm_space(path: str = SHM_DIR) -> tuple[int, int] | tuple[None, None]:
    """(free, total) bytes of the filesystem at `path` (what an unprivileged process may still write)."""
    st = _statvfs(path)
    return (None, None) if st is None else (st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)


def _statvfs(path: str):
    try:
        return os.statvfs(path)
    except OSError:
        return None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_levels(proc_cgroup: str = PROC_CGROUP, root: str = CGROUP_ROOT) -> list[tuple[str, str, str]]:
    """(directory, limit file, usage file) of every cgroup level whose memory limit applies to this process, deepest
    first: v2 (when `root` is a unified hierarchy) and v1's memory controller, from this process's path in
    `proc_cgroup` up to the mount root. A path that does not exist under the mount (a container that sees the host's
    path but has its own cgroup mounted as the root) contributes the levels that do. Unreadable `proc_cgroup`: the
    mount roots alone."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = ["0::/", "1:memory:/"]
    out: list[tuple[str, str, str]] = []
    for line in lines:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "" and os.path.exists(os.path.join(root, "cgroup.controllers")):
            sub, limit, usage = _V2
        elif "memory" in controllers.split(","):
            sub, limit, usage = _V1
        else:
            continue
        mount = os.path.join(root, sub) if sub else root
        parts = [p for p in path.split("/") if p]
        for k in range(len(parts), -1, -1):
            d = os.path.join(mount, *parts[:k])
            if os.path.isdir(d) and all(d != o[0] for o in out):
                out.append((d, limit, usage))
    return out


def _cgroup_room(proc_cgroup: str = PROC_CGROUP, root: str = CGROUP_ROOT) -> tuple[int, str] | None:
    """(the smallest memory limit minus usage over every cgroup level above this process, that level's directory);
    None when no level has a limit (or none can be read)."""
    best = None
    for d, limit_file, usage_file in cgroup_levels(proc_cgroup, root):
        try:
            with open(os.path.join(d, limit_file)) as f:
                limit = f.read().strip()
            with open(os.path.join(d, usage_file)) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if not limit.isdigit() or int(limit) >= _NO_LIMIT:
            continue  # "max" (v2) or v1's no-limit value
        room = max(0, int(limit) - usage)
        if best is None or room < best[0]:
            best = (room, d)
    return best


def host_available() -> tuple[int | None, str]:
    """(bytes a new process can still take, which limit decided it)."""
    avail, cg = _meminfo_available(), _cgroup_room()
    if cg is not None and (avail is None or cg[0] < avail):
        return cg[0], f"the memory limit of cgroup {cg[1]} minus its usage"
    return avail, "MemAvailable in /proc/meminfo"


def process_cap() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def visible_gpus(spec: str | None, uuids: list[str]) -> list[int] | None:
    """NVML indices of the GPUs CUDA shows this process, in CUDA's order (cuda:i is NVML index result[i], which is
    what the launcher's rank r -> cuda:(r % device count) fills), from CUDA_VISIBLE_DEVICES (`spec`; None when unset:
    every GPU) and the NVML devices' UUIDs ('GPU-...'). Read as CUDA reads it: indices or UUID prefixes, comma
    separated; an entry that names no device hides it and every entry after it ('-1': none). None where this
    cannot tell which memory the ranks get (a MIG instance, a device named twice): the GPUs are then not checked.
    CUDA's own order is NVML's (PCI bus) order on machines of one GPU model, the machines this runs on."""
    if spec is None:
        return list(range(len(uuids)))
    out: list[int] = []
    for token in (t.strip() for t in spec.split(",")):
        if token.startswith("MIG-"):
            return None
        if token.isdigit():
            i = int(token)
            if i >= len(uuids):
                break
        else:
            match = [k for k, u in enumerate(uuids) if token and u.startswith(token)]
            if len(match) != 1:
                break
            i = match[0]
        if i in out:
            return None
        out.append(i)
    return out


def gpu_memory() -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """((free, ...), (total, ...)) per CUDA device index (CUDA_VISIBLE_DEVICES applied: `visible_gpus`) from NVML;
    None when NVML is absent or fails, or the visible devices cannot be told apart."""
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
        free, total, uuids = [], [], []
        for i in range(count.value):
            handle, mem = ctypes.c_void_p(), _NvmlMemory()
            uuid = ctypes.create_string_buffer(96)
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                return None
            if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) != 0:
                return None
            if nvml.nvmlDeviceGetUUID(handle, uuid, ctypes.c_uint(len(uuid))) != 0:
                return None
            free.append(int(mem.free))
            total.append(int(mem.total))
            uuids.append(uuid.value.decode(errors="replace"))
        visible = visible_gpus(env.cuda_visible_devices(), uuids)
        if visible is None:
            return None
        return tuple(free[i] for i in visible), tuple(total[i] for i in visible)
    except (AttributeError, OSError):
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except (AttributeError, OSError):
            pass


def read_free(*, gpus: bool = False) -> FreeResources:
    """One reading of this machine (gpus: also NVML's free memory per GPU CUDA shows this process)."""
    st = _statvfs(SHM_DIR)
    host, source = host_available()
    g = gpu_memory() if gpus else None
    return FreeResources(shm_free=None if st is None else st.f_bavail * st.f_frsize,
                         shm_total=None if st is None else st.f_blocks * st.f_frsize,
                         shm_files_free=None if st is None or st.f_files == 0 else st.f_favail,  # f_files 0: no inode limit
                         shm_readonly=st is not None and bool(st.f_flag & os.ST_RDONLY),
                         host_available=host, host_limit_source=source,
                         process_cap=process_cap(), gpu_free=g[0] if g else None, gpu_total=g[1] if g else None)


# ---- why a process died of a resource (the launcher's diagnosis of a rank killed without a report) --------

_OOM_FILES = ("/proc/vmstat", "/sys/fs/cgroup/memory.events")


def oom_kills() -> tuple[int | None, ...]:
    """The kernel's OOM-kill counters (host-wide /proc/vmstat, the container's cgroup memory.events): each only
    grows, so a change between two readings means the OOM killer ended some process in between."""
    out = []
    for path in _OOM_FILES:
        n = None
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        n = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        out.append(n)
    return tuple(out)


def signal_cause(signum: int, oom_before: tuple[int | None, ...] | None = None) -> str | None:
    """What a death by SIGBUS / SIGKILL says about the machine's resources, read now (None for other signals).

    SIGBUS: a page of a shared mapping (/dev/shm) that could not be backed, the usual end of a full /dev/shm.
    SIGKILL: the kernel's OOM killer when its counter moved since `oom_before` (read when the run started)."""
    import signal

    if signum == signal.SIGBUS:
        free, total = shm_space()
        if free is None:
            return "a SIGBUS on a shared mapping usually means /dev/shm ran out of space (it could not be read now)"
        state = (f"/dev/shm has {fmt_bytes(free, exact=True)} free of {fmt_bytes(total, exact=True)} now" +
                 ("" if free < 0.05 * total else " (the run's own segments may have been freed by then)"))
        return (f"a SIGBUS on a shared mapping usually means /dev/shm ran out of space: {state}; in a container start it "
                "with --shm-size=<N>g or --ipc=host, and see the pre-flight numbers (README: Signals, failures and logs)")
    if signum == signal.SIGKILL:
        avail, source = host_available()
        mem = "" if avail is None else f"; host memory available now {fmt_bytes(avail, exact=True)} ({source})"
        now = oom_kills()
        if oom_before is not None and any(b is not None and a is not None and a > b for a, b in zip(now, oom_before)):
            return (f"the kernel's OOM killer ended it (oom_kill counter {oom_before} -> {now}){mem}: the ranks need "
                    "more host memory than is free (smaller workload.max_num_tokens, fewer run.ranks or model.num_layers)")
        if oom_before is not None and any(a is not None and b is not None for a, b in zip(now, oom_before)):
            return f"not by the kernel's OOM killer (its counter did not move): something sent SIGKILL{mem}"
        return f"if nothing sent it SIGKILL, the kernel's OOM killer did (its counter could not be read){mem}"
    return None


#: the last line of a rank's traceback when an allocation failed (torch CPU allocator, Python, CUDA caching allocator)
_OUT_OF_MEMORY = ("can't allocate memory", "MemoryError", "CUDA out of memory", "OutOfMemoryError")


def error_cause(last_line: str) -> str | None:
    """What the machine says of a rank's allocation failure (its traceback's last line), read now; None for others."""
    if not any(k in last_line for k in _OUT_OF_MEMORY):
        return None
    if "CUDA" in last_line or "OutOfMemoryError" in last_line:
        return ("device memory ran out: a smaller workload.max_num_tokens, a larger dwdp.dwdp_size or fewer ranks per "
                "GPU (the pre-flight's estimate does not count the CUDA context, NCCL or allocator fragmentation)")
    avail, source = host_available()
    cap = process_cap()
    have = "" if avail is None else f"host memory available now {fmt_bytes(avail, exact=True)} ({source})"
    cap_text = "" if cap is None else f"{'; ' if have else ''}a process may map at most {fmt_bytes(cap, exact=True)} (ulimit -v)"
    return (f"host memory ran out: {have}{cap_text}; a smaller workload.max_num_tokens, fewer run.ranks or "
            "model.num_layers")
