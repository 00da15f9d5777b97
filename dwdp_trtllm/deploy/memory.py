"""The one memory model: bytes one rank of a deployment holds, part by part, for DWDP and DEP (pure, CPU).

Unit: GB = 1e9 bytes everywhere a user sees memory (flags `--gpu-memory-gb`, JSON keys `*_gb`), as GPU
datasheets print it (H200: 141 GB). `rank_memory` is the only function that prices a rank; `dwdp plan`,
`dwdp plan-placement` and `dwdp gen-config` (context and generation servers) all call it.

Parts of one rank (`PARTS`, bytes):
- routed experts held: DWDP: the rank's local experts of every MoE layer (placement.py, redundancy
  included); DEP: its ceil(E/G) experts of every MoE layer. Scales included (weight_formats.py). On a TensorRT-LLM
  server the checkpoint's MTP layers count as MoE layers (`priced_moe_layers`; their dense parts are not priced).
- prefetch slots (DWDP only): `prefetch_slot_count` slots (min(prefetch_depth + 1, MoE layers), at least 2),
  each holding the largest per-layer fetch of the rank, or every expert of the layer on the TensorRT-LLM
  adapter's merge path (`slot_experts`: the path is an input, `gemm`; RankMemory.gemm says which was priced).
- all-to-all buffers (DEP only): ESTIMATE, dispatch send + combine receive buffers of max_num_tokens x top_k
  hidden vectors in bf16 (the received / expert-output copies are counted in the activations).
- dense weights: every replicated parameter (`dense_param_groups`) as the deployment stores it
  (`dense_weight_bytes`): bf16 for bf16 / mxfp4 / nvfp4 experts (those releases quantise the routed experts
  only: an upper bound), FP8 with 128x128 fp32 block scales for every linear layer of an FP8 release
  (DeepSeek-R1 / Qwen3 FP8), embeddings, head, norms and routers in bf16. `engine_dense=True` prices our
  embedded engine instead (dense weights in the activation dtype).
- activations: ESTIMATE of one layer's peak working set at max_num_tokens (`activation_bytes`).
- KV-cache floor: the KV cache of max_num_tokens tokens over every layer (bf16), without which a server
  starts and then serves no request of that length.
Not counted: CUDA context, NCCL / UCX buffers, allocator fragmentation, CUDA graphs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..byte_units import GB, fmt_bytes
from ..spec.config import DwdpConfig
from ..spec.models import ModelSpec
from ..core.placement import ExpertPlacement, make_placement
from ..core.prefetcher import prefetch_slot_count
from ..spec.schema import ConfigError
from ..spec.weight_formats import DEPLOY_FORMATS, check_format, linear_bytes

UNIT = "GB"  # byte_units.GB = 1e9 bytes
#: shared defaults of every command that prices a deployment (plan, plan-placement, gen-config)
DEFAULT_MODEL = "deepseek-r1"
DEFAULT_GPU = "h200"
DEFAULT_WEIGHT_DTYPE = "fp8"
DEFAULT_MAX_NUM_TOKENS = 16384
#: weight formats a deployment can be priced in (weight_formats.py)
WEIGHT_DTYPES = DEPLOY_FORMATS
#: KV cache element bytes (bf16)
KV_BYTES = 2
#: all-to-all buffer element bytes (bf16 dispatch)
A2A_BYTES = 2
#: the largest group size `smallest_fitting` tries
MAX_DWDP_SIZE = 64
MODES = ("dwdp", "dep")
#: part name -> label a user reads
PARTS = {"routed_experts": "routed experts held", "prefetch_slots": "prefetch slots",
         "all_to_all": "all-to-all buffers", "dense_weights": "dense weights", "activations": "activations",
         "kv_cache_floor": "KV-cache floor"}


def gb(nbytes: float) -> float:
    """Bytes -> GB (1e9), the unit every command shows."""
    return nbytes / GB


# ---- parts ------------------------------------------------------------------------------------------
def dense_param_groups(spec: ModelSpec) -> dict[str, list[tuple[int, int, int]]]:
    """Replicated parameters as (out, in, count) matrices: `linear` (attention projections, dense MLPs,
    shared experts: quantised in an FP8 release), `embedding` (embeddings + lm_head) and `other` (norms,
    routers: kept in bf16). Their sum is ModelSpec.dense_params()."""
    H, L, nh = spec.hidden_size, spec.num_layers, spec.num_heads
    lin: list[tuple[int, int, int]] = []
    if spec.attention == "gqa":
        d, kv = spec.head_dim, spec.num_kv_heads
        lin += [(nh * d, H, L), (kv * d, H, 2 * L), (H, nh * d, L)]
    else:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        lin += [(spec.q_lora_rank, H, L), (nh * qk, spec.q_lora_rank, L)] if spec.q_lora_rank else [(nh * qk, H, L)]
        lin += [(spec.kv_lora_rank + spec.qk_rope_head_dim, H, L),
                (nh * (spec.qk_nope_head_dim + spec.v_head_dim), spec.kv_lora_rank, L), (H, nh * spec.v_head_dim, L)]
    if spec.first_k_dense:
        lin += [(spec.dense_intermediate, H, 2 * spec.first_k_dense), (H, spec.dense_intermediate, spec.first_k_dense)]
    if spec.num_shared_experts and spec.num_moe_layers:
        si = spec.moe_intermediate * spec.num_shared_experts
        lin += [(si, H, 2 * spec.num_moe_layers), (H, si, spec.num_moe_layers)]
    other = [(1, 2 * H, L)] + ([(spec.num_experts, H, spec.num_moe_layers)] if spec.num_moe_layers else [])
    return {"linear": lin, "embedding": [(spec.vocab_size, H, 2)], "other": other}


def dense_weight_bytes(spec: ModelSpec, weight_dtype: str, *, engine_dense: bool = False) -> int:
    """Replicated weights of one rank (module docstring: how each release stores them)."""
    check_format(weight_dtype)
    groups = dense_param_groups(spec)
    if engine_dense or weight_dtype != "fp8":
        per = 4 if weight_dtype == "float32" else 2
        return per * spec.dense_params()
    return (sum(c * linear_bytes(o, i, "fp8") for o, i, c in groups["linear"])
            + sum(c * linear_bytes(o, i, "bf16") for o, i, c in groups["embedding"] + groups["other"]))


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


def kv_cache_floor_bytes(spec: ModelSpec, max_num_tokens: int) -> int:
    """KV cache of max_num_tokens tokens over every layer: MLA stores kv_lora + rope per token and layer,
    GQA 2 x kv_heads x head_dim (bf16)."""
    per = (spec.kv_lora_rank + spec.qk_rope_head_dim) if spec.attention == "mla" else 2 * spec.num_kv_heads * spec.head_dim
    return max_num_tokens * spec.num_layers * per * KV_BYTES


#: the share of a generation rank's free memory its KV cache gets: upstream's generation servers'
#: kv_cache_config.free_gpu_memory_fraction (examples/dwdp/reproduce.py @ 1f939488, build_worker_config)
GEN_KV_FRACTION = 0.75


def kv_batch_fit(room_bytes: float, kv_bytes_per_token: int, seq_tokens: int) -> int:
    """Requests of seq_tokens (ISL + OSL) whose KV cache fits GEN_KV_FRACTION of room_bytes, what a generation rank
    has left after its weights and activations: the one count gen-config writes and `dwdp size` simulates."""
    return int(max(room_bytes, 0) * GEN_KV_FRACTION) // (kv_bytes_per_token * seq_tokens)


def all_to_all_bytes(spec: ModelSpec, max_num_tokens: int) -> int:
    """DEP's dispatch send + combine receive buffers: max_num_tokens x top_k hidden vectors each, bf16 (ESTIMATE)."""
    return 2 * max_num_tokens * spec.top_k * spec.hidden_size * A2A_BYTES


