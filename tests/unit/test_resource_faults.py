"""A rank that dies of a resource (issue 22): SIGBUS on a /dev/shm mapping, SIGKILL by the OOM killer, named as such."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from dwdp_trtllm.deploy import host_resources
from dwdp_trtllm.engine.launcher import describe_failure


def test_sigbus_names_dev_shm_with_its_free_space_and_the_container_remedy(monkeypatch):
    monkeypatch.setattr(host_resources, "shm_space", lambda path="/dev/shm": (1 << 20, 64 << 20))
    text = describe_failure(1, -signal.SIGBUS, {0: "Traceback\nConnectionResetError: peer gone"})
    assert text.startswith("it was killed by SIGBUS (signal 7) without reporting an error (a SIGBUS on a shared "
                           "mapping usually means /dev/shm ran out of space: /dev/shm has 0.00105 GB (1,048,576 bytes) free of 0.0671 GB (67,108,864 bytes) now;")
    assert "--shm-size" in text and "--ipc=host" in text
    assert text.endswith("; then, as a consequence: rank 0: ConnectionResetError: peer gone")


def test_sigkill_after_the_oom_counter_moved_is_the_oom_killer(monkeypatch):
    monkeypatch.setattr(host_resources, "oom_kills", lambda: (4, None))
    monkeypatch.setattr(host_resources, "host_available", lambda: (2 * 10 ** 9, "MemAvailable in /proc/meminfo"))
    text = describe_failure(2, -signal.SIGKILL, {}, oom_before=(3, None))
    assert "killed by SIGKILL (signal 9) without reporting an error (the kernel's OOM killer ended it" in text
    assert "host memory available now 2.00 GB" in text and "workload.max_num_tokens" in text


def test_sigkill_with_the_oom_counter_unchanged_is_not_blamed_on_memory(monkeypatch):
    monkeypatch.setattr(host_resources, "oom_kills", lambda: (3, None))
    text = describe_failure(2, -signal.SIGKILL, {}, oom_before=(3, None))
    assert "not by the kernel's OOM killer (its counter did not move): something sent SIGKILL" in text


def test_other_deaths_carry_no_resource_guess():
    assert describe_failure(0, -signal.SIGSEGV, {}) == "it was killed by SIGSEGV (signal 11) without reporting an error"
    assert describe_failure(0, 3, {}) == "it exited with code 3 without reporting an error"


def test_oom_kills_reads_the_vmstat_counter(tmp_path, monkeypatch):
    (tmp_path / "vmstat").write_text("nr_free_pages 1\noom_kill 7\n")
    monkeypatch.setattr(host_resources, "_OOM_FILES", (str(tmp_path / "vmstat"), str(tmp_path / "missing")))
    assert host_resources.oom_kills() == (7, None)


@pytest.mark.slow  # spawns ranks: ~18 s on 2 cores
@pytest.mark.timeout(900)
def test_a_rank_killed_by_sigbus_during_dwdp_is_reported_with_dev_shm(tmp_path):
    from test_faults import _kill_group, _ranks, _start

    proc = _start(tmp_path, "--set", "run.modes=[dwdp]")
    try:
        kids = _ranks(proc)
        os.kill(kids[1].pid, signal.SIGBUS)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 1, err
        line = next(line for line in err.splitlines() if "run failed" in line)
        assert "rank 1 failed in mode dwdp: it was killed by SIGBUS (signal 7) without reporting an error (a SIGBUS " \
               "on a shared mapping usually means /dev/shm ran out of space: /dev/shm has" in line, line
        assert "Traceback" not in err, err
    finally:
        _kill_group(proc)


def test_the_shm_transport_registers_a_name_before_the_file_exists_and_forgets_it_once_after_the_unlink(monkeypatch):
    """No window in which a file of ours exists that the resource tracker does not know (a kill -9 of the whole
    run then leaves it in /dev/shm: test_faults' parent-kill cases), and no second unregister (a KeyError
    traceback in the tracker)."""
    import torch
    from multiprocessing import resource_tracker

    from dwdp_trtllm.core.transport.shm import ShmTransport

    path = f"/dev/shm/dwdp_test_{os.getpid()}_0_w"
    calls = []
    monkeypatch.setattr(resource_tracker, "register", lambda n, t: calls.append(("register", n, os.path.exists(path))))
    monkeypatch.setattr(resource_tracker, "unregister",
                        lambda n, t: calls.append(("unregister", n, os.path.exists(path))))
    t = ShmTransport(group=None, dwdp_rank=0, dwdp_size=1, device=torch.device("cpu"), tag=f"dwdp_test_{os.getpid()}")
    buf = t.allocate({"w": 4096})["w"]
    buf.fill_(7)
    assert os.path.exists(path)
    del buf
    t.close()
    t.close()
    name = "/" + os.path.basename(path)
    assert not os.path.exists(path)
    assert calls == [("register", name, False), ("unregister", name, False)], calls


def test_cleaning_up_a_segment_a_killed_rank_never_registered_prints_no_tracker_traceback(tmp_path):
    """The race of a SIGTERM during DWDP setup, made certain: a segment exists that the tracker never heard of; the
    launcher's clean-up must not make the tracker print a KeyError traceback (it inherits our stderr)."""
    import subprocess
    import sys

    code = (
        "import os\n"
        "from multiprocessing import resource_tracker\n"
        "from dwdp_trtllm.engine.launcher import _cleanup_shm\n"
        "resource_tracker.ensure_running()\n"
        "tag = f'dwdp_{os.getpid()}_race'\n"
        "open(f'/dev/shm/{tag}_0_w', 'wb').close()\n"
        "print(_cleanup_shm(tag))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0 and "_race_0_w" in r.stdout, r.stderr
    assert "KeyError" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_dev_shm_too_small_for_a_segment_is_a_transport_error_naming_it(monkeypatch):
    import errno

    import torch

    from dwdp_trtllm.core.transport.base import TransportError
    from dwdp_trtllm.core.transport.shm import ShmTransport

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    tag = f"dwdp_test_{os.getpid()}_full"
    t = ShmTransport(group=None, dwdp_rank=0, dwdp_size=1, device=torch.device("cpu"), tag=tag)
    with pytest.raises(TransportError, match=r"cannot reserve 8192 bytes for /dev/shm/.*No space left on device.*"
                                             r"--shm-size"):
        t.allocate({"w": 8192})
    t.close()
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(tag)]  # nothing half-made left behind


