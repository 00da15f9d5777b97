"""A rank that dies of a resource (issue 22): SIGBUS on a /dev/shm mapping, SIGKILL by the OOM killer, named as such."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from dwdp_trtllm import host_resources
from dwdp_trtllm.engine.launcher import describe_failure


def test_sigbus_names_dev_shm_with_its_free_space_and_the_container_remedy(monkeypatch):
    monkeypatch.setattr(host_resources, "shm_space", lambda path="/dev/shm": (1 << 20, 64 << 20))
    text = describe_failure(1, -signal.SIGBUS, {0: "Traceback\nConnectionResetError: peer gone"})
    assert text.startswith("it was killed by SIGBUS (signal 7) without reporting an error (a SIGBUS on a shared "
                           "mapping usually means /dev/shm ran out of space: /dev/shm has 0.00 GB free of 0.07 GB now;")
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


@pytest.mark.timeout(150)
def test_a_rank_killed_by_sigbus_during_dwdp_is_reported_with_dev_shm(tmp_path):
    from test_faults import _kill_group, _ranks, _start

    proc = _start(tmp_path, "--set", "run.modes=[dwdp]")
    try:
        kids = _ranks(proc)
        os.kill(kids[1].pid, signal.SIGBUS)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, err
        line = next(line for line in err.splitlines() if "run failed" in line)
        assert "rank 1 failed in mode dwdp: it was killed by SIGBUS (signal 7) without reporting an error (a SIGBUS " \
               "on a shared mapping usually means /dev/shm ran out of space: /dev/shm has" in line, line
        assert "Traceback" not in err, err
    finally:
        _kill_group(proc)