# ---- one rank ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RankMemory:
    """Bytes one rank holds, by part (PARTS); gpu_bytes None = no budget given."""

    mode: str  # dwdp | dep
    group_size: int  # dwdp_size (DWDP) or expert-parallel size (DEP)
    rank: int  # the rank priced (DWDP: the worst one unless asked)
    weight_dtype: str
    max_num_tokens: int
    num_experts_held: int
    num_fetched_experts: int
    num_slots: int
    routed_experts: int
    prefetch_slots: int
    all_to_all: int
    dense_weights: int
    activations: int
    kv_cache_floor: int
    gpu_bytes: int | None = None
    #: the adapter path whose prefetch slots are priced (slot_experts); None: the embedded engine's (fetched experts)
    gemm: str | None = None

    @property
    def total(self) -> int:
        return sum(getattr(self, p) for p in PARTS)

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_bytes is None else self.total <= self.gpu_bytes

    def parts(self) -> dict[str, int]:
        """{label: bytes} of every part, in PARTS order."""
        return {label: getattr(self, p) for p, label in PARTS.items()}

    def to_dict(self) -> dict:
        """The JSON every command prints: GB, rounded to 1 kB, the unit in each key."""
        d = {"unit": UNIT, "mode": self.mode, "group_size": self.group_size, "rank": self.rank,
             "weight_dtype": self.weight_dtype, "max_num_tokens": self.max_num_tokens,
             "num_experts_held": self.num_experts_held, "num_fetched_experts": self.num_fetched_experts,
             "gemm": self.gemm}
        d.update({f"{p}_gb": round(gb(getattr(self, p)), 6) for p in PARTS})
        d["total_gb"] = round(gb(self.total), 6)
        d["gpu_gb"] = None if self.gpu_bytes is None else round(gb(self.gpu_bytes), 6)
        d["fits"] = self.fits
        return d

    def describe(self, *, worst: bool = False) -> str:
        """'DWDP8 per rank 128.0 GB of 141.0 GB (fits): routed experts held 81.8 GB, ...' (the non-zero parts);
        worst: 'per rank (worst)', for the group's largest rank. Every command's per-rank memory line is this one."""
        name = f"DWDP{self.group_size}" if self.mode == "dwdp" else f"DEP{self.group_size}"
        budget = ("" if self.gpu_bytes is None else
                  f" of {fmt_bytes(self.gpu_bytes, digits=1)} ({'fits' if self.fits else 'does NOT fit'})")
        return (f"{name} per rank{' (worst)' if worst else ''} {fmt_bytes(self.total, digits=1)}{budget}: "
                f"{parts_text(self.parts())}")


