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

PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1


def _prctl(option: int, arg) -> None:
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


def die_with_parent(parent_pid: int) -> None:
    """Linux: this process gets SIGKILL when its parent dies (PR_SET_PDEATHSIG), and exits now if the parent is
    already gone; a killed `dwdp bench` must not leave ranks behind."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # not Linux: the launcher's pipes still end the rank with the parent
    if os.getppid() != parent_pid:
        os._exit(1)


def main(parent_pid: int, rank: int, conn, payload: bytes) -> None:
    """Die with the parent, take the name dwdp-rank<r> (ps, top, /proc/<pid>/comm), then run
    launcher._child(*pickle.loads(payload), conn)."""
    die_with_parent(parent_pid)
    _prctl(PR_SET_NAME, f"dwdp-rank{rank}"[:15].encode())
    from .launcher import _child

    _child(*pickle.loads(payload), conn)
