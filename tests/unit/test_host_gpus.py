"""The GPU memory the pre-flight check reads is the memory of the GPUs the ranks run on: NVML lists every GPU of
the machine, CUDA (and so the launcher's rank r -> cuda:(r % device count)) only those CUDA_VISIBLE_DEVICES shows,
in its order; host_resources.gpu_memory reports per CUDA index."""
from __future__ import annotations

import ctypes

import pytest

from dwdp_trtllm.deploy import host_resources
from dwdp_trtllm.deploy.host_resources import visible_gpus

UUIDS = ["GPU-aaaa1111", "GPU-bbbb2222", "GPU-bbbc3333", "GPU-dddd4444"]


@pytest.mark.parametrize("spec, visible", [
    (None, [0, 1, 2, 3]),  # unset: every GPU
    ("2,3", [2, 3]),
    ("3, 0", [3, 0]),  # CUDA's order is the list's
    ("1,7,2", [1]),  # an index that names no device hides it and every entry after it
    ("-1", []), ("", []),
    ("GPU-dddd,GPU-aaaa1111", [3, 0]),  # UUIDs and unique UUID prefixes
    ("GPU-bbb", []),  # an ambiguous prefix names no device
    ("0,0", None), ("MIG-1234", None),  # not told apart: the GPUs are left unchecked
])
def test_visible_gpus(spec, visible):
    assert visible_gpus(spec, UUIDS) == visible


class _FakeNvml:
    """libnvidia-ml's calls gpu_memory makes (NVML's C API: out-parameters by pointer), over UUIDS with GPU i having
    (i + 1) GB free of 100 GB."""

    def nvmlInit_v2(self):
        return 0

    def nvmlShutdown(self):
        return 0

    def nvmlDeviceGetCount_v2(self, count):
        count._obj.value = len(UUIDS)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i, handle):
        handle._obj.value = i + 1
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle, mem):
        i = handle.value - 1
        mem._obj.free, mem._obj.total = (i + 1) * 10 ** 9, 100 * 10 ** 9
        return 0

    def nvmlDeviceGetUUID(self, handle, buf, size):
        buf.value = UUIDS[handle.value - 1].encode()
        return 0


@pytest.mark.parametrize("spec, free", [(None, (1, 2, 3, 4)), ("2,3", (3, 4)), ("GPU-dddd", (4,)), ("0,0", None)])
def test_gpu_memory_is_read_for_the_gpus_cuda_shows(monkeypatch, spec, free):
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml())
    if spec is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
    got = host_resources.gpu_memory()
    if free is None:
        assert got is None
    else:  # was: every NVML GPU, so with CUDA_VISIBLE_DEVICES=2,3 rank 0 (on cuda:0 = GPU 2) was checked against GPU 0
        assert got == (tuple(f * 10 ** 9 for f in free), (100 * 10 ** 9,) * len(free))


def test_cuda_visible_devices_is_read_through_env(monkeypatch):
    """The house rule: environment variables are read in env.py only; gpu_memory asks env.cuda_visible_devices."""
    from dwdp_trtllm import env

    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(env, "cuda_visible_devices", lambda: "3")
    assert host_resources.gpu_memory() == ((4 * 10 ** 9,), (100 * 10 ** 9,))


def test_env_reads_cuda_visible_devices(monkeypatch):
    from dwdp_trtllm import env

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert env.cuda_visible_devices() is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert env.cuda_visible_devices() == "1,0"
