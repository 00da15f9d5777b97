"""Entry point of a rank process spawned by engine/launcher.py; importable without torch.

The spawn bootstrap unpickles a process's target and arguments before it runs the target, importing every
module they name. So the target lives here (no heavy imports) and the rank's real arguments (config, requests)
travel as pickled bytes, loaded only after the process has asked to die with its parent: a `dwdp bench` that
is killed while its ranks are still importing torch (seconds on a loaded machine) leaves none of them behind.
The rank's body (`run_child`: every mode in turn, results and errors sent to the parent) lives here too, its
heavy imports inside it; engine/launcher.py is the parent side and imports this module, not the reverse.

A rank writes its stderr (warnings such as a peer missing at the close barrier) into a file the parent names, not
into the terminal: when a run fails, the parent's one failure paragraph comes first and alone, the ranks' words go
to the failure log; when it succeeds, the parent prints them after the run. Its heartbeat (engine/heartbeat.py)
shares the pipe with the main thread, so every send holds one lock.
"""
from __future__ import annotations

import datetime
import os
import pickle
import signal
import tempfile
import threading
import traceback

from .heartbeat import Heartbeat

PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1
#: how long an injected hang (tests of the hang path, fail_at=(rank, iteration, "hang")) lasts unless the parent stops
#: the rank first, as it does at run.timeout_s
INJECTED_HANG_S = 600.0


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


def set_name(name: str) -> None:
    """Linux: the process's name as ps, top and /proc/<pid>/comm show it (15 bytes at most); set after
    die_with_parent, so a process under this name is tied to its parent."""
    _prctl(PR_SET_NAME, name[:15].encode())


#: the most of the ranks' stderr kept (its end): warnings, not a log
STDERR_TAIL_BYTES = 64 * 1024


class RankStderr:
    """The parent's side of the ranks' stderr file: created in the temp dir under the run's tag (a file a killed run
    leaves is swept by the next one: transport/shm.py sweep_orphaned), its name removed once every rank has opened it
    (`forget_name`, at each rank's first heartbeat: a kill -9 after that leaves nothing), read through the parent's
    own descriptor (`take`). No room in the temp dir: no file, the ranks keep the parent's stderr (path None)."""

    def __init__(self, tag: str):
        try:
            self._fd, self.path = tempfile.mkstemp(prefix=f"{tag}_stderr_")
        except OSError:
            self._fd, self.path = None, None
        self._named = self.path is not None

    def forget_name(self) -> None:
        if self._named:
            self._named = False
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def take(self) -> str:
        """The end of what the ranks wrote (at most STDERR_TAIL_BYTES); the file is gone after."""
        self.forget_name()
        if self._fd is None:
            return ""
        try:
            size = os.fstat(self._fd).st_size
            return os.pread(self._fd, STDERR_TAIL_BYTES, max(0, size - STDERR_TAIL_BYTES)).decode("utf-8", "replace")
        except OSError:
            return ""
        finally:
            os.close(self._fd)
            self._fd = None


class _LockedConn:
    """The rank's end of its pipe, one send at a time (main thread and heartbeat)."""

    def __init__(self, conn):
        self._conn, self._lock = conn, threading.Lock()

    def send(self, msg) -> None:
        with self._lock:
            self._conn.send(msg)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def main(parent_pid: int, rank: int, conn, payload: bytes, stderr_path: str | None = None) -> None:
    """Die with the parent, take the name dwdp-rank<r> (ps, top, /proc/<pid>/comm), send stderr to stderr_path
    (appended; None: keep the parent's), start the heartbeat (before the payload's imports: a rank importing torch on
    a loaded machine beats, it is not hung), then run run_child(*pickle.loads(payload), conn, beat)."""
    die_with_parent(parent_pid)
    set_name(f"dwdp-rank{rank}")
    if stderr_path is not None:
        fd = os.open(stderr_path, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 2)
        os.close(fd)
    conn = _LockedConn(conn)
    run_child(*pickle.loads(payload), conn, Heartbeat(rank, conn.send).start())


def run_child(rank: int, world: int, port: int, cfg, modes: list[str], requests: list, tag: str,
              fail_at: tuple[int, int] | None, collect_outputs: bool, popularity_LE, conn, beat: Heartbeat) -> None:
    """One rank (started by main): every mode in turn, each result, progress and error sent on conn (a _LockedConn
    shared with the running heartbeat `beat`, which this function stops; cfg a BenchConfig, requests the rank's list
    of records.Request, popularity_LE the routing skew's table the parent computed, None when off). fail_at (tests of
    the failure paths): (rank, iteration) makes that rank raise at that iteration, (rank, iteration, "hang") makes it
    hang there."""
    import torch.distributed as dist

    from .. import env
    from ..spec.schema import ConfigError
    from .worker import run_rank

    env.set_multicast_off()
    hang_at = fail_at[1] if fail_at is not None and fail_at[0] == rank and fail_at[2:] == ("hang",) else None
    raise_at = fail_at[1] if fail_at is not None and fail_at[0] == rank and fail_at[2:] != ("hang",) else None

    def at_iteration(mode: str, it: int) -> None:
        beat.at(mode, it)
        if it == hang_at:
            threading.Event().wait(INJECTED_HANG_S)

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=cfg.run.timeout_s))
        for mode in modes:
            beat.at(mode, -1)
            res = run_rank(cfg, mode, requests, rank=rank, world=world, tag=f"{tag}_{mode}",
                           progress=lambda done, total, m=mode: conn.send(("progress", rank, m, done, total)),
                           collect_outputs=collect_outputs, popularity_LE=popularity_LE,
                           fail_at_iteration=raise_at, on_iteration=lambda it, m=mode: at_iteration(m, it))
            # Plain pickle bytes: torch's reduction would share tensors by file descriptor, which the
            # parent can only open while this process is alive (a race seen on the GPU machine).
            conn.send(("ok", rank, mode, pickle.dumps(res)))
            dist.barrier()
        dist.destroy_process_group()
        beat.stop()
        conn.close()
    except ConfigError as e:  # bad user input found by a rank (e.g. NaN in a checkpoint): reported as such
        beat.stop()
        _last_word(conn, ("config_error", rank, None, (e.file, e.key, e.expected)))
    except BaseException:  # noqa: BLE001 - everything goes to the parent
        beat.stop()
        _last_word(conn, ("error", rank, None, traceback.format_exc()))


def _last_word(conn, msg) -> None:
    try:
        conn.send(msg)
        conn.close()
    except OSError:  # the parent is gone
        pass
    os._exit(1)  # do not wait in collectives or atexit handlers