def parts_text(parts: dict[str, float]) -> str:
    """'routed experts held 81.8 GB, prefetch slots 19.7 GB, ...': {label: bytes} (RankMemory.parts), zero parts
    left out; the parts list of every per-rank memory line (RankMemory.describe, plan's 'nothing fits')."""
    return ", ".join(f"{k} {fmt_bytes(v, digits=1)}" for k, v in parts.items() if v)


def gpu_count_text(n: int | None) -> str:
    """'7 GPUs', or 'none up to 64 GPUs' where no group size up to MAX_DWDP_SIZE fits (smallest_fitting's None)."""
    return f"{n} GPUs" if n else f"none up to {MAX_DWDP_SIZE} GPUs"


def smallest_line(dwdp: int | None | str, dep: int | None | str) -> str:
    """'smallest GPU count that fits: DWDP 7 GPUs, DEP 6 GPUs', the one such line of every command. A count (or None)
    is written by gpu_count_text; a str is a caller's per-ISL form of it ('7 GPUs at ISL 4096, 8 GPUs at ISL 32768')."""
    def one(n):
        return n if isinstance(n, str) else gpu_count_text(n)
    return f"smallest GPU count that fits: DWDP {one(dwdp)}, DEP {one(dep)}"


class MemoryBudgetError(ConfigError):
    """A rank does not fit the GPU; names the keys that shrink it and the numbers."""


