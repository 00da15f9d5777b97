"""Model specs: the per-layer dimensions that DWDP, the engine and the planner need.

Presets carry the exact dims of the public config.json of each family (DESIGN.md section 6).
A preset may be truncated to fewer layers (`get_model("deepseek-r1", num_layers=5)`): per-layer
compute/communication ratios stay exact while memory fits one GPU.

Expert tensor layout used everywhere in this package (nn.Linear convention, out x in):
    w13_ENH  [E, 2*I, H]   gate rows [0, I), up rows [I, 2I)
    w2_EHI   [E, H, I]
FP8 weights carry fp32 block scales over 128x128 blocks (DeepSeek-V3 layout):
    w13_scale [E, ceil(2I/128), ceil(H/128)],  w2_scale [E, ceil(H/128), ceil(I/128)]
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from .weight_formats import FP8_BLOCK, linear_bytes

#: epsilon of DeepSeek's q_a_layernorm / kv_a_layernorm: the reference implementation builds both with its
#: RMSNorm default (1e-6), whatever the config's rms_norm_eps
LATENT_NORM_EPS = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class YarnScaling:
    """YaRN rope scaling as DeepSeek-V3's config.json gives it (rope_scaling type "yarn").

    engine/rope.py turns it into frequencies (interpolation ramped between beta_fast and beta_slow
    rotations over original_max_position_embeddings), the cos/sin factor (attention_factor, or
    mscale(factor, mscale) / mscale(factor, mscale_all_dim)) and, for MLA, mscale(factor, mscale_all_dim)^2
    on the softmax scale."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        if not self.factor > 0 or self.original_max_position_embeddings < 1:
            raise ValueError(f"yarn: factor must be > 0 and original_max_position_embeddings >= 1, got {self}")
        for name in YARN_FLOATS:
            problem = yarn_problem(getattr(self, name))
            if problem:
                raise ValueError(f"yarn: {name}: {problem}")


#: YarnScaling's number fields; each None or a finite number of magnitude at most 1e6 (yarn_problem), the one
#: check of a YarnScaling and of the config.json values it is read from (hf_config.py names the key)
YARN_FLOATS = ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor")


