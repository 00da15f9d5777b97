"""D2: the DWDP group forms in a disaggregated MPI world whose generation ranks never call into DWDP.

Processes: context ranks 0..W-1 and generation ranks W..W+1 in one fake COMM_WORLD (tests/fakes/mpi4py:
collectives need every member; a missing member fails with a timeout, never a hang). The old
`MPI.COMM_WORLD.Split` on context ranks only times out here; `Create_group(group.Incl(ranks))` does not.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"


def _world(tmp_path, ctx: int, gen: int, dwdp_size: int, group_fn: str | None = None, timeout_s: float = 120.0,
           extra: dict | None = None, rendezvous_port: int | None = None, start_late: dict | None = None):
    """ctx context + gen generation ranks of tests/fakes/group_worker.py; rendezvous_port: no MPI world, each context
    rank its own process meeting at TRTLLM_DWDP_MASTER_ADDR:PORT (gen must be 0); start_late: {rank: seconds} waited
    before that rank (and the ones after it) start. timeout_s: the fake MPI's collectives (every rank must reach one
    within it: generous, a loaded machine starts the processes seconds apart)."""
    procs = []
    for r in range(ctx + gen):
        time.sleep((start_late or {}).get(r, 0.0))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("DWDP_TRTLLM", "OMPI_", "RANK", "WORLD_SIZE", "TRTLLM_DWDP_"))}
        env.update(FAKE_MPI_DIR=str(tmp_path / "mpi"), FAKE_MPI_TIMEOUT=str(timeout_s), FAKE_CTX_RANKS=str(ctx),
                   FAKE_DWDP_SIZE=str(dwdp_size), PYTHONPATH=os.pathsep.join([str(FAKES), str(REPO)]), **(extra or {}))
        if rendezvous_port is None:
            env.update(OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE=str(ctx + gen))
        else:
            env.update(TRTLLM_DWDP_RANK=str(r), TRTLLM_DWDP_MASTER_ADDR="127.0.0.1",
                       TRTLLM_DWDP_MASTER_PORT=str(rendezvous_port), TRTLLM_DWDP_RENDEZVOUS_TIMEOUT_S="300")
        if group_fn:
            env["GROUP_FN"] = group_fn
        procs.append(subprocess.Popen([sys.executable, str(FAKES / "group_worker.py")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        o, e = p.communicate(timeout=600)
        out.append((p.returncode, o, e))
    return out


@pytest.mark.parametrize("ctx,dwdp_size", [(4, 2)])
def test_group_forms_beside_generation_ranks(tmp_path, ctx, dwdp_size):
    res = _world(tmp_path, ctx=ctx, gen=2, dwdp_size=dwdp_size)
    for r, (rc, o, e) in enumerate(res):
        assert rc == 0, f"rank {r}: {e[-2000:]}"
    for r in range(ctx):  # all-reduce inside the rank's own DWDP group
        g = r // dwdp_size
        assert res[r][1].split()[:2] == ["ok", str(sum(range(g * dwdp_size, (g + 1) * dwdp_size)))]


def test_group_leaves_the_default_world_untouched_and_a_later_init_works(tmp_path):
    """The DWDP group is private: torch.distributed's default world is still uninitialised after it formed (today's
    code initialised a gloo world of the context ranks), and a later init_process_group of the context ranks (as
    TensorRT-LLM's TorchDist would) works and all-reduces, while the DWDP group keeps working beside it."""
    res = _world(tmp_path, ctx=4, gen=1, dwdp_size=2, extra={"FAKE_LATER_INIT": str(tmp_path / "later_init")})
    for r, (rc, out, err) in enumerate(res):
        assert rc == 0, f"rank {r}: {err[-2000:]}"
    for r in range(4):
        lines = res[r][1].splitlines()
        assert "default_world False" in lines, lines
        assert "later_init 6" in lines and "group_after 2" in lines, lines


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_group_forms_from_a_rendezvous_launch(tmp_path):
    """One process per context rank with TRTLLM_DWDP_RANK / TRTLLM_DWDP_MASTER_ADDR / TRTLLM_DWDP_MASTER_PORT and
    no MPI world at all (NVIDIA's srt-slurm DWDP prefill launch): the groups form (2 groups of 2) at the rendezvous.
    Today's code needs an MPI communicator and fails here (the fake MPI finds no world)."""
    res = _world(tmp_path, ctx=4, gen=0, dwdp_size=2, rendezvous_port=_free_port())
    for r, (rc, out, err) in enumerate(res):
        assert rc == 0, f"rank {r}: {err[-2000:]}"
        g = r // 2
        assert out.split()[:2] == ["ok", str(sum(range(g * 2, g * 2 + 2)))], out
        assert "default_world False" in out


def test_a_context_rank_that_starts_late_still_finds_the_rendezvous(tmp_path):
    """Ranks 2 and 3 start 8 s after ranks 0 and 1 (a slow node): rank 0, which serves the rendezvous store, waits for
    every context rank before it goes on, so it cannot finish and take the store down first (ranks 2 and 3 timed out
    connecting to a store that was gone)."""
    res = _world(tmp_path, ctx=4, gen=0, dwdp_size=2, rendezvous_port=_free_port(), start_late={2: 8.0})
    for r, (rc, out, err) in enumerate(res):
        assert rc == 0, f"rank {r}: {err[-2000:]}"
        assert out.split()[:2] == ["ok", str(sum(range(r // 2 * 2, r // 2 * 2 + 2)))], out


def test_rendezvous_variables_are_checked(monkeypatch):
    """A rendezvous rank without the master's address, or with a port that is no port, is one ConfigError naming the
    variable (env.dwdp_rendezvous); without TRTLLM_DWDP_RANK there is no rendezvous."""
    from dwdp_trtllm import env
    from dwdp_trtllm.errors import ConfigError
    for k in ("TRTLLM_DWDP_RANK", "TRTLLM_DWDP_MASTER_ADDR", "TRTLLM_DWDP_MASTER_PORT",
              "TRTLLM_DWDP_RENDEZVOUS_TIMEOUT_S"):
        monkeypatch.delenv(k, raising=False)
    assert env.dwdp_rendezvous() is None
    monkeypatch.setenv("TRTLLM_DWDP_RANK", "1")
    with pytest.raises(ConfigError, match="TRTLLM_DWDP_MASTER_ADDR: must be set"):
        env.dwdp_rendezvous()
    monkeypatch.setenv("TRTLLM_DWDP_MASTER_ADDR", "node0")
    monkeypatch.setenv("TRTLLM_DWDP_MASTER_PORT", "http")
    with pytest.raises(ConfigError, match=r"TRTLLM_DWDP_MASTER_PORT: must be a int 1..65535, got 'http'"):
        env.dwdp_rendezvous()
    monkeypatch.setenv("TRTLLM_DWDP_MASTER_PORT", "29600")
    assert env.dwdp_rendezvous() == {"rank": 1, "addr": "node0", "port": 29600, "timeout_s": 3600.0}


def test_fake_mpi_times_out_on_a_collective_not_all_members_join(tmp_path):
    """The fake is what makes the D2 test meaningful: Split over COMM_WORLD by context ranks only fails fast."""
    code = ("from mpi4py import MPI; import sys\n"
            "if MPI.COMM_WORLD.Get_rank() == 0: MPI.COMM_WORLD.Split(0, 0)\n")
    procs = []
    for r in range(2):
        env = dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="2", FAKE_MPI_DIR=str(tmp_path),
                   FAKE_MPI_TIMEOUT="2", PYTHONPATH=str(FAKES))
        procs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300))
    assert procs[1].returncode == 0
    assert procs[0].returncode != 0 and "not joined by world ranks [1]" in procs[0].stderr


@pytest.mark.slow  # waits for a timeout: ~17 s on 2 cores
def test_the_old_split_times_out_beside_generation_ranks(tmp_path):
    """D2 is caught: the pre-issue-13 `COMM_WORLD.Split` by context ranks only (tests/fakes/old_split_group.py,
    runtime.py @ b9fe433) fails with the fake MPI's timeout naming the generation ranks; they exit cleanly."""
    # the world's first Split (every rank, at start-up) gets the generous default; the old Split, which the
    # generation ranks never join, times out after 10 s (the context ranks reach it together, just after the first)
    res = _world(tmp_path, ctx=4, gen=2, dwdp_size=2, group_fn="old_split_group:old_process_group",
                 extra={"FAKE_OLD_SPLIT_TIMEOUT": "10"})
    for r in range(4):
        rc, _, err = res[r]
        assert rc != 0 and "TimeoutError" in err and "Split on world" in err and "not joined by world ranks [4, 5]" in err
    assert all(rc == 0 for rc, _, _ in res[4:])


def _gloo_workers() -> int:
    """This process's gloo worker threads (ProcessGroupGloo's pt_gloo_runloop), read from /proc."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
        except OSError:  # a thread that ended while we listed
            pass
    return names.count("pt_gloo_runloop")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc (Linux) to count threads")
def test_destroying_a_private_group_joins_its_gloo_workers():
    """destroy() frees the ProcessGroupGloo while Python is alive: shutdown() alone leaves its worker threads
    running into interpreter finalisation, where one still dropping a collective's tensors is killed taking the GIL
    and the rank aborts ("terminate called without an active exception"; seen under load, rank exit after a good
    run)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from dwdp_trtllm.core.transport import group_ops
    before = _gloo_workers()
    store = dist.HashStore()
    group = group_ops.PrivateGroup(dist.ProcessGroupGloo(store, 0, 1, timedelta(seconds=30)), (0,), store)
    t = torch.ones(4)
    group_ops.process_group(group).allreduce([t]).wait(timedelta(seconds=30))
    assert _gloo_workers() > before
    group_ops.destroy(group)
    assert group.closed and group_ops.process_group(group) is None
    assert _gloo_workers() == before