def over_budget(m: RankMemory, keys: list[str], *, file: str | None = None, key: str = "dwdp") -> MemoryBudgetError:
    """The error for a rank over its budget: its parts in GB, the budget and the settings (`keys`) that shrink it."""
    return MemoryBudgetError(file, key, f"{m.describe()}; change {', '.join(keys)} (a larger group, fewer redundant "
                                        "experts, a smaller weight dtype, fewer layers or tokens) to fit")


#: the TensorRT-LLM adapter's expert paths (integration/gemm_choice.choose_gemm's results) a slot is priced for
ADAPTER_GEMMS = ("multi_buffer", "composite_view", "merge")


def slot_experts(gemm: str | None, n_fetch: int, num_experts: int) -> int:
    """Experts one prefetch slot holds per expert tensor: the one count the adapter allocates and rank_memory prices.

    gemm: the TensorRT-LLM adapter's path (AdapterRuntime.gemm), None for the embedded engine (runtime.DwdpRuntime,
    whose slots hold the fetched experts whatever cfg.gemm). merge: every expert of the layer in a full [E, ...] slot
    (integration/full_slot.py: local experts copied in every layer); multi_buffer: the fetched experts [n_fetch, ...];
    composite_view: the fetched experts' weights in VMM runs (its block-scale tensors sit in full [E] slots: a few
    kB per expert, not priced)."""
    if gemm is not None and gemm not in ADAPTER_GEMMS:
        raise ValueError(f"gemm {gemm!r}: expected one of {ADAPTER_GEMMS} or None (the embedded engine)")
    return num_experts if gemm == "merge" else n_fetch


def priced_moe_layers(spec: ModelSpec, *, engine_dense: bool = False) -> int:
    """MoE layers whose routed experts one rank holds: the trunk's, plus on a TensorRT-LLM server the checkpoint's
    MTP layers (ModelSpec.mtp_layers, config.json num_nextn_predict_layers), which one-model MTP builds as MoE layers
    after the trunk and DWDP splits like the trunk's; the embedded engine (engine_dense) runs the trunk only."""
    return spec.num_moe_layers + (0 if engine_dense else spec.mtp_layers)


def dwdp_ranks(spec: ModelSpec, cfg: DwdpConfig, *, weight_dtype: str, max_num_tokens: int,
               gpu_bytes: int | None = None, placement: ExpertPlacement | None = None,
               engine_dense: bool = False, gemm: str | None = None) -> list[RankMemory]:
    """rank_memory of every dwdp_rank of `cfg`'s group; gemm: the path whose slots are priced (slot_experts)."""
    p = placement or make_placement(cfg, spec.num_experts)
    if p.num_experts != spec.num_experts:
        raise ValueError(f"placement is for {p.num_experts} experts, model {spec.name} has {spec.num_experts} experts")
    layers = priced_moe_layers(spec, engine_dense=engine_dense)
    eb, slots = spec.expert_bytes(weight_dtype), prefetch_slot_count(cfg, layers)
    shared = _shared_parts(spec, weight_dtype, max_num_tokens, engine_dense)
    out = []
    for r in range(p.dwdp_size):
        n_local, n_fetch = len(p.local_experts[r]), len(p.fetch_experts(r))
        out.append(RankMemory("dwdp", p.dwdp_size, r, weight_dtype, max_num_tokens, n_local, n_fetch, slots,
                              routed_experts=n_local * layers * eb,
                              prefetch_slots=slots * slot_experts(gemm, n_fetch, p.num_experts) * eb, all_to_all=0,
                              gpu_bytes=gpu_bytes, gemm=gemm, **shared))
    return out


def _shared_parts(spec: ModelSpec, weight_dtype: str, max_num_tokens: int, engine_dense: bool,
                  kv_tokens: int | None = None) -> dict[str, int]:
    check_format(weight_dtype)
    if max_num_tokens < 0:
        raise ValueError(f"max_num_tokens must be >= 0, got {max_num_tokens}")
    act = 4 if weight_dtype == "float32" else 2
    kv = max_num_tokens if kv_tokens is None else kv_tokens
    return {"dense_weights": dense_weight_bytes(spec, weight_dtype, engine_dense=engine_dense),
            "activations": activation_bytes(spec, max_num_tokens, act_bytes=act),
            "kv_cache_floor": 0 if engine_dense else kv_cache_floor_bytes(spec, kv)}


