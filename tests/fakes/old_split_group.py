"""The DWDP group formation the integration used before issue 13 (dwdp_trtllm/integration/trtllm/runtime.py
`_process_group` @ b9fe433): `MPI.COMM_WORLD.Split(0 if rank < world else MPI.UNDEFINED, rank)`, called by the
context ranks only. Kept as a GROUP_FN for tests/unit/test_trtllm_group.py, which shows that the fake
disaggregated world turns it into a timeout (defect D2: MPI_Comm_split is collective over all of COMM_WORLD,
and the generation ranks never make the call)."""
import os

from mpi4py import MPI


def old_process_group(cfg, rank: int):
    world = cfg.world_size
    if "FAKE_OLD_SPLIT_TIMEOUT" in os.environ:  # this Split's own timeout (the fake MPI reads it per collective)
        os.environ["FAKE_MPI_TIMEOUT"] = os.environ["FAKE_OLD_SPLIT_TIMEOUT"]
    return MPI.COMM_WORLD.Split(0 if rank < world else MPI.UNDEFINED, rank)
