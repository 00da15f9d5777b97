"""A rank that hangs (alive, not stopped, no progress) is named by the heartbeat it missed (issue 34 item 10), and the
failure paragraph comes first and alone: what the surviving ranks print goes below it, into the failure log."""
from __future__ import annotations

import glob
import os
import threading
import time

import pytest

from dwdp_trtllm.spec.config import load_bench_points
from dwdp_trtllm.engine import heartbeat
from dwdp_trtllm.engine.heartbeat import MISSED_AFTER_S, Beats
from dwdp_trtllm.engine.launcher import RankFailed, RankTimeout, run_modes
from dwdp_trtllm.engine.records import Request


def test_a_rank_stuck_outside_any_collective_while_the_others_wait_is_named_by_its_next_iteration():
    beats = Beats(started_at=0.0)
    for now in (0.0, 5.0, 10.0):  # the same place in every beat since t=0
        beats.record(2, "dep", 3, False, "dwdp_trtllm/engine/worker.py:230 run_rank", now=now)
    for r in (0, 1, 3):
        beats.record(r, "dep", 4, True, "torch/distributed/distributed_c10d.py:4000 all_gather", now=10.0)
    hang = beats.hung([0, 1, 2, 3], now=10.5)
    assert [r for r, _ in hang.hung] == [2] and hang.waiting == [0, 1, 3] and not hang.behind
    assert hang.reasons() == ("rank 2 hung: it missed the heartbeat of iteration 4 of mode dep (its last: iteration 3 "
                              "of mode dep, in dwdp_trtllm/engine/worker.py:230 run_rank for 10 s, not waiting for a "
                              "peer); rank(s) [0, 1, 3] wait in a collective")


def test_a_rank_the_others_wait_for_that_still_moves_is_behind_not_hung():
    """Importing or loading on a loaded machine: its beats name another frame each time."""
    beats = Beats(started_at=0.0)
    for now, where in ((0.0, "dwdp_trtllm/engine/worker.py:160 run_rank"), (9.0, "dwdp_trtllm/engine/fp8_linear.py:33 <module>")):
        beats.record(1, "dwdp", -1, False, where, now=now)
    beats.record(0, "dwdp", -1, True, "dwdp_trtllm/core/transport/close_barrier.py:80 close_barrier", now=10.0)
    hang = beats.hung([0, 1], now=10.5)
    assert hang.hung == [] and hang.behind == [(1, "setting up mode dwdp, in dwdp_trtllm/engine/fp8_linear.py:33 "
                                                   "<module>, still moving, not waiting for a peer")]
    assert hang.reasons().startswith("rank 1 is behind: setting up mode dwdp") and "hung" not in hang.reasons()


def test_a_rank_whose_beats_stopped_is_named_by_the_beat_it_missed_and_a_slow_rank_nobody_waits_for_is_not():
    beats = Beats(started_at=0.0)
    beats.record(0, "dwdp", 7, False, "dwdp_trtllm/engine/model.py:88 forward", now=20.0)
    beats.record(1, "dwdp", 5, False, "dwdp_trtllm/engine/model.py:88 forward", now=20.0 - MISSED_AFTER_S - 2)
    hang = beats.hung([0, 1, 2], now=20.0)
    assert [r for r, _ in hang.hung] == [1, 2] and hang.waiting == []
    assert "rank 1 hung: it missed its heartbeats of the last" in hang.reasons()
    assert "(its last: iteration 5 of mode dwdp, in dwdp_trtllm/engine/model.py:88 forward)" in hang.reasons()
    assert "rank 2 hung: it missed its first heartbeat (none in 20.0 s since the start)" in hang.reasons()
    assert "rank 0" not in hang.reasons()  # busy but beating, and nobody waits for it: slow, not hung


def test_ranks_that_all_wait_name_nobody():
    beats = Beats(started_at=0.0)
    for r in range(2):
        beats.record(r, "dep", 2, True, "torch/distributed/distributed_c10d.py:1 barrier", now=5.0)
    assert beats.hung([0, 1], now=5.5) is None


def test_the_heartbeat_thread_says_where_the_main_thread_is_and_whether_it_waits_for_peers():
    sent = []
    beat = heartbeat.Heartbeat(3, sent.append, period_s=0.05)
    beat.at("dwdp", 9)
    beat.start()
    end = time.monotonic() + 120.0  # three beats, however slowly the thread runs (polled: returns once they came)
    while len(sent) < 3 and time.monotonic() < end:
        time.sleep(0.01)  # this frame (a test file, not the package) is the main thread's innermost
    beat.stop()
    kind, rank, mode, it, waiting, where = sent[-1]
    assert (kind, rank, mode, it, waiting) == ("beat", 3, "dwdp", 9, False)
    assert where.endswith("test_the_heartbeat_thread_says_where_the_main_thread_is_and_whether_it_waits_for_peers")
    assert threading.active_count() >= 1 and not any(t.name == "dwdp-heartbeat" for t in threading.enumerate())


