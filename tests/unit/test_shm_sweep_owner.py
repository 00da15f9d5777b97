"""The /dev/shm sweep (transport/shm.py sweep_orphaned) removes only this user's files, and only when their owner is
provably dead. A /dev/shm without the sticky bit (a Kubernetes emptyDir) lets any user unlink any file, and a /proc
mounted hidepid=2 hides other users' processes: there a run deleted another user's live segments, their owners
unseen taken for dead. Tests run as root: another user's file is a tmp file chowned to another uid; /proc's view is
faked by replacing the two lookups the sweep makes (the owner's /proc/<pid>/stat, kill(pid, 0))."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dwdp_trtllm.core.transport import shm

OTHER_UID = 54321  # a user that is not us (tests run as root: os.chown may hand a file to anyone)


def _ns() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                              timeout=300).stdout.strip())


def _segment(d, pid: int, started: int, run: str, uid: int | None = None):
    path = d / f"dwdp_n{_ns()}_p{pid}_s{started}_{run}_dwdp_0_w13"
    path.write_bytes(b"x")
    if uid is not None:
        os.chown(path, uid, -1)
    return path


@pytest.fixture
def as_root():
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root (the CPU test machine runs as root)")


def test_another_users_segment_of_a_dead_owner_is_kept(tmp_path, as_root):
    """Same namespace, owner provably dead, but the file is another user's: kept; ours beside it goes. The sweep
    deleted both."""
    dead = _dead_pid()
    theirs = _segment(tmp_path, dead, 5, "0123abcd", uid=OTHER_UID)
    mine = _segment(tmp_path, dead, 5, "89abcdef")
    assert shm.sweep_orphaned(str(tmp_path)) == [str(mine)]
    assert theirs.exists() and not mine.exists()


def test_an_owner_proc_hides_is_alive(tmp_path, monkeypatch):
    """hidepid=2: /proc/<pid> of another user's process does not exist for us (its stat unreadable), yet the process
    lives (kill(pid, 0): EPERM). Its segment is kept. The sweep took the unreadable stat for a dead owner."""
    owner = 4_000_000  # above any pid_max: nothing here is that pid, the faked lookups alone decide
    seg = _segment(tmp_path, owner, 5, "0123abcd")
    monkeypatch.setattr(shm, "_start_time", lambda pid: None)  # /proc hides it (hidepid=2): no stat to read

    def kill(pid, sig):
        assert (pid, sig) == (owner, 0)
        raise PermissionError(1, "Operation not permitted")  # a process is there, another user's
    monkeypatch.setattr(shm.os, "kill", kill)
    assert shm.sweep_orphaned(str(tmp_path)) == [] and seg.exists()


def test_a_permission_error_reading_the_owner_is_alive(tmp_path, monkeypatch):
    """/proc/<pid>/stat exists but cannot be read (EACCES), and kill(pid, 0) fails as well: nothing proves the owner
    dead, the segment is kept."""
    seg = _segment(tmp_path, 4_000_001, 5, "0123abcd")
    real_open = open

    def fake_open(path, *a, **k):
        if str(path) == "/proc/4000001/stat":
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(shm.os, "kill", lambda pid, sig: (_ for _ in ()).throw(PermissionError(1, "not permitted")))
    assert shm.sweep_orphaned(str(tmp_path)) == [] and seg.exists()


def test_a_hidden_pid_that_no_process_holds_is_dead(tmp_path, monkeypatch):
    """The other side: /proc shows nothing and kill(pid, 0) says no such process (ESRCH): the owner is gone and our
    own segment is removed, so hidepid=2 does not stop the sweep from cleaning this user's dead runs."""
    dead = _dead_pid()
    seg = _segment(tmp_path, dead, 5, "0123abcd")
    monkeypatch.setattr(shm, "_start_time", lambda pid: None)
    assert shm.sweep_orphaned(str(tmp_path)) == [str(seg)] and not seg.exists()


def test_a_visible_owner_is_judged_by_its_start_time(tmp_path):
    """Readable /proc: the recorded start time decides (ours: alive, kept; another: the pid reused, removed)."""
    me = os.getpid()
    started = shm._start_time(me)
    live = _segment(tmp_path, me, started, "0123abcd")
    reused = _segment(tmp_path, me, started + 1, "89abcdef")
    assert shm.owner_alive(me, started) and not shm.owner_alive(me, started + 1)
    assert shm.sweep_orphaned(str(tmp_path)) == [str(reused)] and live.exists()
