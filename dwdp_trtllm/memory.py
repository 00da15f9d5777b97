"""Per-rank memory estimate of a DWDP rank and a check against the GPU's memory (pure, CPU).

What one dwdp_rank holds (bytes):
- local experts: its local routed experts of every MoE layer (weights + FP8 block scales);
- prefetch slots: min(num_slots, num_moe_layers) slots, each sized for the largest per-layer fetch
  of this rank (the placement is identical for every layer, so that is len(fetch_experts(rank)));
- dense weights: every replicated parameter (ModelSpec.dense_params(): embeddings, attention, dense
  MLPs, shared experts, routers), bf16 when the expert weights are bf16/fp8/nvfp4, float32 for float32;
- activations (optional, for a given max_num_tokens T): the peak working set of one layer; see
  `activation_bytes`. Allocator fragmentation, CUDA context and NCCL buffers are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import DwdpConfig
from .models import WEIGHT_BYTES, ModelSpec
from .placement import ExpertPlacement
from .schema import ConfigError

GiB = 1 << 30

#: bytes per replicated (dense) weight element by routed-expert weight dtype
DENSE_WEIGHT_BYTES = {"float32": 4, "bf16": 2, "fp8": 2, "nvfp4": 2}


class MemoryBudgetError(ConfigError):
    """The per-rank estimate does not fit the GPU; names the keys that shrink it and the numbers."""


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes one dwdp_rank needs; total_bytes is the sum of the four parts."""

    dwdp_rank: int
    num_local_experts: int
    num_fetched_experts: int
    num_moe_layers: int
    num_slots: int
    expert_bytes: int  # one routed expert of one layer, all tensors + scales
    local_expert_bytes: int
    prefetch_bytes: int
    dense_bytes: int
    activation_bytes: int  # 0 when no max_num_tokens was given

    @property
    def total_bytes(self) -> int:
        return self.local_expert_bytes + self.prefetch_bytes + self.dense_bytes + self.activation_bytes

    def breakdown(self) -> dict[str, int]:
        return {"local_experts": self.local_expert_bytes, "prefetch_slots": self.prefetch_bytes,
                "dense_weights": self.dense_bytes, "activations": self.activation_bytes, "total": self.total_bytes}


def _act_elem_bytes(weight_dtype: str) -> int:
    return 4 if weight_dtype == "float32" else 2


def activation_bytes(spec: ModelSpec, max_num_tokens: int, *, act_bytes: int = 2) -> int:
    """Peak transient bytes of one layer for T = max_num_tokens tokens (an estimate, not a measurement).

    Per token, in the activation dtype (act_bytes per element): the residual stream, the normed input
    and the layer output (3H), plus the larger of
      attention: q and k (heads x (qk_nope + qk_rope), or q heads + kv heads x head_dim for GQA),
                 v and the attention output, and for MLA the compressed q/kv latents;
      MoE: per routed copy (top_k) the permuted input H, gate/up 2I, activated I and expert output H,
           plus the shared experts' gate/up and activated 3I each.
    Plus fp32 router logits (E x 4 bytes) and top-k ids/weights (int64 + fp32 = 12 bytes per k).
    Flash attention is assumed (no T x T score matrix).
    """
    if max_num_tokens < 0:
        raise ValueError(f"max_num_tokens must be >= 0, got {max_num_tokens}")
    H, I, k = spec.hidden_size, spec.moe_intermediate, spec.top_k
    if spec.attention == "gqa":
        d = spec.head_dim
        attn = spec.num_heads * d * 2 + 2 * spec.num_kv_heads * d
    else:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        attn = (2 * spec.num_heads * qk + 2 * spec.num_heads * spec.v_head_dim
                + spec.q_lora_rank + spec.kv_lora_rank + spec.qk_rope_head_dim)
    moe = k * (2 * H + 3 * I) + 3 * I * spec.num_shared_experts if spec.num_moe_layers else 3 * spec.dense_intermediate
    per_token = act_bytes * (3 * H + max(attn, moe)) + (4 * spec.num_experts + 12 * k if spec.num_moe_layers else 0)
    return max_num_tokens * per_token


