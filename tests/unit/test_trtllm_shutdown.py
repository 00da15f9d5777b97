"""Executor shutdown releases the adapter's transport only after the DWDP group's shutdown barrier (adapter.close,
transport/close_barrier.py), on CPU: the fake disaggregated world of test_trtllm_fake_world (2 context ranks + 1
generation rank, shm transport, gloo group), every context rank's PyExecutor.shutdown (py_executor.py stored ids
54965565749, 67119085479, 57354091563) exiting our manager.

Upstream (dwdp.py VA era, stored id 56230681187: __exit__ = cleanup() + unregister; cleanup drops the
DWDPWeightManager, whose release (run by its __del__; weight_manager.py @ 11eba2696184) synchronizes,
releases the composite VA, then the transport, transport.py @ 205f8c25d5e2) has no barrier: VMM reference counting keeps an exporter's pages
alive while a peer maps them. Ours closes CUDA IPC memory and shm mappings too and must not release what a peer still
copies, so a rank waits for every peer's token, at most shutdown_timeout_s.
The released state (no /dev/shm map left, expert tensors empty) is asserted for every world in
test_trtllm_fake_world (assert_transport_released).
"""
import pytest

from test_trtllm_fake_world import assert_transport_released, run_world

pytestmark = pytest.mark.slow  # a multi-process fake world per case, ~10-20 s each on 2 cores


def test_fast_rank_waits_for_the_slow_one_before_releasing(tmp_path):
    """Rank 1 shuts down 3 s after rank 0 began its shutdown; rank 0 releases its transport only after rank 1 reached
    the barrier. Today's code never released: released_at was missing."""
    outs, _ = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge"}, reference=False,
                        env_extra={"FAKE_SHUTDOWN_DELAY": "1:3"})
    fast, slow = outs
    for r, got in enumerate(outs):
        assert_transport_released(got, r)
    assert fast["released_at"] >= slow["barrier_entered_at"] >= slow["shutdown_called_at"], (fast, slow)
    # it did wait: at the barrier from its own entry until the slow rank's (one clock, one machine)
    assert fast["barrier_waited_s"] >= slow["barrier_entered_at"] - fast["barrier_entered_at"] - 0.05, (fast, slow)
    assert any("all 2 ranks reached the shutdown barrier" in ln for ln in fast["log"]), fast["log"][-3:]


def _barrier_warnings(got):
    return [ln for ln in got["log"] if ln.startswith("WARNING") and "shutdown barrier" in ln]


def test_absent_peer_releases_after_the_timeout_with_a_warning(tmp_path):
    """Rank 1 is alive but begins its shutdown only after rank 0's returned, past shutdown_timeout_s 10: rank 0
    releases after the 10 s, with a warning naming the group and the missing rank. Rank 1, arriving late, finds the
    connection rank 0 closed when it stopped waiting (gloo closes it at a timeout) and releases at once, naming rank
    0; it does not wait its own timeout. (Rank 1 slept 6 s against a 2 s timeout: a loaded machine broke the order.)"""
    outs, _ = run_world(tmp_path, "hooks", "bf16", dwdp={"gemm": "merge"}, reference=False,
                        env_extra={"FAKE_SHUTDOWN_AFTER": "1:0"}, cfg_extra={"shutdown_timeout_s": 10})
    r0 = outs[0]
    assert_transport_released_despite_missing(r0, missing=1)
    # the timeout ran out, not earlier; the upper bound only says it did not hang (a loaded machine adds seconds)
    assert 9.9 <= r0["barrier_waited_s"] < 10 + 30, r0["barrier_waited_s"]
    (warn,) = _barrier_warnings(r0)
    assert "DWDP group 0 (dwdp_trtllm_" in warn and "global ranks [0, 1]" in warn, warn
    assert "dwdp rank 1 (global rank 1): did not arrive (timed out)" in warn and "within 10 s" in warn, warn
    assert r0["released_at"] < outs[1]["shutdown_called_at"]  # released before the late peer came: no hang
    r1 = outs[1]
    assert_transport_released_despite_missing(r1, missing=0)
    assert r1["barrier_waited_s"] < 5.0 and "stopped waiting at its own timeout" in r1["barrier_missing"][0], r1["log"][-3:]


def test_dead_peer_releases_with_a_warning(tmp_path):
    """Rank 1's process exits before its executor shuts down: rank 0 releases (the lost connection is seen at once,
    within the timeout at the latest), warning that rank 1 was not seen at the barrier (its connection lost)."""
    outs, _ = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge"}, reference=False,
                        env_extra={"FAKE_SHUTDOWN_DIE": "1"}, cfg_extra={"shutdown_timeout_s": 60})
    assert outs[1] == {"died_before_shutdown": True}
    r0 = outs[0]
    assert_transport_released_despite_missing(r0, missing=1)
    assert r0["barrier_waited_s"] < 30, r0["barrier_waited_s"]  # seen at once: far below the 60 s timeout
    assert "connection lost" in r0["barrier_missing"][1], r0["barrier_missing"]  # seen as gone, not timed out
    (warn,) = _barrier_warnings(r0)
    assert "dwdp rank 1 (global rank 1)" in warn and "releasing this rank's buffers anyway" in warn, warn


def assert_transport_released_despite_missing(got, missing: int):
    assert list(got["barrier_missing"]) == [missing], got["barrier_missing"]
    assert got["shm_before_shutdown"]["maps"] and got["shm_after_shutdown"] == {"maps": [], "files": []}
    assert got["released_at"] is not None and set(got["expert_numel_after"]) == {0}


def test_hung_executor_closes_locally_without_the_barrier(tmp_path):
    """Rank 1's executor hung (tests/fakes py_executor: its hang detector fired and a forward still runs on its worker
    thread), so upstream's PyExecutor.shutdown returns early; our wrap then closes rank 1 locally: no shutdown barrier
    (skipped, naming the hang detector), at once rather than after shutdown_timeout_s, and its transport stays mapped
    (the live worker thread may still read it). Rank 0 shuts down normally and releases after the timeout at the
    latest, naming rank 1. Today's code ran the collective close on rank 1 too (its barrier was not skipped)."""
    outs, _ = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge"}, reference=False,
                        env_extra={"FAKE_HANG": "1"}, cfg_extra={"shutdown_timeout_s": 10})
    r0, r1 = outs
    assert r1["barrier_skipped"] is not None and "hang detector fired" in r1["barrier_skipped"], r1["barrier_skipped"]
    # at once: no barrier, far below the 10 s it would wait at one (the margin is a loaded machine's)
    assert r1["barrier_waited_s"] == 0.0 and r1["shutdown_s"] < 5.0, (r1["barrier_waited_s"], r1["shutdown_s"])
    assert r1["released_at"] is None and r1["shm_after_shutdown"]["maps"], r1["shm_after_shutdown"]
    # nothing the live forward may still use is taken from under it: its expert tensors stay bound (rank 0 empties its)
    assert 0 not in r1["expert_numel_after"] and set(r0["expert_numel_after"]) == {0}, r1["expert_numel_after"]
    assert any("stay mapped until the process exits" in ln and "worker thread is still running" in ln
               for ln in r1["log"]), r1["log"][-3:]
    assert r1["closed_at_shutdown"] and r1["global_after_shutdown"] == "None"
    assert_transport_released_despite_missing(r0, missing=1)
    assert r0["barrier_waited_s"] < 10 + 30, r0["barrier_waited_s"]  # the timeout at the latest, plus a loaded machine