def rank_memory(spec: ModelSpec, mode: str, *, weight_dtype: str, max_num_tokens: int, group_size: int | None = None,
                dwdp: DwdpConfig | None = None, gpu_bytes: int | None = None, kv_tokens: int | None = None,
                engine_dense: bool = False, gemm: str | None = None) -> RankMemory:
    """THE price of one rank of a deployment (module docstring: the parts).

    gemm (DWDP): the TensorRT-LLM adapter's expert path whose prefetch slots are priced (slot_experts: merge holds
    [E, ...] slots, multi_buffer and composite_view the fetched experts); None: the embedded engine's slots.

    DWDP: the worst rank of `dwdp` (default: a derived placement of `group_size` ranks, prefetch depth 1).
    DEP: expert parallelism over `group_size` ranks (default dwdp.dwdp_size); with attention DP this is also a
    generation server of `group_size` GPUs. kv_tokens: tokens of the KV-cache floor (default max_num_tokens; a
    generation server needs the context length, not its own max_num_tokens). engine_dense: price our embedded
    engine instead (dense weights in the activation dtype, no KV-cache floor; `dense_weight_bytes`)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: expected one of {MODES}")
    if group_size is None and dwdp is None:
        raise ValueError("rank_memory needs group_size or dwdp")
    if mode == "dwdp":
        cfg = dwdp if dwdp is not None else DwdpConfig(dwdp_size=group_size)
        ranks = dwdp_ranks(spec, cfg, weight_dtype=weight_dtype, max_num_tokens=max_num_tokens, gpu_bytes=gpu_bytes,
                           engine_dense=engine_dense, gemm=gemm)
        return max(ranks, key=lambda m: (m.total, -m.rank))
    g = group_size if group_size is not None else dwdp.dwdp_size
    if g < 1:
        raise ValueError(f"group_size must be >= 1, got {g}")
    held = math.ceil(spec.num_experts / g)
    return RankMemory("dep", g, 0, weight_dtype, max_num_tokens, held, 0, 0,
                      routed_experts=held * priced_moe_layers(spec, engine_dense=engine_dense) * spec.expert_bytes(weight_dtype), prefetch_slots=0,
                      all_to_all=all_to_all_bytes(spec, max_num_tokens) if g > 1 else 0, gpu_bytes=gpu_bytes,
                      **_shared_parts(spec, weight_dtype, max_num_tokens, engine_dense, kv_tokens))


def smallest_fitting(spec: ModelSpec, mode: str, gpu_bytes: int, *, weight_dtype: str, max_num_tokens: int,
                     prefetch_depth: int = 1, max_size: int = MAX_DWDP_SIZE, gemm: str | None = None) -> int | None:
    """Smallest group size (DWDP: derived placement, no redundancy, slots of `gemm` as rank_memory; DEP: EP size)
    whose ranks fit `gpu_bytes`; None when none up to `max_size` (DWDP: also at most the expert count) does."""
    top = min(max_size, spec.num_experts) if mode == "dwdp" else max_size
    for g in range(1, top + 1):
        dw = DwdpConfig(dwdp_size=g, prefetch_depth=min(prefetch_depth, max(spec.num_moe_layers, 1))) if mode == "dwdp" else None
        m = rank_memory(spec, mode, weight_dtype=weight_dtype, max_num_tokens=max_num_tokens, group_size=g, dwdp=dw,
                        gpu_bytes=gpu_bytes, gemm=gemm if mode == "dwdp" else None)
        if m.fits:
            return g
    return None



def context_max_num_tokens() -> int:
    """The context server's max_num_tokens a deployment gets when none is given: what `dwdp gen-config` writes
    without --max-num-tokens and what `dwdp plan` prices without --mnt / --batch (one place, so that the plan
    describes the iterations the written server runs). DEFAULT_MAX_NUM_TOKENS for every model and GPU: a model too
    large for a GPU is fitted by its group size (default_dwdp_size, priced at this MNT), not by a smaller MNT.
    TensorRT-LLM's own default, when a YAML gives none, is 8192 (llm_args.py BaseLlmArgs.max_num_tokens)."""
    return DEFAULT_MAX_NUM_TOKENS


