"""`dwdp calibrate` under faults: its all-to-all ranks die with it (kill -9 of the parent), and a model the CPU
functional check cannot finish is refused before anything runs, naming --model."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: generous bounds of the polls below (a loaded 2-core machine); on time they return at once
START_S, GONE_S = 300.0, 60.0


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _named_ranks(parent: subprocess.Popen, names: set[str]) -> list[psutil.Process]:
    """The parent's descendants that took one of `names` (they do so right after tying themselves to the parent:
    calibrate/dep_comm._worker); polled until all are there."""
    end = time.monotonic() + START_S
    while time.monotonic() < end:
        assert parent.poll() is None, parent.communicate()
        kids = []
        for k in psutil.Process(parent.pid).children(recursive=True):
            try:
                if k.name() in names:
                    kids.append(k)
            except psutil.NoSuchProcess:
                pass
        if {k.name() for k in kids} == names:
            return kids
        time.sleep(0.05)
    raise AssertionError(f"no processes named {sorted(names)} within {START_S:g} s")


@pytest.mark.slow  # runs `dwdp calibrate --device cpu` up to its all-to-all step: ~10 s on 2 cores
@pytest.mark.timeout(600)
def test_kill_9_of_calibrate_takes_its_ranks_with_it(tmp_path):
    """The all-to-all ranks are stopped (SIGSTOP: they cannot finish and leave on their own), then the parent gets
    SIGKILL: the ranks go with it (PR_SET_PDEATHSIG, as bench's ranks), none is left. They lived on (3-10 s while
    running; stopped, for ever)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "dwdp_trtllm.cli", "calibrate", "--device", "cpu", "--out",
                             str(tmp_path / "cal.json")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    kids: list[psutil.Process] = []
    try:
        kids = _named_ranks(proc, {"dwdp-a2a-rank0", "dwdp-a2a-rank1"})
        for k in kids:
            k.send_signal(signal.SIGSTOP)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=GONE_S)
        end = time.monotonic() + GONE_S
        while time.monotonic() < end and any(_alive(k.pid) for k in kids):
            time.sleep(0.05)
        assert [k.pid for k in kids if _alive(k.pid)] == [], "ranks left after kill -9 of dwdp calibrate"
        assert not (tmp_path / "cal.json").exists()
    finally:
        for k in kids:  # the ranks this test started (by pid): none should be left, but never leak them
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
