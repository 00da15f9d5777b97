"""split_world_comm, as tensorrt_llm/llmapi/disagg_utils.py @ 0228a7122341 and an earlier
version (index id 103242683): server ranks in server order, context servers first; EVERY rank calls
`COMM_WORLD.Split(color=instance_idx, key=instance_sub_rank)` once, then `sub_comm.Barrier()`, and gets (is_leader,
instance_idx, sub_comm)."""
from mpi4py import MPI


def split_world_comm(ranks_per_instance):
    """ranks_per_instance: list of instance sizes (instance_num_ranks), context instances first."""
    rank, offset = MPI.COMM_WORLD.Get_rank(), 0
    instance_idx = instance_sub_rank = 0
    is_leader = False
    for idx, n in enumerate(ranks_per_instance):
        if offset <= rank < offset + n:
            instance_idx, instance_sub_rank = idx, rank - offset
            is_leader = rank == offset
        offset += n
    if rank >= offset:
        raise RuntimeError(f"rank {rank} is outside every server instance {ranks_per_instance}")
    sub_comm = MPI.COMM_WORLD.Split(color=instance_idx, key=instance_sub_rank)
    if sub_comm.Get_rank() != instance_sub_rank:
        raise RuntimeError(f"Expected sub_rank {sub_comm.Get_rank()} to be equal to instance_sub_rank {instance_sub_rank}")
    sub_comm.Barrier()
    return is_leader, instance_idx, sub_comm
