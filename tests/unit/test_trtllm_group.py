"""D2: the DWDP group forms in a disaggregated MPI world whose generation ranks never call into DWDP.

Processes: context ranks 0..W-1 and generation ranks W..W+1 in one fake COMM_WORLD (tests/fakes/mpi4py:
collectives need every member; a missing member fails with a timeout, never a hang). The old
`MPI.COMM_WORLD.Split` on context ranks only times out here; `Create_group(group.Incl(ranks))` does not.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"


def _world(tmp_path, ctx: int, gen: int, dwdp_size: int, group_fn: str | None = None, timeout_s: float = 8.0):
    procs = []
    for r in range(ctx + gen):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DWDP_TRTLLM", "OMPI_", "RANK", "WORLD_SIZE"))}
        env.update(OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE=str(ctx + gen), FAKE_MPI_DIR=str(tmp_path / "mpi"),
                   FAKE_MPI_TIMEOUT=str(timeout_s), FAKE_CTX_RANKS=str(ctx), FAKE_DWDP_SIZE=str(dwdp_size),
                   PYTHONPATH=os.pathsep.join([str(FAKES), str(REPO)]))
        if group_fn:
            env["GROUP_FN"] = group_fn
        procs.append(subprocess.Popen([sys.executable, str(FAKES / "group_worker.py")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        o, e = p.communicate(timeout=120)
        out.append((p.returncode, o, e))
    return out


@pytest.mark.parametrize("ctx,dwdp_size", [(4, 2)])
def test_group_forms_beside_generation_ranks(tmp_path, ctx, dwdp_size):
    res = _world(tmp_path, ctx=ctx, gen=2, dwdp_size=dwdp_size)
    for r, (rc, o, e) in enumerate(res):
        assert rc == 0, f"rank {r}: {e[-2000:]}"
    for r in range(ctx):  # all-reduce inside the rank's own DWDP group
        g = r // dwdp_size
        assert res[r][1].split() == ["ok", str(sum(range(g * dwdp_size, (g + 1) * dwdp_size)))]


def test_fake_mpi_times_out_on_a_collective_not_all_members_join(tmp_path):
    """The fake is what makes the D2 test meaningful: Split over COMM_WORLD by context ranks only fails fast."""
    code = ("from mpi4py import MPI; import sys\n"
            "if MPI.COMM_WORLD.Get_rank() == 0: MPI.COMM_WORLD.Split(0, 0)\n")
    procs = []
    for r in range(2):
        env = dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="2", FAKE_MPI_DIR=str(tmp_path),
                   FAKE_MPI_TIMEOUT="2", PYTHONPATH=str(FAKES))
        procs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60))
    assert procs[1].returncode == 0
    assert procs[0].returncode != 0 and "not joined by world ranks [1]" in procs[0].stderr


@pytest.mark.slow  # waits for a timeout: ~17 s on 2 cores
def test_the_old_split_times_out_beside_generation_ranks(tmp_path):
    """D2 is caught: the pre-issue-13 `COMM_WORLD.Split` by context ranks only (tests/fakes/old_split_group.py,
    runtime.py @ b9fe433) fails with the fake MPI's timeout naming the generation ranks; they exit cleanly."""
    res = _world(tmp_path, ctx=4, gen=2, dwdp_size=2, group_fn="old_split_group:old_process_group", timeout_s=4.0)
    for r in range(4):
        rc, _, err = res[r]
        assert rc != 0 and "TimeoutError" in err and "Split on world" in err and "not joined by world ranks [4, 5]" in err
    assert all(rc == 0 for rc, _, _ in res[4:])
