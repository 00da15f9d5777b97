"""DEP baseline: attention data-parallel, experts partitioned, two all-to-alls per MoE layer.

Shape legend: T tokens on this rank, H hidden, K top-k, P = T*K routed (token, expert) pairs,
R pairs received from all ranks, W world size (EP group).

    pairs sorted by owner rank -> counts all-to-all (every rank waits here for the slowest: sync_wait)
    -> dispatch all-to-all of x rows -> local grouped expert MLP -> combine all-to-all -> weighted sum

This is the synchronising baseline: a rank with fewer tokens waits for the slowest at every layer.
No Python loop over tokens; the only host sync is reading the split sizes (as every EP all-to-all
built on all_to_all_single does).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .moe_compute import combine, expert_mlp, gather_sorted, identity_map, routed_experts_forward
from .timing import PhaseTimer, phase


class A2A:
    """all_to_all_single for DEP: NCCL (one GPU per rank), gloo (CPU), or CUDA IPC buffers when
    several ranks share a GPU (NCCL refuses duplicate GPUs; see ipc_a2a.py). `kind` names the path
    and is reported with the results."""

    def __init__(self, group, device: torch.device, *, rank: int, world: int, tag: str):
        self.group, self.device, self.rank, self.world = group, device, rank, world
        backend = dist.get_backend(group)
        self.ipc = None
        if device.type == "cuda" and backend == "gloo":
            from .ipc_a2a import IpcAllToAll
            self.ipc = IpcAllToAll(group, rank, world, device, tag)
        self.kind = "cuda-ipc" if self.ipc is not None else backend

    def splits(self, send_counts_W: torch.Tensor) -> tuple[list[int], list[int]]:
        """(in_splits, out_splits): rows this rank sends to / receives from each rank (host sync)."""
        if self.ipc is not None:
            m = self.ipc.exchange_counts(send_counts_W)
            return m[self.rank], [m[i][self.rank] for i in range(self.world)]
        recv_counts_W = torch.empty_like(send_counts_W)
        dist.all_to_all_single(recv_counts_W, send_counts_W, group=self.group)
        return send_counts_W.tolist(), recv_counts_W.tolist()

    def __call__(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int],
                 *, combine: bool = False) -> torch.Tensor:
        if self.ipc is not None:
            return self.ipc(out, inp, out_splits, in_splits, transpose=combine)
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)
        return out

    def close(self) -> None:
        if self.ipc is not None:
            self.ipc.close()


def expert_range(num_experts: int, ep_rank: int, ep_size: int) -> tuple[int, int]:
    """[start, end) of the experts DEP rank `ep_rank` owns: contiguous near-equal blocks."""
    return num_experts * ep_rank // ep_size, num_experts * (ep_rank + 1) // ep_size


class DepExperts:
    """ExpertBackend for DEP. Rank `ep_rank` holds experts expert_range(E, ep_rank, ep_size) of every MoE layer.

    weights[m]: {"w13": [n_local, 2I, H], "w2": [n_local, H, I]} (model dtype, or fp8 + "*_scale" tensors).
    """

    def __init__(self, *, group, ep_rank: int, ep_size: int, num_experts: int,
                 weights: list[dict[str, torch.Tensor]], device: torch.device, gemm: str, timer: PhaseTimer | None = None,
                 tag: str = "dwdp_dep"):
        self.group, self.ep_rank, self.ep_size = group, ep_rank, ep_size
        self.num_experts = num_experts
        self.start, self.end = expert_range(num_experts, ep_rank, ep_size)
        self.weights, self.device, self.gemm, self.timer = weights, device, gemm, timer
        self.a2a = A2A(group, device, rank=ep_rank, world=ep_size, tag=tag)
        # owner rank of every expert (the same contiguous split on every rank)
        owner = torch.empty(num_experts, dtype=torch.int64)
        for r in range(ep_size):
            owner[slice(*expert_range(num_experts, r, ep_size))] = r
        self.owner_E = owner.to(device)
        n_local = self.end - self.start
        self.local_buf_idx, self.local_row = identity_map(n_local, device)


    def on_attention_done(self, moe_idx: int) -> None:
        pass

    def forward(self, moe_idx: int, x_TH: torch.Tensor, topk_ids_TK: torch.Tensor,
                topk_weights_TK: torch.Tensor) -> torch.Tensor:
        T, H = x_TH.shape
        K = topk_ids_TK.shape[1]
        W = self.ep_size
        if W == 1:  # one rank owns every expert: nothing to exchange
            return self._forward_alone(moe_idx, x_TH, topk_ids_TK, topk_weights_TK)
        with phase(self.timer, "other", moe_idx):
            # Expert order is also owner order (contiguous expert blocks), and matches the reference's
            # summation order in combine().
            send_x, perm_P, offs_E, counts_E = gather_sorted(x_TH, topk_ids_TK, self.num_experts)
            send_ids = topk_ids_TK.reshape(-1).index_select(0, perm_P)
            send_counts_W = torch.zeros(W, dtype=torch.int64, device=x_TH.device).index_add_(0, self.owner_E, counts_E)
        with phase(self.timer, "sync_wait", moe_idx):
            # The first collective of the layer: every rank blocks here until the slowest arrives.
            in_splits, out_splits = self.a2a.splits(send_counts_W)
        R = sum(out_splits)
        with phase(self.timer, "all_to_all", moe_idx):
            recv_x = torch.empty(R, H, dtype=x_TH.dtype, device=x_TH.device)
            recv_ids = torch.empty(R, dtype=send_ids.dtype, device=x_TH.device)
            self.a2a(recv_x, send_x, out_splits, in_splits)
            self.a2a(recv_ids, send_ids, out_splits, in_splits)
        with phase(self.timer, "expert_gemm", moe_idx):
            local_ids = (recv_ids - self.start).view(-1, 1)
            x_sorted, perm_R, offs_E, _ = gather_sorted(recv_x, local_ids, self.end - self.start)
            w = self.weights[moe_idx]
            y_sorted = expert_mlp(x_sorted, offs_E, [w["w13"]], [w["w2"]], self.local_buf_idx, self.local_row, gemm=self.gemm,
                                  w13_scale_sources=[w["w13_scale"]] if "w13_scale" in w else None,
                                  w2_scale_sources=[w["w2_scale"]] if "w2_scale" in w else None)
            y_R = torch.empty_like(y_sorted)
            y_R[perm_R] = y_sorted
        with phase(self.timer, "all_to_all", moe_idx):
            back_P = torch.empty(T * K, H, dtype=y_R.dtype, device=x_TH.device)
            self.a2a(back_P, y_R, in_splits, out_splits, combine=True)
        with phase(self.timer, "other", moe_idx):
            return combine(back_P, perm_P, topk_weights_TK, T, out_dtype=x_TH.dtype)

    def _forward_alone(self, moe_idx: int, x_TH: torch.Tensor, topk_ids_TK: torch.Tensor,
                       topk_weights_TK: torch.Tensor) -> torch.Tensor:
        """ep_size 1: no collective; the routed-expert op the TensorRT-LLM host and DWDP run
        (moe_compute.routed_experts_forward), timed as one expert_gemm phase (its floor is the GEMMs alone)."""
        with phase(self.timer, "expert_gemm", moe_idx):
            w = self.weights[moe_idx]
            return routed_experts_forward(x_TH, topk_ids_TK, topk_weights_TK, [w["w13"]], [w["w2"]], self.local_buf_idx,
                                          self.local_row, gemm=self.gemm,
                                          w13_scale_sources=[w["w13_scale"]] if "w13_scale" in w else None,
                                          w2_scale_sources=[w["w2_scale"]] if "w2_scale" in w else None)
