"""all_to_all_single over CUDA IPC receive buffers, for ranks that share a GPU (NCCL refuses that).

Each rank exports one receive buffer through the ipc transport. A call writes my rows for rank j
straight into j's buffer at the offset the full send matrix gives (rows from lower ranks first, the
all_to_all_single output order), with cudaMemcpyAsync on the current stream; a gloo barrier orders
writers before readers and readers before the next writers. Split sizes come from the counts
exchange that DEP does anyway (all_gather of every rank's send counts), so every rank knows the
whole matrix and grows the buffers identically when a call needs more room.

Used only for the DEP baseline on one shared GPU, where it copies at HBM speed (NVLink would be
slower): DEP is favoured, not penalised, by it.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..core.memcpy import per_op_memcpy
from ..core.transport import make_transport


class IpcAllToAll:
    def __init__(self, group, rank: int, world: int, device: torch.device, tag: str):
        self.group, self.rank, self.world, self.device, self.tag = group, rank, world, device, tag
        self.capacity = 0
        self.transport = None
        self.generation = 0
        self.matrix: list[list[int]] | None = None  # rows rank i sends to rank j, set by exchange_counts

    def exchange_counts(self, send_counts_W: torch.Tensor) -> list[list[int]]:
        """All ranks' send counts (host sync + gloo all_gather): matrix[i][j] = rows i sends to j."""
        mine = send_counts_W.to("cpu", torch.int64)
        allc = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(allc, mine, group=self.group)
        self.matrix = [c.tolist() for c in allc]
        return self.matrix

    def _ensure(self, nbytes: int) -> None:
        if nbytes <= self.capacity:
            return
        # Every rank computes the same nbytes from the same matrix: the collective re-open is matched.
        if self.transport is not None:
            torch.cuda.synchronize(self.device)
            dist.barrier(group=self.group)
            self.transport.close()
        self.generation += 1
        self.capacity = max(int(nbytes * 1.25), 1 << 20)
        self.transport = make_transport("ipc", group=self.group, dwdp_rank=self.rank, dwdp_size=self.world,
                                        device=self.device, tag=f"{self.tag}_a2a{self.generation}")
        self.recv = self.transport.allocate({"recv": self.capacity})["recv"]
        self.transport.open_peers()

    def __call__(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int],
                 *, transpose: bool = False) -> torch.Tensor:
        """Like dist.all_to_all_single with split sizes; `transpose` marks the combine direction
        (rank i sends matrix[j][i] rows back to j)."""
        assert self.matrix is not None, "exchange_counts first"
        m = self.matrix if not transpose else [list(col) for col in zip(*self.matrix)]
        # from the row shape, not from data: every rank must compute the same sizes even with 0 rows
        row_bytes = inp.element_size()
        for d in inp.shape[1:]:
            row_bytes *= d
        W, me = self.world, self.rank
        max_recv = max(sum(m[i][j] for i in range(W)) for j in range(W)) * row_bytes
        self._ensure(max_recv)
        stream = torch.cuda.current_stream(self.device).cuda_stream
        torch.cuda.current_stream(self.device).synchronize()
        dist.barrier(group=self.group)  # every reader finished with its buffer
        src = inp.contiguous()
        dsts, srcs, sizes, src_off = [], [], [], 0
        for j in range(W):
            n = m[me][j] * row_bytes
            if n:  # my rows for rank j go after the rows of lower ranks in j's receive buffer
                dsts.append(self.transport.peer_buffer(j, "recv").data_ptr() + sum(m[i][j] for i in range(me)) * row_bytes)
                srcs.append(src.data_ptr() + src_off)
                sizes.append(n)
            src_off += n
        per_op_memcpy(dsts, srcs, sizes, stream)
        torch.cuda.current_stream(self.device).synchronize()
        dist.barrier(group=self.group)  # every writer finished
        total = sum(m[i][me] for i in range(W)) * row_bytes
        if total:
            out.view(-1).view(torch.uint8)[:total].copy_(self.recv[:total])
        return out

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None
