"""split_world_comm, as tensorrt_llm/llmapi/disagg_utils.py (stored id 56914744111): server ranks in server
order, context servers first; EVERY rank calls COMM_WORLD.Split(color=instance_idx, key=rank) once."""
from mpi4py import MPI


def split_world_comm(ranks_per_instance):
    """ranks_per_instance: list of instance sizes, context instances first. Returns (sub_comm, instance_idx)."""
    rank, start = MPI.COMM_WORLD.Get_rank(), 0
    for idx, n in enumerate(ranks_per_instance):
        if start <= rank < start + n:
            return MPI.COMM_WORLD.Split(color=idx, key=rank), idx
        start += n
    raise RuntimeError(f"rank {rank} is outside every server instance {ranks_per_instance}")
