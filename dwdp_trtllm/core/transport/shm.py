"""CPU shared-memory transport: every buffer is a POSIX shared-memory segment (tests, CPU engine).

Segment names: f"{tag}_{dwdp_rank}_{sanitised key}" under /dev/shm. `tag` should carry a run id: a
name that already exists is an error here, never silently reused. A segment's name exists only from
allocate() until every peer has mapped it (the end of open_peers): then its owner unlinks it and the
memory lives on in the mappings alone, so a run killed any later (SIGKILL, a group kill, a closed
terminal) leaves nothing in /dev/shm. What a run killed during setup leaves, the next run removes
(`sweep_orphaned`, called by engine/launcher.py), but only this user's files whose owner it can prove dead: the
launcher's tag (`owner_tag`) records the owning process's pid namespace (the inode of /proc/self/ns/pid) and start time (field
22 of /proc/<pid>/stat, clock ticks since boot) beside its pid. /dev/shm is shared across pid namespaces
(`docker run --ipc=host`, the setup the README recommends), where a pid names another process or none at all; a
bare pid proves nothing there, and a reused pid proves nothing anywhere.

Owners create and write their segments; peers map them with PROT_READ, so a peer that writes into
a buffer it only borrowed faults instead of corrupting the owner's weights. Owners and peers open the
segment file directly (not multiprocessing.shared_memory.SharedMemory). An owner registers a segment's name
with Python's resource tracker BEFORE it creates the file and unregisters it after the unlink, so a file of
ours exists only while the tracker knows its name: a run whose every process is killed (kill -9 of the parent:
its ranks get SIGKILL) still leaves nothing, the tracker unlinking what is left when its last user dies.
SharedMemory registers only after creating, and a rank stopped in between (a SIGTERM during setup) left a file
the tracker did not know, which the launcher's clean-up then unregistered: a KeyError traceback from the
tracker. The launcher's clean-up registers and unregisters each name it removes, which the tracker
accepts whether or not it knew the name.

An owner reserves its segment's pages when it creates it (posix_fallocate): a /dev/shm too small for the
run fails here, naming /dev/shm and the bytes, instead of a SIGBUS when a page is first touched.
"""
from __future__ import annotations

import mmap
import os
import re
import warnings
from multiprocessing import resource_tracker

import torch

from . import group_ops
from .base import PeerTransport, TransportError
from .pidfd import pid_namespace, same_pid_namespace

_SHM_DIR = "/dev/shm"
_BAD = re.compile(r"[^A-Za-z0-9_.-]")


#: the launcher's run tag: dwdp_n<pid namespace inode>_p<pid>_s<start time in clock ticks>_<8 hex digits>
_OWNER = re.compile(r"^dwdp_n(\d+)_p(\d+)_s(\d+)_[0-9a-f]{8}_")


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time after boot, clock ticks); None when no such process is visible."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the name (field 2) may hold spaces and parentheses
        return int(fields[19])  # fields[0] is field 3
    except (OSError, IndexError, ValueError):
        return None


def owner_tag(run_id: str) -> str:
    """A run tag naming this process as its segments' owner (pid namespace, pid, start time) for `sweep_orphaned`;
    run_id: 8 hex digits telling runs of one process apart."""
    if not re.fullmatch(r"[0-9a-f]{8}", run_id):
        raise ValueError(f"owner_tag: run_id must be 8 lowercase hex digits, got {run_id!r}")
    pid = os.getpid()
    return f"dwdp_n{pid_namespace() or 0}_p{pid}_s{_start_time(pid) or 0}_{run_id}"