def estimate_rank_memory(spec: ModelSpec, cfg: DwdpConfig, placement: ExpertPlacement, rank: int, *,
                         weight_dtype: str | None = None, max_num_tokens: int | None = None) -> MemoryEstimate:
    """Memory of dwdp_rank `rank` (see the module docstring for what is counted)."""
    wd = weight_dtype or cfg.weight_dtype
    if wd not in WEIGHT_BYTES:
        raise ValueError(f"weight_dtype {wd!r}: expected one of {sorted(WEIGHT_BYTES)}")
    if placement.num_experts != spec.num_experts:
        raise ValueError(f"placement is for {placement.num_experts} experts, model {spec.name} has {spec.num_experts} experts")
    if not 0 <= rank < placement.dwdp_size:
        raise ValueError(f"dwdp_rank {rank} not in [0, {placement.dwdp_size})")
    per_expert = spec.expert_bytes(wd)
    n_local = len(placement.local_experts[rank])
    n_fetch = len(placement.fetch_experts(rank))
    layers = spec.num_moe_layers
    slots = min(cfg.num_slots, layers)
    act = 0 if max_num_tokens is None else activation_bytes(spec, max_num_tokens, act_bytes=_act_elem_bytes(wd))
    return MemoryEstimate(
        dwdp_rank=rank, num_local_experts=n_local, num_fetched_experts=n_fetch, num_moe_layers=layers,
        num_slots=slots, expert_bytes=per_expert, local_expert_bytes=n_local * layers * per_expert,
        prefetch_bytes=slots * n_fetch * per_expert, dense_bytes=spec.dense_params() * DENSE_WEIGHT_BYTES[wd],
        activation_bytes=act)


def estimate_group_memory(spec: ModelSpec, cfg: DwdpConfig, placement: ExpertPlacement, *,
                          weight_dtype: str | None = None, max_num_tokens: int | None = None) -> list[MemoryEstimate]:
    """estimate_rank_memory for every dwdp_rank of the group."""
    return [estimate_rank_memory(spec, cfg, placement, r, weight_dtype=weight_dtype, max_num_tokens=max_num_tokens)
            for r in range(placement.dwdp_size)]


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def check_memory(spec: ModelSpec, cfg: DwdpConfig, placement: ExpertPlacement, gpu_memory_bytes: int, *,
                 weight_dtype: str | None = None, max_num_tokens: int | None = None,
                 file: str | None = None) -> list[MemoryEstimate]:
    """Per-rank estimates; raises MemoryBudgetError when the largest exceeds `gpu_memory_bytes`.

    The message names the rank, the total and its parts, the GPU memory, and the config keys (with
    their values) that shrink the estimate.
    """
    if gpu_memory_bytes <= 0:
        raise ValueError(f"gpu_memory_bytes must be > 0, got {gpu_memory_bytes}")
    ests = estimate_group_memory(spec, cfg, placement, weight_dtype=weight_dtype, max_num_tokens=max_num_tokens)
    worst = max(ests, key=lambda m: (m.total_bytes, -m.dwdp_rank))
    if worst.total_bytes <= gpu_memory_bytes:
        return ests
    wd = weight_dtype or cfg.weight_dtype
    placement_keys = (f"dwdp.num_experts_per_worker={cfg.num_experts_per_worker}" if cfg.upstream_placement
                      else f"dwdp.redundant_experts={cfg.redundant_experts}")
    keys = [f"dwdp.dwdp_size={cfg.dwdp_size}", placement_keys, f"dwdp.prefetch_depth={cfg.prefetch_depth}",
            f"dwdp.weight_dtype={wd}", f"model.num_layers={spec.num_layers}"]
    if max_num_tokens is not None:
        keys.append(f"workload.max_num_tokens={max_num_tokens}")
    msg = (f"dwdp_rank {worst.dwdp_rank} needs about {_gib(worst.total_bytes)} ({worst.total_bytes} bytes): "
           f"local experts {worst.num_local_experts} x {worst.num_moe_layers} MoE layers = {_gib(worst.local_expert_bytes)}, "
           f"prefetch slots {worst.num_slots} x {worst.num_fetched_experts} experts = {_gib(worst.prefetch_bytes)}, "
           f"dense weights {_gib(worst.dense_bytes)}, activations {_gib(worst.activation_bytes)}; "
           f"that exceeds the GPU memory of {_gib(gpu_memory_bytes)} ({gpu_memory_bytes} bytes). "
           f"Change {', '.join(keys)} (larger dwdp_size, fewer redundant experts, a smaller weight dtype, "
           "fewer layers or tokens) to fit")
    raise MemoryBudgetError(file, "dwdp", msg)
