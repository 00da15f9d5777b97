"""Deterministic seeded weights for the reference model, FP8 block quantisation, per-expert buffer layout.

Shape legend: V vocab, H hidden, I moe intermediate, D dense intermediate, N rows (out), K cols (in).

Every tensor is drawn from its own torch.Generator seeded from (seed, name) or (seed, layer, expert)
with a process-independent hash, in float32 on the CPU, then cast and moved. So any process on any
machine produces bit-identical weights for one (layer, expert) without generating the others.
Scales ~ 1/sqrt(fan_in) keep activations O(1) through the layers.

Dense weight names follow the HuggingFace DeepSeek / Qwen3-MoE layout (`dense_weight_shapes`).
"""
from __future__ import annotations

import hashlib
import math
from typing import Callable

import torch

from ..core.expert_buffers import (EXPERT_DTYPES, FP8_DTYPE, check_weight_dtype, expert_layout,  # noqa: F401 - re-exported
                              expert_tensor_names, expert_tensor_specs)
from ..ops import reference as _ops_ref
from ..spec.models import FP8_BLOCK, ModelSpec

def _generator(seed: int, *keys: object, device: torch.device | str = "cpu") -> torch.Generator:
    digest = hashlib.blake2b(repr((int(seed),) + keys).encode(), digest_size=8).digest()
    g = torch.Generator(device=device)
    g.manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))
    return g


def _randn(shape: tuple[int, ...], std: float, g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float32, device=g.device) * std


def dense_weight_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every replicated (non-routed-expert) tensor of the model: name -> shape (our = HF naming)."""
    H, nh = spec.hidden_size, spec.num_heads
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (spec.vocab_size, H), "model.norm.weight": (H,)}
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (H,)
        out[p + "post_attention_layernorm.weight"] = (H,)
        a = p + "self_attn."
        if spec.attention == "mla":
            qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
            if spec.q_lora_rank:
                out[a + "q_a_proj.weight"] = (spec.q_lora_rank, H)
                out[a + "q_a_layernorm.weight"] = (spec.q_lora_rank,)
                out[a + "q_b_proj.weight"] = (nh * qk, spec.q_lora_rank)
            else:
                out[a + "q_proj.weight"] = (nh * qk, H)
            out[a + "kv_a_proj_with_mqa.weight"] = (spec.kv_lora_rank + spec.qk_rope_head_dim, H)
            out[a + "kv_a_layernorm.weight"] = (spec.kv_lora_rank,)
            out[a + "kv_b_proj.weight"] = (nh * (spec.qk_nope_head_dim + spec.v_head_dim), spec.kv_lora_rank)
            out[a + "o_proj.weight"] = (H, nh * spec.v_head_dim)
        else:
            d, nkv = spec.head_dim, spec.num_kv_heads
            out[a + "q_proj.weight"] = (nh * d, H)
            out[a + "k_proj.weight"] = (nkv * d, H)
            out[a + "v_proj.weight"] = (nkv * d, H)
            out[a + "o_proj.weight"] = (H, nh * d)
            if spec.qk_norm:
                # OLMoE normalises the whole q/k projection; Qwen3 normalises each head.
                whole = spec.family == "olmoe"
                out[a + "q_norm.weight"] = (nh * d,) if whole else (d,)
                out[a + "k_norm.weight"] = (nkv * d,) if whole else (d,)
        m = p + "mlp."
        if i < spec.first_k_dense:
            D = spec.dense_intermediate
            out.update({m + "gate_proj.weight": (D, H), m + "up_proj.weight": (D, H), m + "down_proj.weight": (H, D)})
        else:
            out[m + "gate.weight"] = (spec.num_experts, H)
            if spec.router == "sigmoid_grouped":
                out[m + "gate.e_score_correction_bias"] = (spec.num_experts,)
            if spec.num_shared_experts:
                S = spec.moe_intermediate * spec.num_shared_experts
                s = m + "shared_experts."
                out.update({s + "gate_proj.weight": (S, H), s + "up_proj.weight": (S, H), s + "down_proj.weight": (H, S)})
    return out


def _init_one(name: str, shape: tuple[int, ...], seed: int, gen_device: torch.device | str = "cpu") -> torch.Tensor:
    g = _generator(seed, name, device=gen_device)
    if name.endswith("norm.weight"):
        return 1.0 + _randn(shape, 0.1, g)  # non-trivial norm weights, still ~1
    if name.endswith("e_score_correction_bias"):
        return _randn(shape, 0.05, g)
    if name == "model.embed_tokens.weight":
        return _randn(shape, 1.0, g)
    return _randn(shape, 1.0 / math.sqrt(shape[-1]), g)


#: replicated weights kept in float32 whatever the model dtype (they are applied in float32)
KEEP_FLOAT32 = ("norm.weight", "e_score_correction_bias")


def dense_dtype(name: str, dtype: torch.dtype) -> torch.dtype:
    """Storage dtype of replicated weight `name` in a model of `dtype` (KEEP_FLOAT32 stay float32)."""
    return torch.float32 if name.endswith(KEEP_FLOAT32) else dtype


def init_dense_weights(spec: ModelSpec, seed: int, dtype: torch.dtype, device: torch.device | str, *,
                       on_device: bool = False) -> dict[str, torch.Tensor]:
    """Seeded replicated weights of `spec` (names and shapes: `dense_weight_shapes`). Norm weights and
    the routing bias stay float32 (they are applied in float32); everything else is `dtype`.
    on_device: draw with `device`'s generator (see init_expert)."""
    out = {}
    for name, shape in dense_weight_shapes(spec).items():
        t = _init_one(name, shape, seed, device if on_device else "cpu")
        out[name] = t.to(device=device, dtype=dense_dtype(name, dtype))
    return out