def yarn_problem(value) -> str | None:
    """What is wrong with `value` for a YarnScaling number field, or None when it is absent or in bounds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and abs(value) <= 1e6):
        return f"expected a finite number of magnitude at most 1e6, got {value!r}"
    return None


#: The one list of bounds on a ModelSpec's sizes and numbers: ModelSpec checks it for every spec (presets, YAML,
#: config.json) and hf_config.py names the config.json key that broke it. field -> (low, high, kind); floats must also
#: be finite. The maxima are sanity limits, about 10-100x the largest released MoE (DeepSeek-V3: hidden 7168,
#: 256 experts, vocab 129280), far below what would exhaust memory before a rank starts.
FIELD_BOUNDS: dict[str, tuple[float, float, type]] = {
    "hidden_size": (1, 1 << 17, int), "num_layers": (1, 1024, int), "first_k_dense": (0, 1024, int),
    "dense_intermediate": (1, 1 << 20, int), "moe_intermediate": (1, 1 << 20, int), "num_experts": (1, 1 << 16, int),
    "top_k": (1, 1024, int), "num_shared_experts": (0, 64, int), "vocab_size": (1, 1 << 22, int),
    "num_heads": (1, 1024, int), "num_kv_heads": (1, 1024, int), "head_dim": (0, 4096, int),
    "q_lora_rank": (0, 1 << 16, int), "kv_lora_rank": (0, 1 << 16, int), "qk_nope_head_dim": (0, 4096, int),
    "qk_rope_head_dim": (0, 4096, int), "v_head_dim": (0, 4096, int), "n_group": (1, 1 << 16, int),
    "topk_group": (1, 1 << 16, int), "routed_scaling_factor": (1e-6, 1e6, float), "rms_eps": (1e-12, 0.1, float),
    "rope_theta": (1e-3, 1e12, float), "latent_norm_eps": (1e-12, 0.1, float), "mtp_layers": (0, 64, int),
    "sliding_window": (0, 1 << 24, int), "sliding_window_layers": (0, 1024, int),
}


def field_problem(name: str, value) -> str | None:
    """What is wrong with `value` for ModelSpec field `name` (FIELD_BOUNDS), or None when it is in bounds."""
    lo, hi, kind = FIELD_BOUNDS[name]
    if kind is int:
        what, ok = f"an integer in [{lo:,}, {hi:,}]", isinstance(value, int) and not isinstance(value, bool)
    else:
        what = f"a finite number in [{lo:g}, {hi:g}]"
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not lo <= value <= hi:
        return f"expected {what}, got {value!r}"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Dimensions of a DeepSeek-style MoE decoder (context phase only)."""

    name: str
    family: Literal["deepseek", "qwen3_moe", "mixtral", "olmoe"]
    hidden_size: int
    num_layers: int
    first_k_dense: int
    dense_intermediate: int
    moe_intermediate: int
    num_experts: int
    top_k: int
    num_shared_experts: int
    vocab_size: int
    attention: Literal["mla", "gqa"]
    num_heads: int
    num_kv_heads: int
    head_dim: int = 0
    q_lora_rank: int = 0  # 0: no q compression (DeepSeek-V2-Lite)
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    router: Literal["sigmoid_grouped", "softmax"] = "softmax"
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    qk_norm: bool = False  # Qwen3 / OLMoE per-head q/k RMSNorm
    rms_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: YarnScaling | None = None  # None: plain rope theta**(-2i/d)
    rope_interleave: bool = True  # MLA only: rotate pairs (2i, 2i+1) (DeepSeek) or NeoX halves
    latent_norm_eps: float = LATENT_NORM_EPS  # MLA q_a_layernorm / kv_a_layernorm
    # checkpoint MTP layers (DeepSeek-V3 num_nextn_predict_layers): MoE layers TensorRT-LLM's one-model MTP runs after
    # the trunk; memory.py prices their experts for TensorRT-LLM servers, the embedded engine runs the trunk only
    mtp_layers: int = 0
    sliding_window: int = 0  # keys a sliding-window layer attends to (0: none); priced by perf/flops.core_flops
    sliding_window_layers: int = 0  # how many of the layers use it (gpt-oss: every other one)

    def __post_init__(self) -> None:
        for name in FIELD_BOUNDS:
            problem = field_problem(name, getattr(self, name))
            if problem:
                raise ValueError(f"{self.name}: {name}: {problem}")
        if self.num_layers < 1:
            raise ValueError(f"{self.name}: num_layers={self.num_layers} must be >= 1")
        if not 0 <= self.first_k_dense <= self.num_layers:
            raise ValueError(f"{self.name}: first_k_dense={self.first_k_dense} not in [0, num_layers={self.num_layers}]")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"{self.name}: top_k={self.top_k} not in [1, num_experts={self.num_experts}]")
        if self.num_experts % self.n_group or not 1 <= self.topk_group <= self.n_group:
            raise ValueError(f"{self.name}: n_group={self.n_group}/topk_group={self.topk_group} invalid for {self.num_experts} experts")
        if self.attention == "gqa" and (self.head_dim <= 0 or self.num_heads % self.num_kv_heads):
            raise ValueError(f"{self.name}: GQA needs head_dim > 0 and num_heads divisible by num_kv_heads")
        if self.attention == "mla" and (self.kv_lora_rank <= 0 or self.qk_rope_head_dim <= 0):
            raise ValueError(f"{self.name}: MLA needs kv_lora_rank and qk_rope_head_dim > 0")

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def moe_layer_ids(self) -> tuple[int, ...]:
        return tuple(range(self.first_k_dense, self.num_layers))

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gate, up, down)."""
        return 3 * self.hidden_size * self.moe_intermediate

    def expert_tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-expert shapes of the routed-expert tensors (without the leading E)."""
        H, I = self.hidden_size, self.moe_intermediate
        return {"w13": (2 * I, H), "w2": (H, I)}

    def expert_scale_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-expert shapes of the FP8 128x128 block scales."""
        H, I, b = self.hidden_size, self.moe_intermediate, FP8_BLOCK
        return {"w13_scale": (math.ceil(2 * I / b), math.ceil(H / b)), "w2_scale": (math.ceil(H / b), math.ceil(I / b))}

    def expert_bytes(self, weight_dtype: str) -> int:
        """Bytes of one routed expert including its scales for `weight_dtype` (float32|bf16|fp8|mxfp4|nvfp4;
        weight_formats.linear_bytes)."""
        return sum(linear_bytes(*shape, weight_dtype) for shape in self.expert_tensor_shapes().values())

    def attention_params(self) -> int:
        """Parameters of one attention block (projections only)."""
        H, nh = self.hidden_size, self.num_heads
        if self.attention == "gqa":
            d = self.head_dim
            return H * nh * d + 2 * H * self.num_kv_heads * d + nh * d * H
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = H * self.q_lora_rank + self.q_lora_rank * nh * qk if self.q_lora_rank else H * nh * qk
        kv = H * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * nh * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + nh * self.v_head_dim * H

    def dense_params(self) -> int:
        """Replicated (non-routed-expert) parameters: embeddings, attention, dense MLPs, shared experts, routers."""
        H = self.hidden_size
        per_layer = self.attention_params() + 2 * H
        dense_mlp = 3 * H * self.dense_intermediate
        moe_extra = 3 * H * self.moe_intermediate * self.num_shared_experts + H * self.num_experts
        return (2 * self.vocab_size * H + self.num_layers * per_layer
                + self.first_k_dense * dense_mlp + self.num_moe_layers * moe_extra)

    def truncated(self, num_layers: int, first_k_dense: int | None = None) -> "ModelSpec":
        """The same per-layer dims with `num_layers` layers.

        Keeps min(first_k_dense, num_layers - 1) dense layers unless `first_k_dense` is given
        (benchmarks of DWDP want several MoE layers and few dense ones). A model cut short has no MTP layer (the
        checkpoint's MTP layers follow its last trunk layer); at its full depth it keeps them.
        """
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        dense = min(self.first_k_dense, max(num_layers - 1, 0)) if first_k_dense is None else first_k_dense
        if not 0 <= dense <= num_layers:
            raise ValueError(f"first_k_dense={dense} not in [0, num_layers={num_layers}]")
        mtp = self.mtp_layers if num_layers == self.num_layers else 0
        return dataclasses.replace(self, num_layers=num_layers, first_k_dense=dense, mtp_layers=mtp)


PRESETS: dict[str, ModelSpec] = {
    "deepseek-v3": ModelSpec(
        name="deepseek-v3", family="deepseek", hidden_size=7168, num_layers=61, first_k_dense=3,
        dense_intermediate=18432, moe_intermediate=2048, num_experts=256, top_k=8, num_shared_experts=1,
        vocab_size=129280, attention="mla", num_heads=128, num_kv_heads=128, q_lora_rank=1536,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        router="sigmoid_grouped", n_group=8, topk_group=4, norm_topk_prob=True, routed_scaling_factor=2.5,
        # the release's config.json (deepseek-ai/DeepSeek-V3 and -R1): rope_theta 10000, rope_scaling yarn
        rope_scaling=YarnScaling(factor=40.0, original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0,
                                 mscale=1.0, mscale_all_dim=1.0),
        mtp_layers=1),  # the release's num_nextn_predict_layers: one MTP layer (TensorRT-LLM servers price it)
    "deepseek-v2-lite": ModelSpec(
        name="deepseek-v2-lite", family="deepseek", hidden_size=2048, num_layers=27, first_k_dense=1,
        dense_intermediate=10944, moe_intermediate=1408, num_experts=64, top_k=6, num_shared_experts=2,
        vocab_size=102400, attention="mla", num_heads=16, num_kv_heads=16, q_lora_rank=0,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        router="softmax", n_group=1, topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.0,
        # deepseek-ai/DeepSeek-V2-Lite config.json: yarn with mscale = mscale_all_dim = 0.707
        rope_scaling=YarnScaling(factor=40.0, original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0,
                                 mscale=0.707, mscale_all_dim=0.707)),
    "qwen3-30b-a3b": ModelSpec(
        name="qwen3-30b-a3b", family="qwen3_moe", hidden_size=2048, num_layers=48, first_k_dense=0,
        dense_intermediate=6144, moe_intermediate=768, num_experts=128, top_k=8, num_shared_experts=0,
        vocab_size=151936, attention="gqa", num_heads=32, num_kv_heads=4, head_dim=128,
        norm_topk_prob=True, qk_norm=True, rope_theta=1e6),
    # Qwen/Qwen3-235B-A22B config.json as copied in a public test (stored id 52018680971): 94 layers, hidden 4096,
    # moe_intermediate 1536, 128 experts top-8, 64 heads / 4 kv heads, vocab 151936; head_dim 128 and no dense
    # layers (mlp_only_layers []) from the published config, not in that copy.
    "qwen3-235b-a22b": ModelSpec(
        name="qwen3-235b-a22b", family="qwen3_moe", hidden_size=4096, num_layers=94, first_k_dense=0,
        dense_intermediate=12288, moe_intermediate=1536, num_experts=128, top_k=8, num_shared_experts=0,
        vocab_size=151936, attention="gqa", num_heads=64, num_kv_heads=4, head_dim=128,
        norm_topk_prob=True, qk_norm=True, rope_theta=1e6),
    "mixtral-8x7b": ModelSpec(
        name="mixtral-8x7b", family="mixtral", hidden_size=4096, num_layers=32, first_k_dense=0,
        dense_intermediate=14336, moe_intermediate=14336, num_experts=8, top_k=2, num_shared_experts=0,
        vocab_size=32000, attention="gqa", num_heads=32, num_kv_heads=8, head_dim=128,
        norm_topk_prob=True, rms_eps=1e-5, rope_theta=1e6),
    "olmoe-1b-7b": ModelSpec(
        name="olmoe-1b-7b", family="olmoe", hidden_size=2048, num_layers=16, first_k_dense=0,
        dense_intermediate=1024, moe_intermediate=1024, num_experts=64, top_k=8, num_shared_experts=0,
        vocab_size=50304, attention="gqa", num_heads=16, num_kv_heads=16, head_dim=128,
        norm_topk_prob=False, qk_norm=True, rms_eps=1e-5),
    # DeepSeek-shaped, laptop-CPU sized: MLA, grouped sigmoid routing, shared expert, a dense first layer.
    "tiny": ModelSpec(
        name="tiny", family="deepseek", hidden_size=64, num_layers=4, first_k_dense=1,
        dense_intermediate=128, moe_intermediate=32, num_experts=16, top_k=4, num_shared_experts=1,
        vocab_size=256, attention="mla", num_heads=4, num_kv_heads=4, q_lora_rank=32,
        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        router="sigmoid_grouped", n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5),
    # GQA + softmax routing, tiny: exercises the Qwen3/Mixtral/OLMoE code path on the CPU.
    "tiny-gqa": ModelSpec(
        name="tiny-gqa", family="qwen3_moe", hidden_size=64, num_layers=3, first_k_dense=0,
        dense_intermediate=128, moe_intermediate=32, num_experts=12, top_k=3, num_shared_experts=0,
        vocab_size=256, attention="gqa", num_heads=4, num_kv_heads=2, head_dim=16,
        norm_topk_prob=True, qk_norm=True),
    # DeepSeek-shaped with experts sized in whole 2 MiB VMM pages (bf16 w2 = 2 MiB, w13 = 4 MiB):
    # the smallest model that exercises gemm: composite_view on a GPU.
    "tiny-vmm": ModelSpec(
        name="tiny-vmm", family="deepseek", hidden_size=1024, num_layers=3, first_k_dense=1,
        dense_intermediate=1024, moe_intermediate=1024, num_experts=8, top_k=2, num_shared_experts=1,
        vocab_size=256, attention="mla", num_heads=4, num_kv_heads=4, q_lora_rank=64,
        kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
        router="sigmoid_grouped", n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5),
}
PRESETS["deepseek-r1"] = dataclasses.replace(PRESETS["deepseek-v3"], name="deepseek-r1")


def get_model(name: str, num_layers: int | None = None, first_k_dense: int | None = None) -> ModelSpec:
    """A preset by name, optionally truncated to `num_layers` layers (and `first_k_dense` dense ones)."""
    try:
        spec = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}: expected one of {sorted(PRESETS)}") from None
    if num_layers is None and first_k_dense is None:
        return spec
    return spec.truncated(spec.num_layers if num_layers is None else num_layers, first_k_dense)
