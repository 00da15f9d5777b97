"""Duplicate another process's file descriptor into this one: pidfd_open + pidfd_getfd (Linux >= 5.6).

The VMM transport exports each buffer as a POSIX fd; a peer process needs its own copy of that fd
before cuMemImportFromShareableHandle. pidfd_getfd needs PTRACE_MODE_ATTACH_REALCREDS over the
target: same user with a permissive Yama ptrace_scope, or CAP_SYS_PTRACE (containers often drop it).
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform

# Both x86_64 and aarch64 use the generic syscall numbers for these (added in Linux 5.3 / 5.6).
_SYS_PIDFD_OPEN = 434
_SYS_PIDFD_GETFD = 438

_libc = None


def _syscall():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc.syscall


class PidfdError(OSError):
    """pidfd_open/pidfd_getfd failed; str() carries the remedy."""


def remedy(err: int) -> str:
    """What to try for an errno from pidfd_open/pidfd_getfd."""
    if err == errno.EPERM:
        return ("pidfd_getfd needs CAP_SYS_PTRACE in containers (docker run --cap-add SYS_PTRACE) or same-user ptrace "
                "permission (/proc/sys/kernel/yama/ptrace_scope = 0 or 1 with the peer as ancestor); or try transport: ipc")
    if err == errno.ENOSYS:
        return "the kernel lacks pidfd_open/pidfd_getfd (needs Linux >= 5.6): try transport: ipc"
    if err == errno.ESRCH:
        return "the peer process has exited: check that every rank is alive and reached open_peers"
    if err == errno.EBADF:
        return "the peer's fd is closed: it must keep exported fds open until every peer has imported them"
    return "try transport: ipc"


def pidfd_open(pid: int) -> int:
    """A pidfd for process `pid` (os.pidfd_open where Python has it)."""
    try:
        if hasattr(os, "pidfd_open"):
            return os.pidfd_open(pid)
        fd = _syscall()(_SYS_PIDFD_OPEN, ctypes.c_int(pid), ctypes.c_uint(0))
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return int(fd)
    except OSError as e:
        raise PidfdError(e.errno, f"pidfd_open({pid}) failed: {e.strerror}; {remedy(e.errno or 0)}") from None


def getfd_from(pid: int, remote_fd: int) -> int:
    """Duplicate fd `remote_fd` of process `pid` into this process; the caller closes the result."""
    if platform.system() != "Linux":
        raise PidfdError(errno.ENOSYS, f"pidfd_getfd is Linux-only (this is {platform.system()}); try transport: ipc")
    pidfd = pidfd_open(pid)
    try:
        fd = _syscall()(_SYS_PIDFD_GETFD, ctypes.c_int(pidfd), ctypes.c_int(remote_fd), ctypes.c_uint(0))
        if fd < 0:
            e = ctypes.get_errno()
            raise PidfdError(e, f"pidfd_getfd(pid {pid}, fd {remote_fd}) failed: {os.strerror(e)}; {remedy(e)}")
        return int(fd)
    finally:
        os.close(pidfd)


def getfd_permitted(pid: int, remote_fd: int) -> tuple[bool, str]:
    """(True, "") when this process may duplicate `remote_fd` of `pid`, else (False, the reason with a remedy)."""
    try:
        os.close(getfd_from(pid, remote_fd))
        return True, ""
    except PidfdError as e:
        return False, str(e)


def pid_namespace() -> int | None:
    """The inode of this process's pid namespace, or None when /proc cannot prove it: no /proc, or a /proc mounted
    for another pid namespace (its /proc/self is not this process)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            if int(f.read().split(b" ", 1)[0]) != os.getpid():
                return None
        return os.stat("/proc/self/ns/pid").st_ino
    except (OSError, ValueError):
        return None


def same_pid_namespace(peer_ns: int | None) -> bool:
    """Whether a peer's pid (as it reported it, with its pid namespace `peer_ns`) names a process in ours: only then
    can its pid be watched (a pid of another namespace, e.g. a container sharing /dev/shm with --ipc=host, names
    some other process here, or none)."""
    mine = pid_namespace()
    return mine is not None and peer_ns == mine