def _cfg(timeout_s: float):
    data = {"model": {"preset": "tiny", "dtype": "float32"}, "dwdp": {"weight_dtype": "float32", "dwdp_size": 2},
            "workload": {"max_num_tokens": 48}, "run": {"ranks": 2, "warmup_iters": 0, "timeout_s": timeout_s}}
    return load_bench_points(data)[1][0]


def _requests(n: int) -> list[list[Request]]:
    return [[Request(request_id=r * 1000 + i, rank=r, isl=24, arrival_s=0.0) for i in range(n)] for r in range(2)]


@pytest.mark.slow  # two ranks, waits for run.timeout_s: ~35-50 s each on 2 cores
@pytest.mark.timeout(900)
@pytest.mark.parametrize("modes", [["dep"], ["dwdp"], ["dep", "dwdp"]])
def test_a_hung_rank_is_named_by_the_heartbeat_it_missed(modes, capfd):
    """Rank 1 hangs at the start of iteration 2 (an injected wait, not a stop: it keeps beating). In DEP rank 0 waits
    for it in the next collective; in DWDP rank 0 finishes and waits at its close barrier, then the final barrier.
    With one mode the parent's deadline (run.timeout_s per mode) comes first (RankTimeout); with two, rank 0's gloo
    timeout (run.timeout_s) comes first and rank 0 reports it (RankFailed). Either way the failure names rank 1 and
    iteration 3, not 'ranks [0, 1] did not finish' nor rank 0's timeout."""
    mode = modes[0]
    with pytest.raises(RankTimeout if len(modes) == 1 else RankFailed) as exc:
        # run.timeout_s counts from the spawn, the ranks' imports included: 60 s leaves a loaded machine room to reach
        # the injected hang (with 30 s, a loaded machine can time the run out while the ranks still import torch)
        run_modes(_cfg(60), modes, _requests(6), fail_at=(1, 2, "hang"))
    text = str(exc.value)
    head = text.split("\n--- rank")[0]
    assert "rank 1 hung: it missed the heartbeat of iteration 3 of mode " + mode in text, text
    assert "iteration 2 of mode " + mode in head and "not waiting for a peer" in head, head
    assert "rank 0 hung" not in head and "did not finish" not in head, head
    if isinstance(exc.value, RankFailed):
        assert exc.value.rank == 1 and head.startswith("rank 1 failed in mode dep,dwdp: it hung"), head
        assert "then, as a consequence: rank 0:" in head, head
    else:
        assert head.startswith(f"modes {modes}: no result within run.timeout_s=60.0 per mode: rank 1 hung"), head
    err = capfd.readouterr().err
    assert "dwdp_trtllm:" not in err, err  # the survivors' warnings are not printed before the failure paragraph
    assert not glob.glob(f"/dev/shm/dwdp_n*_p{os.getpid()}_*"), "shared memory leaked"


def test_the_ranks_stderr_file_keeps_its_end_and_loses_its_name_once_every_rank_opened_it():
    from dwdp_trtllm.engine.rank_entry import STDERR_TAIL_BYTES, RankStderr
    from dwdp_trtllm.core.transport.shm import owner_tag

    err = RankStderr(owner_tag("0123abcd"))
    with open(err.path, "a") as f:  # what a rank's stderr (fd 2) is made
        err.forget_name()  # every rank beat: a kill -9 of the parent from now on leaves no file
        assert not os.path.exists(err.path)
        f.write("x" * STDERR_TAIL_BYTES + "the last warning\n")
    said = err.take()
    assert said.endswith("x" * 100 + "the last warning\n") and len(said) == STDERR_TAIL_BYTES


def test_a_stderr_file_a_killed_run_left_is_swept_by_the_next_run(tmp_path):
    """Killed before every rank opened it: the name carries the owner tag, so the next run's sweep removes it."""
    import subprocess
    import sys

    from dwdp_trtllm.core.transport import shm

    code = ("import sys; sys.path.insert(0, sys.argv[1]); from dwdp_trtllm.engine.rank_entry import RankStderr; "
            "from dwdp_trtllm.core.transport.shm import owner_tag; import tempfile; tempfile.tempdir = sys.argv[2]; "
            "RankStderr(owner_tag('0123abcd'))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-c", code, root, str(tmp_path)], check=True, timeout=120)
    (left,) = tmp_path.iterdir()
    assert "_stderr_" in left.name and shm.sweep_orphaned(str(tmp_path)) == [str(left)]
