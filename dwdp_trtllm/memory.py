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
#: FP8 checkpoints (DeepSeek-R1 / Qwen3 FP8: quantization_config e4m3, weight_block_size [128, 128]) quantise every
#: linear layer, dense ones included; embeddings and lm_head stay bf16. Used by the deployment fit (fit_deployment).
FP8_DENSE_LINEAR_BYTES = 1
#: KV cache a context server needs at the least: max_num_tokens tokens of every layer (bf16). TensorRT-LLM gives the
#: KV cache a fraction of the memory left after weights (kv_cache_config.free_gpu_memory_fraction), so a fit
#: without this floor could start and then serve no request of max_num_tokens.
KV_BYTES = 2
#: the largest dwdp_size fit_deployment tries for the smallest one that fits
MAX_DWDP_SIZE = 64


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


def kv_cache_floor_bytes(spec: ModelSpec, max_num_tokens: int) -> int:
    """KV cache of max_num_tokens tokens over every layer: MLA stores kv_lora + rope per token and layer,
    GQA 2 x kv_heads x head_dim (bf16)."""
    per = (spec.kv_lora_rank + spec.qk_rope_head_dim) if spec.attention == "mla" else 2 * spec.num_kv_heads * spec.head_dim
    return max_num_tokens * spec.num_layers * per * KV_BYTES


def deployment_dense_bytes(spec: ModelSpec, weight_dtype: str) -> int:
    """Dense weights as a TensorRT-LLM checkpoint of that dtype stores them (FP8: linear layers FP8, embeddings bf16)."""
    if weight_dtype != "fp8":
        return spec.dense_params() * DENSE_WEIGHT_BYTES[weight_dtype]
    emb = 2 * spec.vocab_size * spec.hidden_size
    return emb * 2 + (spec.dense_params() - emb) * FP8_DENSE_LINEAR_BYTES


@dataclass(frozen=True, slots=True)
class DeploymentFit:
    """Worst rank of a TensorRT-LLM context server group against the GPU (bytes; GB = 1e9 in messages)."""

    dwdp_size: int
    local_experts: int
    prefetch_slots: int
    dense_weights: int
    activations: int
    kv_cache_floor: int
    gpu_bytes: int
    smallest_fitting_dwdp_size: int | None  # derived placement, same dtype / slots / tokens

    @property
    def total(self) -> int:
        return self.local_experts + self.prefetch_slots + self.dense_weights + self.activations + self.kv_cache_floor

    @property
    def fits(self) -> bool:
        return self.total <= self.gpu_bytes

    def parts(self) -> dict[str, float]:
        """GB of each part of the total: experts held, prefetch slots, dense weights, activations, KV-cache floor."""
        return {"experts held": self.local_experts / 1e9, "prefetch slots": self.prefetch_slots / 1e9,
                "dense weights": self.dense_weights / 1e9, "activations": self.activations / 1e9,
                "KV-cache floor": self.kv_cache_floor / 1e9}

    def rows(self) -> list[tuple[str, float]]:
        """(name, GB) to print: the parts, the total and the GPU."""
        return [*self.parts().items(), ("total", self.total / 1e9), ("GPU", self.gpu_bytes / 1e9)]

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v:.1f} GB" for k, v in self.rows())
        return f"per-rank memory at dwdp_size {self.dwdp_size}: {parts}"


def _worst(spec, cfg, wd, max_num_tokens):
    from .placement import make_placement
    p = make_placement(cfg, spec.num_experts)
    ests = [estimate_rank_memory(spec, cfg, p, r, weight_dtype=wd, max_num_tokens=max_num_tokens)
            for r in range(cfg.dwdp_size)]
    return max(ests, key=lambda m: m.local_expert_bytes + m.prefetch_bytes)


def fit_deployment(spec: ModelSpec, cfg: DwdpConfig, gpu_bytes: int, *, weight_dtype: str,
                   max_num_tokens: int, max_dwdp_size: int = MAX_DWDP_SIZE) -> DeploymentFit:
    """Per-rank bytes = experts held + slots + dense weights + activations at max_num_tokens + KV-cache floor,
    for the worst rank of `cfg`; also the smallest dwdp_size (derived placement, no redundancy) that fits."""
    import dataclasses

    def parts(c):
        w = _worst(spec, c, weight_dtype, max_num_tokens)
        return (w.local_expert_bytes, w.prefetch_bytes, deployment_dense_bytes(spec, weight_dtype), w.activation_bytes,
                kv_cache_floor_bytes(spec, max_num_tokens))

    smallest = None
    for g in range(1, min(max_dwdp_size, spec.num_experts) + 1):
        c = dataclasses.replace(cfg, dwdp_size=g, num_groups=1, num_experts_per_worker=0, num_prefetch_experts=0,
                                redundant_experts=0)
        if sum(parts(c)) <= gpu_bytes:
            smallest = g
            break
    return DeploymentFit(cfg.dwdp_size, *parts(cfg), gpu_bytes=gpu_bytes, smallest_fitting_dwdp_size=smallest)
