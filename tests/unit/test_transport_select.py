"""Transport selection (pure), VMM handle-type choice, fd passing with pidfd_getfd, error remedies."""
from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
import torch

from dwdp_trtllm.core.transport import TransportError, make_transport
from dwdp_trtllm.core.transport.base import resolve_kind
from dwdp_trtllm.core.transport.pidfd import PidfdError, getfd_from, getfd_permitted, remedy
from dwdp_trtllm.core.transport.shm import ShmTransport, segment_name
from dwdp_trtllm.core.transport.vmm import choose_handle_type, round_up

pytestmark = pytest.mark.timeout(900)
CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


def test_resolve_kind_and_factory():
    assert resolve_kind("auto", CPU) == "shm" and resolve_kind("auto", GPU) == "ipc"
    for kind in ("ipc", "vmm_fd", "vmm_fabric"):
        assert resolve_kind(kind, GPU) == kind
        with pytest.raises(TransportError, match="does not run on device cpu"):
            resolve_kind(kind, CPU)
    with pytest.raises(TransportError, match="does not run on device cuda"):
        resolve_kind("shm", GPU)
    with pytest.raises(TransportError, match="unknown transport 'nvshmem'"):
        make_transport("nvshmem", group=None, dwdp_rank=0, dwdp_size=1, device=GPU)
    tp = make_transport("shm", group=None, dwdp_rank=0, dwdp_size=2, device=CPU, tag="x")
    assert isinstance(tp, ShmTransport) and tp.kind == "shm"


@pytest.mark.parametrize("machine,fabric,fd,requested,want", [
    ("x86_64", False, True, "auto", "fd"),        # H100/H200 HGX
    ("x86_64", True, True, "auto", "fd"),         # x86 with fabric support: fd still reaches all local peers
    ("aarch64", True, True, "auto", "fabric"),    # GB200 NVL72: fabric spans the NVLink domain
    ("aarch64", False, True, "auto", "fd"),       # GH200 without IMEX
    ("x86_64", True, False, "auto", "fabric"),
    ("aarch64", True, True, "fd", "fd"),
    ("x86_64", True, True, "fabric", "fabric"),
])
def test_choose_handle_type(machine, fabric, fd, requested, want):
    assert choose_handle_type(machine, fabric, fd, requested) == want


def test_choose_handle_type_errors_name_the_remedy():
    with pytest.raises(TransportError, match="does not support CU_MEM_HANDLE_TYPE_FABRIC.*vmm_fd or ipc"):
        choose_handle_type("x86_64", False, True, "fabric")
    with pytest.raises(TransportError, match="POSIX fd.*transport: ipc"):
        choose_handle_type("x86_64", True, False, "fd")
    with pytest.raises(TransportError, match="neither"):
        choose_handle_type("x86_64", False, False, "auto")
    with pytest.raises(TransportError, match="expected auto, fd or fabric"):
        choose_handle_type("x86_64", True, True, "dmabuf")


def test_round_up_to_granularity():
    g = 2 << 20
    assert [round_up(n, g) for n in (0, 1, g, g + 1, 3 * g - 1)] == [g, g, g, 2 * g, 3 * g]


def test_cuda_backends_refuse_cpu_devices():
    from dwdp_trtllm.core.transport.cuda_ipc import CudaIpcTransport
    from dwdp_trtllm.core.transport.vmm import VmmTransport
    with pytest.raises(TransportError, match="ipc transport needs a cuda device"):
        CudaIpcTransport(group=None, dwdp_rank=0, dwdp_size=1, device=CPU)
    with pytest.raises(TransportError, match="vmm_fd transport needs a cuda device"):
        VmmTransport(group=None, dwdp_rank=0, dwdp_size=1, device=CPU, handle_type="fd")


def test_segment_names_are_sanitised():
    assert segment_name("run/1", 2, "L3.w13 scale") == "run_1_2_L3.w13_scale"


def test_pidfd_getfd_duplicates_a_child_process_fd(tmp_path):
    """The VMM fd path, minus CUDA: a child holds an fd, we duplicate it and read through our copy."""
    path = tmp_path / "payload"
    payload = os.urandom(4096)
    path.write_bytes(payload)
    code = ("import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); print(fd, flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        remote_fd = int(child.stdout.readline())
        ok, why = getfd_permitted(child.pid, remote_fd)
        if not ok:
            assert "CAP_SYS_PTRACE" in why or "pidfd" in why  # the message carries the remedy
            pytest.skip(reason=f"pidfd_getfd not permitted here: {why}")
        fd = getfd_from(child.pid, remote_fd)
        try:
            assert os.pread(fd, 4096, 0) == payload
        finally:
            os.close(fd)
        with pytest.raises(PidfdError, match="Bad file descriptor.*keep exported fds open"):
            getfd_from(child.pid, 1000)
    finally:
        child.stdin.close()
        child.wait(10)
    with pytest.raises(PidfdError, match="pidfd_open"):
        getfd_from(child.pid, remote_fd)  # reaped: the pid is gone


def test_pidfd_remedies():
    assert "CAP_SYS_PTRACE" in remedy(errno.EPERM) and "transport: ipc" in remedy(errno.EPERM)
    assert "Linux >= 5.6" in remedy(errno.ENOSYS)
    assert "exited" in remedy(errno.ESRCH)