def init_expert(spec: ModelSpec, layer_idx: int, expert_idx: int, seed: int, dtype: torch.dtype,
                device: torch.device | str, *, on_device: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Routed expert `expert_idx` of (absolute) layer `layer_idx`: (w13_NH [2I, H], w2_HI [H, I]).

    on_device=False draws on the CPU: identical everywhere, ~0.2 s per DeepSeek-V3 expert. on_device=True
    draws with `device`'s generator (CUDA Philox): fast, identical across processes on the same GPU
    type, but different values from the CPU draw; every rank of a run must use the same setting."""
    if layer_idx not in spec.moe_layer_ids:
        raise ValueError(f"layer_idx={layer_idx}: not a MoE layer of {spec.name} (MoE layers {spec.moe_layer_ids[:1]}..)")
    if not 0 <= expert_idx < spec.num_experts:
        raise ValueError(f"expert_idx={expert_idx} not in [0, {spec.num_experts})")
    H, I = spec.hidden_size, spec.moe_intermediate
    g = _generator(seed, "expert", layer_idx, expert_idx, device=device if on_device else "cpu")
    w13 = _randn((2 * I, H), 1.0 / math.sqrt(H), g)
    w2 = _randn((H, I), 1.0 / math.sqrt(I), g)
    return w13.to(device=device, dtype=dtype), w2.to(device=device, dtype=dtype)


# ---- FP8 128x128 block quantisation (DeepSeek-V3 layout) ---------------------------------------------
def quantize_fp8_blockwise(w_NK: torch.Tensor, block: int = FP8_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """w_NK -> (w_fp8 e4m3 [N, K], scale_fp32 [ceil(N/b), ceil(K/b)]) with w ~= w_fp8 * scale per block."""
    if w_NK.dim() != 2:
        raise ValueError(f"quantize_fp8_blockwise: expected a 2-D weight, got shape {tuple(w_NK.shape)}")
    return _ops_ref.quantize_fp8_blockwise(w_NK, (block, block))


def dequantize_fp8_blockwise(w_fp8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32,
                             block: int = FP8_BLOCK) -> torch.Tensor:
    """Inverse of quantize_fp8_blockwise; also takes a leading batch dim ([E, N, K] with [E, nb, kb])."""
    return _ops_ref.dequantize_fp8_blockwise(w_fp8, scale, (block, block), dtype)


# ---- the per-expert tensors that live in DWDP buffers ------------------------------------------------
def expert_tensors(spec: ModelSpec, w13_NH: torch.Tensor, w2_HI: torch.Tensor, weight_dtype: str) -> dict[str, torch.Tensor]:
    """One expert's tensors in buffer order, stored as `weight_dtype` (fp8 adds fp32 block scales)."""
    shapes = spec.expert_tensor_shapes()
    if tuple(w13_NH.shape) != shapes["w13"] or tuple(w2_HI.shape) != shapes["w2"]:
        raise ValueError(f"expert_tensors: expected w13 {shapes['w13']} and w2 {shapes['w2']}, "
                         f"got {tuple(w13_NH.shape)} and {tuple(w2_HI.shape)}")
    check_weight_dtype(weight_dtype)
    if weight_dtype != "fp8":
        dt = EXPERT_DTYPES[weight_dtype]
        return {"w13": w13_NH.to(dt).contiguous(), "w2": w2_HI.to(dt).contiguous()}
    q13, s13 = quantize_fp8_blockwise(w13_NH)
    q2, s2 = quantize_fp8_blockwise(w2_HI)
    return {"w13": q13, "w2": q2, "w13_scale": s13, "w2_scale": s2}


#: expert_fn(layer, e) -> (w13_NH, w2_HI) float weights of routed expert e of (absolute) MoE layer `layer`
ExpertFn = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]


def seeded_expert_fn(spec: ModelSpec, seed: int, device: torch.device | str, *, on_device: bool = False) -> ExpertFn:
    """init_expert as an ExpertFn (float32; drawn on `device` when on_device, else on the CPU)."""
    gen_dev = device if on_device else "cpu"
    return lambda layer, e: init_expert(spec, layer, e, seed, torch.float32, gen_dev, on_device=on_device)


def stacked_expert_tensors(spec: ModelSpec, layer_idx: int, experts: list[int] | range, seed: int,
                           weight_dtype: str, device: torch.device | str, *, on_device: bool = False) -> dict[str, torch.Tensor]:
    """Seeded experts `experts` of one layer stacked in buffer order: name -> [len(experts), ...]
    (on_device: see init_expert)."""
    return stack_experts(spec, layer_idx, experts, seeded_expert_fn(spec, seed, device, on_device=on_device),
                         weight_dtype, device)


def stack_experts(spec: ModelSpec, layer_idx: int, experts: list[int] | range, expert_fn: ExpertFn,
                  weight_dtype: str, device: torch.device | str) -> dict[str, torch.Tensor]:
    """Experts `experts` of one layer from expert_fn, as `weight_dtype`, stacked in buffer order:
    name -> [len(experts), ...] on `device`."""
    per = [expert_tensors(spec, *expert_fn(layer_idx, e), weight_dtype) for e in experts]
    if not per:
        return {n: torch.empty((0, *shape), device=device, dtype=dt) for n, shape, dt in expert_tensor_specs(spec, weight_dtype)}
    return {n: torch.stack([p[n] for p in per]).to(device) for n in expert_tensor_names(weight_dtype)}
