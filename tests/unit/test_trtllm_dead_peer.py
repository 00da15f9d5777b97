"""A DWDP rank that dies while serving (transport/liveness.py PeerWatch), in the fake disaggregated world of
test_trtllm_fake_world on CPU (2 context ranks + 1 generation rank, shm transport): rank 1 exits after its first
forward, without shutdown, once rank 0 finished the same forward; rank 0 goes on once rank 1's process is gone
(the fake world orders the two by files and a pidfd, never by sleeps: tests/fakes/trtllm_worker.py).

- shm keeps the dead peer's memory (rank 0's mapping holds the unlinked segment's pages): rank 0's next forwards are
  bit-exact against the single-process reference, the death is said once as a warning, and its shutdown does not
  wait for the dead rank.
- a transport that does not keep it (legacy CUDA IPC; here the same shm transport told so, FAKE_KEEPS_PEER_MEMORY=0,
  which runs the same decision path): rank 0's next forward raises PeerLost at once, naming dwdp rank 1, its global
  rank and pid, and so does every later forward; no output is produced from the dead peer's memory.
The GPU case (vmm_fd and ipc between two processes sharing the GPU) is tests/gpu/test_dead_peer_cuda.py.
"""
import pytest

from test_trtllm_fake_world import run_world

pytestmark = pytest.mark.slow  # a multi-process fake world per case, ~15-30 s each on 2 cores


def test_survivor_stays_bit_exact_when_the_transport_keeps_the_memory(tmp_path):
    outs, ref = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge"}, steps=4,
                          env_extra={"FAKE_DIE_AFTER_FORWARD": "1:1"}, cfg_extra={"shutdown_timeout_s": 60})
    r0, r1 = outs
    assert r1["died_after_forward"] == 1
    assert r0["errors"] == {} and sorted(s for _, s in r0["outs"]) == [0, 1, 2, 3]
    for k, y in r0["outs"].items():
        assert y.equal(ref[k]), k  # forwards 1-3 ran after the peer was gone
    warn = [ln for ln in r0["log"] if "exited while serving" in ln]
    assert len(warn) == 1 and warn[0].startswith("WARNING") and "dwdp rank 1 (DWDP group 0" in warn[0], warn
    assert "global rank 1, pid" in warn[0] and "keeps the memory" in warn[0]
    # the dead peer is seen at once, not after the 60 s timeout (the margin is a loaded machine's)
    assert list(r0["barrier_missing"]) == [1] and r0["barrier_waited_s"] < 30.0, r0["barrier_missing"]


def test_survivor_fails_fast_naming_the_dead_rank_when_the_transport_does_not_keep_it(tmp_path):
    outs, ref = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge"}, steps=4,
                          env_extra={"FAKE_DIE_AFTER_FORWARD": "1:1", "FAKE_KEEPS_PEER_MEMORY": "0"},
                          cfg_extra={"shutdown_timeout_s": 60})
    r0 = outs[0]
    assert sorted(s for _, s in r0["outs"]) == [0] and r0["outs"][(0, 0)].equal(ref[(0, 0)])
    assert sorted(r0["errors"]) == [1, 2, 3]  # every forward after the death fails; none returns an output
    for e in r0["errors"].values():
        # raised as the forward starts: without the check it would copy from the dead peer's memory and wait on
        # the prefetcher's copies (300 s each at most): held to half of that, whatever the load
        assert e["type"] == "PeerLost" and e["seconds"] < 150.0, e  # half the 300 s it replaces
        assert "dwdp rank 1 (DWDP group 0" in e["message"] and "global rank 1, pid" in e["message"], e
        assert "does not keep a peer's memory" in e["message"], e


def test_a_peer_of_another_pid_namespace_is_never_watched(tmp_path):
    """A peer's pid is watched only when it reported our pid namespace: a context server in another container sharing
    /dev/shm (--ipc=host) reports a pid that names another process here, or none, and was taken for dead."""
    from dwdp_trtllm.core.transport.pidfd import pid_namespace, same_pid_namespace

    ns = pid_namespace()
    assert ns is not None  # the CPU machine's /proc is this process's
    assert same_pid_namespace(ns) and not same_pid_namespace(ns + 1) and not same_pid_namespace(None)
