"""Entry point of a rank process spawned by engine/launcher.py; importable without torch.

The spawn bootstrap unpickles a process's target and arguments before it runs the target, importing every
module they name. So the target lives here (no heavy imports) and the rank's real arguments (config, requests)
travel as pickled bytes, loaded only after the process has asked to die with its parent: a `dwdp bench` that
is killed while its ranks are still importing torch (seconds on a loaded machine) leaves none of them behind.
"""
from __future__ import annotations

import os
import pickle
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Linux: this process gets SIGKILL when its parent dies (PR_SET_PDEATHSIG), and exits now if the parent is
    already gone; a killed `dwdp bench` must not leave ranks behind."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the launcher's pipes still end the rank when the parent goes
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


def main(parent_pid: int, conn, payload: bytes) -> None:
    """Die with the parent, then run launcher._child(*pickle.loads(payload), conn)."""
    die_with_parent(parent_pid)
    from .launcher import _child

    _child(*pickle.loads(payload), conn)
