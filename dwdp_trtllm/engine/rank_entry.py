"""Entry point of a rank process spawned by engine/launcher.py; importable without torch.

The spawn bootstrap unpickles a process's target and arguments before it runs the target, importing every
module they name. So the target lives here (no heavy imports) and the rank's real arguments (config, requests)
travel as pickled bytes, loaded only after the process has asked to die with its parent: a `dwdp bench` that
is killed while its ranks are still importing torch (seconds on a loaded machine) leaves none of them behind.
The rank's body (`run_child`: every mode in turn, results and errors sent to the parent) lives here too, its
heavy imports inside it; engine/launcher.py is the parent side and imports this module, not the reverse.
"""
from __future__ import annotations

import datetime
import os
import pickle
import signal
import traceback

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
    run_child(*pickle.loads(payload), conn)."""
    die_with_parent(parent_pid)
    _prctl(PR_SET_NAME, f"dwdp-rank{rank}"[:15].encode())
    run_child(*pickle.loads(payload), conn)


def run_child(rank: int, world: int, port: int, cfg, modes: list[str], requests: list, tag: str,
              fail_at: tuple[int, int] | None, collect_outputs: bool, popularity_LE, conn) -> None:
    """One rank (started by main): every mode in turn, each result, progress and error sent on conn
    (cfg a BenchConfig, requests the rank's list of records.Request, popularity_LE the routing skew's table the
    parent computed, None when off)."""
    import torch.distributed as dist

    from .. import env
    from ..spec.schema import ConfigError
    from .worker import run_rank

    env.set_multicast_off()
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=cfg.run.timeout_s))
        for mode in modes:
            res = run_rank(cfg, mode, requests, rank=rank, world=world, tag=f"{tag}_{mode}",
                           progress=lambda done, total, m=mode: conn.send(("progress", rank, m, done, total)),
                           collect_outputs=collect_outputs, popularity_LE=popularity_LE,
                           fail_at_iteration=fail_at[1] if fail_at is not None and fail_at[0] == rank else None)
            # Plain pickle bytes: torch's reduction would share tensors by file descriptor, which the
            # parent can only open while this process is alive (a race seen on the GPU machine).
            conn.send(("ok", rank, mode, pickle.dumps(res)))
            dist.barrier()
        dist.destroy_process_group()
        conn.close()
    except ConfigError as e:  # bad user input found by a rank (e.g. NaN in a checkpoint): reported as such
        _last_word(conn, ("config_error", rank, None, (e.file, e.key, e.expected)))
    except BaseException:  # noqa: BLE001 - everything goes to the parent
        _last_word(conn, ("error", rank, None, traceback.format_exc()))


def _last_word(conn, msg) -> None:
    try:
        conn.send(msg)
        conn.close()
    except OSError:  # the parent is gone
        pass
    os._exit(1)  # do not wait in collectives or atexit handlers