def test_an_allocation_failure_in_a_rank_is_reported_with_the_memory_left(monkeypatch):
    monkeypatch.setattr(host_resources, "host_available", lambda: (3 * 10 ** 9, "MemAvailable in /proc/meminfo"))
    monkeypatch.setattr(host_resources, "process_cap", lambda: 8 * 10 ** 9)
    line = "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried"
    text = host_resources.error_cause(line)
    assert text.startswith("host memory ran out: host memory available now 3.00 GB (MemAvailable in /proc/meminfo); "
                           "a process may map at most 8.00 GB (ulimit -v)"), text
    assert "device memory ran out" in host_resources.error_cause("torch.OutOfMemoryError: CUDA out of memory. Tried")
    assert host_resources.error_cause("ValueError: something else") is None


@pytest.mark.slow  # spawns ranks: ~22 s on 2 cores
@pytest.mark.timeout(900)
def test_a_rank_out_of_host_memory_is_named_with_the_memory_left(tmp_path):
    """A per-process cap (ulimit -v, inherited by the ranks) below what the reference mode allocates: the rank's
    allocation fails and the summary says host memory ran out, with the cap and what is available."""
    import subprocess
    import sys

    script = tmp_path / "oom.py"
    script.write_text(
        "import resource\n"
        "from dwdp_trtllm.bench.sweep import load_sweep\n"
        "from dwdp_trtllm.spec.workload import generate_requests\n"
        "from dwdp_trtllm.engine.launcher import RankFailed, run_mode\n"
        "if __name__ == '__main__':\n"
        f"    _, pts = load_sweep({str(Path(__file__).resolve().parents[2] / 'configs/bench/ci_smoke.yaml')!r}, "
        "['model.preset=deepseek-v2-lite', 'model.num_layers=3', 'run.ranks=1', 'dwdp.dwdp_size=1', "
        "'run.modes=[reference]', 'workload.requests_per_rank=1'])\n"
        "    cfg = pts[0].config\n"
        "    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))\n"
        "    try:\n"
        "        run_mode(cfg, 'reference', generate_requests(cfg.workload, cfg.run.ranks))\n"
        "    except RankFailed as e:\n"
        "        print(e.summary)\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=140)
    assert "rank 0 failed in mode reference: RuntimeError:" in r.stdout and "can't allocate memory" in r.stdout, \
        r.stdout + r.stderr[-2000:]
    assert "(host memory ran out: host memory available now" in r.stdout and "at most 6.44 GB (ulimit -v)" in r.stdout


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (a /dev/shm that is nearly full); needs root with CAP_SYS_ADMIN, else the test is skipped
    (visibly, with the reason; the fake-statvfs tests above cover the logic)."""
    import subprocess

    mnt = tmp_path / "shm"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_real_small_tmpfs_refuses_a_segment_it_cannot_hold_and_reads_its_space(small_tmpfs, monkeypatch):
    import torch

    from dwdp_trtllm.core.transport import shm
    from dwdp_trtllm.core.transport.base import TransportError

    free, total = host_resources.shm_space(str(small_tmpfs))
    assert total == 1 << 20 and 0 < free <= total
    monkeypatch.setattr(shm, "_SHM_DIR", str(small_tmpfs))
    t = shm.ShmTransport(group=None, dwdp_rank=0, dwdp_size=1, device=torch.device("cpu"), tag="dwdp_tmpfs")
    t.allocate({"small": 64 << 10})  # fits
    with pytest.raises(TransportError, match=r"cannot reserve 2097152 bytes .*No space left on device.*bytes free of "
                                             r"1048576.*--shm-size"):
        t.allocate({"big": 2 << 20})  # without the reservation this would map, then SIGBUS on the first write
    assert sorted(os.listdir(small_tmpfs)) == ["dwdp_tmpfs_0_small"]  # the refused segment is not left behind
    t.close()
    assert os.listdir(small_tmpfs) == []


def test_gpu_memory_reads_nvml_through_ctypes(monkeypatch):
    """NVML's C calls as host_resources makes them (nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
    nvmlDeviceGetMemoryInfo, nvmlDeviceGetUUID, nvmlShutdown), against a fake library that fills the by-reference
    arguments; every GPU visible (CUDA_VISIBLE_DEVICES unset)."""
    import ctypes

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    calls = []

    class FakeNvml:
        def nvmlInit_v2(self):
            calls.append("init")
            return 0

        def nvmlDeviceGetCount_v2(self, count_ref):
            count_ref._obj.value = 2
            return 0

        def nvmlDeviceGetHandleByIndex_v2(self, i, handle_ref):
            handle_ref._obj.value = 100 + i
            return 0

        def nvmlDeviceGetMemoryInfo(self, handle, mem_ref):
            mem = mem_ref._obj
            mem.total, mem.free = 150_000_000_000, 140_000_000_000 - handle.value
            return 0

        def nvmlDeviceGetUUID(self, handle, buf, length):  # char* and its length, as NVML's C signature
            buf.value = f"GPU-{handle.value:08x}-0000-0000-0000-000000000000".encode()[:length.value - 1]
            return 0

        def nvmlShutdown(self):
            calls.append("shutdown")
            return 0

    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeNvml() if name == "libnvidia-ml.so.1" else None)
    assert host_resources.gpu_memory() == ((140_000_000_000 - 100, 140_000_000_000 - 101), (150_000_000_000,) * 2)
    assert calls == ["init", "shutdown"]
    assert host_resources.read_free(gpus=True).gpu_free == (140_000_000_000 - 100, 140_000_000_000 - 101)

    def missing(name):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert host_resources.gpu_memory() is None and host_resources.read_free(gpus=True).gpu_free is None