def default_dwdp_size(spec: ModelSpec, gpu_bytes: int, *, weight_dtype: str, max_num_tokens: int,
                      gemm: str | None = None) -> int:
    """The group size every deployment command takes when none is given (`dwdp plan --dwdp-size auto`,
    `plan-placement` and `gen-config` without --dwdp-size): 1 (plain data parallel, every expert on every rank)
    where that fits, else the smallest power of two whose DWDP ranks fit `gpu_bytes` (the smallest fitting size
    itself where that power of two exceeds the expert count); 8 when no size up to MAX_DWDP_SIZE fits (the command
    then says nothing fits and names the smallest counts)."""
    g = smallest_fitting(spec, "dwdp", gpu_bytes, weight_dtype=weight_dtype, max_num_tokens=max_num_tokens, gemm=gemm)
    if g is None:
        return 8
    p = 1 << (g - 1).bit_length()
    return p if p <= spec.num_experts else g

@dataclass(frozen=True, slots=True)
class DeploymentFit:
    """A DWDP group against the GPU, with DEP at the same size beside it, and the smallest size per mode."""

    dwdp: RankMemory
    dep: RankMemory
    smallest_fitting_dwdp_size: int | None
    smallest_fitting_dep_size: int | None

    # the DWDP rank's numbers (what a DWDP deployment checks)
    total = property(lambda self: self.dwdp.total)
    fits = property(lambda self: bool(self.dwdp.fits))

    def parts(self) -> dict[str, float]:
        """GB of each part of the DWDP rank (labels of PARTS)."""
        return {k: gb(v) for k, v in self.dwdp.parts().items()}

    def smallest_line(self) -> str:
        """'smallest GPU count that fits: DWDP 7 GPUs, DEP 6 GPUs' ('none up to 64 GPUs' for a mode none fits)."""
        return smallest_line(self.smallest_fitting_dwdp_size, self.smallest_fitting_dep_size)


def fit_deployment(spec: ModelSpec, cfg: DwdpConfig, gpu_bytes: int, *, weight_dtype: str,
                   max_num_tokens: int, gemm: str | None = None) -> DeploymentFit:
    """rank_memory for DWDP (`cfg`'s worst rank, slots of `gemm`) and DEP (EP = cfg.dwdp_size), and the smallest
    size per mode."""
    kw = dict(weight_dtype=weight_dtype, max_num_tokens=max_num_tokens, gpu_bytes=gpu_bytes)
    return DeploymentFit(rank_memory(spec, "dwdp", dwdp=cfg, gemm=gemm, **kw),
                         rank_memory(spec, "dep", group_size=cfg.dwdp_size, **kw),
                         smallest_fitting(spec, "dwdp", gpu_bytes, weight_dtype=weight_dtype, max_num_tokens=max_num_tokens,
                                          prefetch_depth=cfg.prefetch_depth, gemm=gemm),
                         smallest_fitting(spec, "dep", gpu_bytes, weight_dtype=weight_dtype, max_num_tokens=max_num_tokens))


# ---- the embedded engine's ranks (dwdp bench) -------------------------------------------------------
def estimate_group_memory(spec: ModelSpec, cfg: DwdpConfig, placement: ExpertPlacement, *,
                          weight_dtype: str | None = None, max_num_tokens: int | None = None) -> list[RankMemory]:
    """Our engine's DWDP ranks (dense weights in the activation dtype, no KV floor): dwdp_ranks(engine_dense=True)."""
    return dwdp_ranks(spec, cfg, weight_dtype=weight_dtype or cfg.weight_dtype, max_num_tokens=max_num_tokens or 0,
                      placement=placement, engine_dense=True)



