"""transport/close_barrier.py on real gloo processes (3 ranks, CPU): the barrier before a rank releases its buffers,
used by the TensorRT-LLM adapter's shutdown and by DwdpRuntime.close. Every peer present: all pass together; a late
peer is waited for; an absent one is reported after the timeout (and, arriving later, leaves at once: the others'
timeout closed its connections), a dead one as soon as its connection is gone, and close_barrier returns (it never
raises for them)."""
import json
import os
import subprocess
import sys
import pytest

from dwdp_trtllm.core.transport.close_barrier import BarrierResult, close_barrier

WORKER = r"""
import json, os, sys, time
from datetime import timedelta
import torch.distributed as dist
from dwdp_trtllm.core.transport.close_barrier import close_barrier
rank, world, scenario, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
others = [r for r in range(world) if r != 1]


def wait_for(*names):
    # the scenario's order is kept by files the ranks write, never by sleeps: a loaded machine only makes it slower
    end = time.monotonic() + 300
    while not all(os.path.exists(f"{out}/{n}") for n in names):
        assert time.monotonic() < end, f"rank {rank}: {names} not written within 300 s"
        time.sleep(0.02)


dist.init_process_group("gloo", init_method="file://" + out + "/rdv", rank=rank, world_size=world,
                        timeout=timedelta(seconds=300))
group = dist.new_group(list(range(world)))
dist.barrier(group=group)  # everyone up before the scenario starts
# the others' timeout: 3 s where the test is that it runs out (absent), else far beyond any wait it should see
timeout = 3.0 if scenario == "absent" and rank != 1 else 60.0
if rank == 1 and scenario == "late":
    wait_for(*(f"entering{r}" for r in others))  # late: the others are at the barrier already
if rank == 1 and scenario == "absent":
    wait_for(*(f"r{r}.json" for r in others))  # past the others' timeout: they gave up on it; alive
if rank == 1 and scenario == "dead":
    os._exit(0)
open(f"{out}/entering{rank}", "w").close()
t0 = time.time()
r = close_barrier(group, timeout)
with open(f"{out}/r{rank}.json.tmp", "w") as f:
    json.dump({"missing": {str(k): v for k, v in r.missing.items()}, "waited_s": r.waited_s, "entered": t0,
               "left": time.time(), "ranks": list(r.ranks), "me": r.me, "timeout_s": timeout,
               "line": r.describe("DWDP group 0 (test)", timeout)}, f)
os.rename(f"{out}/r{rank}.json.tmp", f"{out}/r{rank}.json")
if rank != 1 and scenario == "absent":
    wait_for("r1.json")  # alive (and still in the group) when the late rank 1 arrives and leaves
"""


def _run(tmp_path, scenario, world=3):
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(os.getcwd()), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), scenario, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    for r, p in enumerate(procs):
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"rank {r}: {err[-2000:]}"
    return {r: json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(world)
            if (tmp_path / f"r{r}.json").exists()}


def test_no_group_or_a_group_of_one_waits_for_nothing():
    r = close_barrier(None, 1.0)
    assert isinstance(r, BarrierResult) and r.ok and r.waited_s == 0.0


def test_a_skipped_barrier_is_said_as_skipped_not_as_success():
    """No group, or torch.distributed torn down: the line said 'all 0 ranks reached the shutdown barrier'."""
    import torch.distributed as dist
    assert not dist.is_initialized()
    line = close_barrier(None, 1.0).describe("DWDP group 0 (t)", 1.0)
    assert line == "DWDP group 0 (t): shutdown barrier skipped (no process group: a single rank, or none was given)"
    r = close_barrier(object(), 1.0)  # a group handle, but torch.distributed is gone
    assert r.skipped.startswith("its process group is gone (torch.distributed torn down")
    assert "reached" not in r.describe("g", 1.0) and "skipped" in r.describe("g", 1.0)


@pytest.mark.slow  # 3 gloo processes per case, 2-8 s each
def test_all_present_and_a_late_peer_is_waited_for(tmp_path):
    (tmp_path / "ok").mkdir()
    got = _run(tmp_path / "ok", "ok")
    assert all(g["missing"] == {} for g in got.values()) and got[0]["ranks"] == [0, 1, 2]
    assert "all 3 ranks reached the shutdown barrier" in got[2]["line"]
    (tmp_path / "late").mkdir()
    got = _run(tmp_path / "late", "late")
    assert all(g["missing"] == {} for g in got.values())
    for r in (0, 2):  # nobody left before the late rank entered
        assert got[r]["left"] >= got[1]["entered"], (got[r], got[1])


@pytest.mark.slow
def test_an_absent_peer_is_reported_after_the_timeout(tmp_path):
    """Ranks 0 and 2 wait 3 s for rank 1, which arrives only after both gave up (their result files exist)."""
    got = _run(tmp_path, "absent")
    for r in (0, 2):
        assert got[r]["missing"] == {"1": "did not arrive (timed out)"}, got[r]
        # the timeout ran out (not earlier); the upper bound only says it did not hang (a loaded machine adds seconds)
        assert 2.9 <= got[r]["waited_s"] < 3.0 + 30, got[r]["waited_s"]
        assert "dwdp rank 1 (global rank 1): did not arrive (timed out)" in got[r]["line"]
        assert "1 of 2 peers not seen at the shutdown barrier within 3 s" in got[r]["line"]
    # the late rank, arriving while both are alive, does not wait its own timeout (60 s): gloo closed the connections
    # when they stopped waiting, which it reports as such (not as a process that is gone)
    late = got[1]
    assert sorted(late["missing"]) == ["0", "2"] and late["waited_s"] < late["timeout_s"] / 2, late
    assert all("stopped waiting at its own timeout" in why for why in late["missing"].values()), late


@pytest.mark.slow
def test_a_dead_peer_is_reported_without_waiting_the_timeout(tmp_path):
    """Rank 1 exits after the group is up; the others see its connection lost long before their 60 s timeout (a
    wall-clock bound on the whole test went red on a loaded machine: the time under test is the barrier's)."""
    got = _run(tmp_path, "dead")
    assert 1 not in got
    for r in (0, 2):
        assert list(got[r]["missing"]) == ["1"] and "connection lost" in got[r]["missing"]["1"], got[r]
        assert got[r]["waited_s"] < got[r]["timeout_s"] / 2, got[r]["waited_s"]