def owner_alive(pid: int, started: int) -> bool:
    """Whether the process that recorded (pid, start time) may still live: False only when this process can prove it
    gone. /proc/<pid>/stat readable: its start time decides (another start time: the pid was reused). Unreadable: a
    process of another user that /proc hides (mounted hidepid=2), or a permission error, reads the same as a dead
    one there; kill(pid, 0) tells them apart (ESRCH: no such process; EPERM: one lives that we may not signal), and
    anything but ESRCH counts as alive."""
    seen = _start_time(pid)
    if seen is not None:
        return seen == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: a process lives there (another user's); anything else proves nothing either
        return True
    return True  # it lives, and /proc will not show its start time: it may be the owner


def _owned_by_me(path: str) -> bool:
    """The file is this user's (st_uid == effective uid). A /dev/shm without the sticky bit (a Kubernetes emptyDir,
    say) lets any user unlink any file; the sweep removes only what this user could have created."""
    try:
        return os.lstat(path).st_uid == os.geteuid()
    except OSError:
        return False


def sweep_orphaned(shm_dir: str = _SHM_DIR) -> list[str]:
    """Remove segments (and other files named by a run tag, e.g. engine/rank_entry.py's stderr files in the temp dir)
    under shm_dir that this user owns and whose owner (recorded by `owner_tag`) is provably dead: same pid namespace
    as this process, and its pid gone or held by a process that started at another time (`owner_alive`). Never
    removed: another user's file, a segment of another pid namespace, one whose name records no owner (another tag,
    or namespace/start time unknown: 0), one whose owner /proc hides or will not let us read, any segment when this
    process's own namespace cannot be read. Returns the removed paths."""
    ns = pid_namespace()
    if ns is None:
        return []
    removed = []
    for name in sorted(os.listdir(shm_dir)):
        m = _OWNER.match(name)
        if m is None:
            continue
        owner_ns, pid, started = (int(g) for g in m.groups())
        if owner_ns != ns or started == 0:
            continue  # another namespace's pid means nothing here; an unknown start time proves nothing
        path = os.path.join(shm_dir, name)
        if not _owned_by_me(path) or owner_alive(pid, started):
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def segment_name(tag: str, rank: int, key: str) -> str:
    """POSIX shared-memory name (without the leading '/') of `rank`'s buffer `key`."""
    return f"{_BAD.sub('_', tag)}_{rank}_{_BAD.sub('_', key)}"


def _frombuffer(buf) -> torch.Tensor:
    with warnings.catch_warnings():  # read-only peer maps: torch warns that the buffer is not writable
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(buf, dtype=torch.uint8)


class _Segment:
    """An owner's segment: /dev/shm/<name> created exclusively, its pages reserved, mapped read-write."""

    def __init__(self, name: str, nbytes: int):
        self.path = os.path.join(_SHM_DIR, name)
        self._tracked = "/" + name
        resource_tracker.register(self._tracked, "shared_memory")  # before the file exists: see the module docstring
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)  # FileExistsError: the caller names it
        except BaseException:
            resource_tracker.unregister(self._tracked, "shared_memory")
            raise
        try:
            try:
                os.posix_fallocate(fd, 0, nbytes)
            except OSError as e:
                free = os.statvfs(_SHM_DIR)
                raise TransportError(
                    f"shm: cannot reserve {nbytes} bytes for {self.path} ({e.strerror}): {_SHM_DIR} has "
                    f"{free.f_bavail * free.f_frsize} bytes free of {free.f_blocks * free.f_frsize}; give the container "
                    "a larger /dev/shm (docker run --shm-size=<N>g or --ipc=host) or shrink the run") from None
            self.buf = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            self.unlink()
            raise
        os.close(fd)

    def close(self) -> None:
        self.buf.close()  # BufferError while a view still uses it: the caller decides

    def unlink(self) -> None:
        """Remove the name (idempotent); the tracker forgets it once, after the file is gone."""
        if self._tracked is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        resource_tracker.unregister(self._tracked, "shared_memory")
        self._tracked = None