# ---- a context server's KV cache as TensorRT-LLM allocates it --------------------------------------
#: bytes per KV element of kv_cache_config.dtype ("auto": the checkpoint's own KV dtype, bf16 for the releases priced
#: here; "fp8": upstream's DWDP recipe, examples/dwdp/reproduce.py @ 4400b395 build_worker_config)
KV_DTYPE_BYTES = {"auto": KV_BYTES, "fp8": 1}


@dataclass(frozen=True, slots=True)
class ContextKv:
    """A context server's KV cache against what its rank has left (bytes): the numbers gen-config writes and checks.

    free: the GPU less the rank's weights, prefetch slots and activations (RankMemory without its KV-cache floor),
    what TensorRT-LLM's free_gpu_memory_fraction is a share of; need: max_batch_size requests of max_seq_len tokens
    in kv_dtype; fraction: the share of `free` that holds `need` (rounded up to 0.01)."""

    free: int
    need: int
    max_batch_size: int
    max_seq_len: int
    kv_dtype: str

    @property
    def fraction(self) -> float:
        return context_kv_fraction(self.need, self.free)

    @property
    def fits(self) -> bool:
        return 0 < self.need <= self.free

    @property
    def batch_that_fits(self) -> int:
        """The most requests of max_seq_len tokens whose KV fits `free` (0: not one)."""
        per = self.need // self.max_batch_size
        return max(self.free, 0) // per if per else 0

    def to_dict(self) -> dict:
        """gen-config --json's `context_kv`: GB as every command's JSON, the fraction as written."""
        return {"unit": UNIT, "kv_dtype": self.kv_dtype, "max_batch_size": self.max_batch_size,
                "max_seq_len": self.max_seq_len, "need_gb": round(gb(self.need), 6), "free_gb": round(gb(self.free), 6),
                "free_gpu_memory_fraction": self.fraction, "fits": self.fits}

    def describe(self) -> str:
        return (f"KV cache {self.kv_dtype}, {self.max_batch_size} x {self.max_seq_len:,} tokens: "
                f"{fmt_bytes(self.need, digits=1)} of the {fmt_bytes(self.free, digits=1)} left after weights, "
                f"prefetch slots and activations")


def context_kv_fraction(need_bytes: int, free_bytes: int) -> float:
    """kv_cache_config.free_gpu_memory_fraction that gives a context server `need_bytes` of KV out of the
    `free_bytes` its rank has left: need / free rounded up to 0.01 (TensorRT-LLM then allocates at least `need`),
    at least 0.01; above 1.0 when it does not fit (ContextKv.fits says so)."""
    if free_bytes <= 0:
        return math.inf
    return max(math.ceil(round(need_bytes / free_bytes * 100, 6)) / 100, 0.01)


def context_kv(spec: ModelSpec, rank: RankMemory, *, max_batch_size: int, max_seq_len: int,
               kv_dtype: str = "fp8") -> ContextKv:
    """The KV cache of a context server whose rank `rank_memory` priced: `free` is what the rank has left of its GPU
    besides its KV-cache floor (rank.gpu_bytes needed), `need` max_batch_size requests of max_seq_len tokens."""
    if rank.gpu_bytes is None:
        raise ValueError("context_kv needs a rank priced against a GPU (rank_memory(gpu_bytes=...))")
    if kv_dtype not in KV_DTYPE_BYTES:
        raise ValueError(f"kv_dtype {kv_dtype!r}: expected one of {tuple(KV_DTYPE_BYTES)}")
    per_token = kv_cache_floor_bytes(spec, 1) // KV_BYTES * KV_DTYPE_BYTES[kv_dtype]
    free = rank.gpu_bytes - (rank.total - rank.kv_cache_floor)
    return ContextKv(free, max_batch_size * max_seq_len * per_token, max_batch_size, max_seq_len, kv_dtype)