class ShmTransport(PeerTransport):
    kind = "shm"
    keeps_peer_memory = True  # our mapping keeps an unlinked segment's pages (POSIX: freed at the last unmap)

    def __init__(self, *, group, dwdp_rank: int, dwdp_size: int, device: torch.device, tag: str = "dwdp"):
        super().__init__(group=group, dwdp_rank=dwdp_rank, dwdp_size=dwdp_size, device=torch.device(device), tag=tag)
        if self.device.type != "cpu":
            raise TransportError(f"shm transport runs on cpu, got device {self.device}: use ipc or vmm_fd on cuda")
        self._own: dict[str, _Segment] = {}
        self._sizes: dict[str, int] = {}
        self._peer_maps: list[mmap.mmap] = []
        self._peers: dict[int, dict[str, torch.Tensor]] = {}
        self._opened = False

    def allocate(self, sizes: dict[str, int]) -> dict[str, torch.Tensor]:
        names = {}
        for key, nbytes in sizes.items():
            if not isinstance(nbytes, int) or nbytes < 0:
                raise TransportError(f"allocate: size of buffer {key!r} must be an int >= 0, got {nbytes!r}")
            if key in self._sizes:
                raise TransportError(f"allocate: buffer {key!r} already allocated on dwdp_rank {self.dwdp_rank}")
            name = segment_name(self.tag, self.dwdp_rank, key)
            if name in names.values() or any(segment_name(self.tag, self.dwdp_rank, k) == name for k in self._sizes):
                raise TransportError(f"allocate: buffer key {key!r} collides with another key after sanitising to {name!r}")
            names[key] = name
        for key, nbytes in sizes.items():
            try:  # POSIX shm cannot be empty; an empty buffer maps one byte and views none
                shm = _Segment(names[key], max(nbytes, 1))
            except FileExistsError:
                raise TransportError(
                    f"shm: segment {_SHM_DIR}/{names[key]} already exists (left by a crashed run?): remove "
                    f"{_SHM_DIR}/{self.tag}* or use a fresh tag/run id") from None
            self._own[key] = shm
            self._sizes[key] = nbytes
            self.local[key] = _frombuffer(shm.buf)[:nbytes]
        return {k: self.local[k] for k in sizes}

    def open_peers(self) -> None:
        """Collective (gloo group): gather every rank's (key -> size) table and map peers read-only."""
        if self._opened:
            raise TransportError("shm: open_peers called twice")
        mine = {"rank": self.dwdp_rank, "pid": os.getpid(), "pidns": pid_namespace(), "sizes": dict(self._sizes)}
        tables = group_ops.all_gather_object(self.group, mine)
        for peer, table in enumerate(tables):
            if table["rank"] != peer:
                raise TransportError(f"shm: group member {peer} reports dwdp_rank {table['rank']}: the group must list "
                                     "the DWDP ranks in dwdp_rank order")
            if peer == self.dwdp_rank:
                continue
            if same_pid_namespace(table.get("pidns")):  # a pid of another namespace cannot be watched from here
                self.peer_pids[peer] = table["pid"]
            views = {}
            for key, nbytes in table["sizes"].items():
                views[key] = self._attach(peer, key, nbytes)
            self._peers[peer] = views
        self._opened = True
        if self.dwdp_size > 1:
            group_ops.barrier(self.group)  # every peer has mapped our segments: their names are no longer needed
        self._unlink_own()

    def _unlink_own(self) -> None:
        for shm in self._own.values():
            shm.unlink()

    def _attach(self, peer: int, key: str, nbytes: int) -> torch.Tensor:
        path = os.path.join(_SHM_DIR, segment_name(self.tag, peer, key))
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise TransportError(
                f"shm: cannot open peer {peer}'s buffer {key!r} at {path} ({e.strerror}); backend shm: check that "
                f"every rank uses the same tag {self.tag!r} and that /dev/shm is shared (same host, same container)") from e
        try:
            mm = mmap.mmap(fd, max(nbytes, 1), flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        except (OSError, ValueError) as e:
            raise TransportError(f"shm: cannot map peer {peer}'s buffer {key!r} ({nbytes} bytes) from {path}: {e}") from e
        finally:
            os.close(fd)
        self._peer_maps.append(mm)
        return _frombuffer(mm)[:nbytes]

    def peer_buffer(self, peer: int, key: str) -> torch.Tensor:
        if peer == self.dwdp_rank:
            if key not in self.local:
                raise TransportError(f"shm: no local buffer {key!r} on dwdp_rank {peer}; have {sorted(self.local)}")
            return self.local[key]
        if not self._opened:
            raise TransportError("shm: peer_buffer before open_peers")
        if peer not in self._peers:
            raise TransportError(f"shm: peer {peer} is not in the group of size {self.dwdp_size}")
        try:
            return self._peers[peer][key]
        except KeyError:
            raise TransportError(f"shm: peer {peer} exported no buffer {key!r}; it has {sorted(self._peers[peer])}") from None

    def close(self) -> None:
        """Drop views, unmap peers, close and unlink own segments. Call it on every rank (not a barrier).

        Unlinking while a peer still maps a segment is safe (POSIX keeps the memory until the last
        unmap). Tensors the caller still holds keep their mapping alive; those maps are left to the GC.
        """
        self._peers.clear()
        self.local.clear()
        for mm in self._peer_maps:
            try:
                mm.close()
            except BufferError:
                pass  # a caller still holds a view; the map goes when it does
        self._peer_maps.clear()
        for shm in self._own.values():
            try:
                shm.close()
            except BufferError:
                pass
        self._unlink_own()
        self._own.clear()
        self._sizes.clear()
        self._opened = False
