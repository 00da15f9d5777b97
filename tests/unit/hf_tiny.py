"""Tiny random HuggingFace checkpoints of every supported family, built at test time (nothing downloaded).

`make_checkpoint(family, path)` builds the transformers model from a tiny config, draws every weight at
random (norm weights ~1, routing bias non-zero, projections ~1/sqrt(fan_in): activations stay O(1)),
writes it with save_pretrained (the "deepseek_v3_fp8" case then rewrites the projections in DeepSeek's
release layout: e4m3 + 128x128 `_scale_inv`, with quantization_config in config.json, and loads the
dequantised values back into the HF model so both sides hold the same weights) and returns the model.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

YARN = {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0}

_DS = dict(vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=24, num_hidden_layers=3,
           num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=3,
           first_k_dense_replace=1, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12,
           max_position_embeddings=640, rms_norm_eps=1e-3, tie_word_embeddings=False)

#: family -> (transformers config class name, kwargs)
FAMILIES = {
    # MLA with q_lora, grouped sigmoid routing, shared expert, dense first layer, YaRN, rms_norm_eps 1e-3 (!= the
    # latent norms' 1e-6: large enough that using it there fails the test)
    "deepseek_v3": ("DeepseekV3Config", dict(_DS, q_lora_rank=24, n_shared_experts=1, n_group=4, topk_group=2,
                                             routed_scaling_factor=2.5, norm_topk_prob=True,
                                             rope_parameters=dict(YARN, rope_theta=10000.0))),
    # the same model in DeepSeek-V3's FP8 release layout
    "deepseek_v3_fp8": ("DeepseekV3Config", dict(_DS, q_lora_rank=24, n_shared_experts=1, n_group=4, topk_group=2,
                                                 routed_scaling_factor=2.5, norm_topk_prob=True,
                                                 rope_parameters=dict(YARN, rope_theta=10000.0))),
    # MLA without q_lora, greedy softmax routing, 2 shared experts, YaRN with mscale 0.707 (V2-Lite's values)
    "deepseek_v2": ("DeepseekV2Config", dict(_DS, q_lora_rank=None, n_shared_experts=2, topk_method="greedy",
                                             routed_scaling_factor=1.5, norm_topk_prob=False, n_group=1, topk_group=1,
                                             rope_parameters=dict(YARN, rope_theta=10000.0, mscale=0.707, mscale_all_dim=0.707))),
    "qwen3_moe": ("Qwen3MoeConfig", dict(vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=24,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                         num_experts=8, num_experts_per_tok=3, norm_topk_prob=True, rms_norm_eps=1e-5,
                                         rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False)),
    "mixtral": ("MixtralConfig", dict(vocab_size=96, hidden_size=64, intermediate_size=40, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=6,
                                      num_experts_per_tok=2, rms_norm_eps=1e-5, sliding_window=None,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False)),
    "olmoe": ("OlmoeConfig", dict(vocab_size=96, hidden_size=64, intermediate_size=24, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=4, num_experts=8, num_experts_per_tok=3,
                                  norm_topk_prob=False, rms_norm_eps=1e-5, clip_qkv=None,
                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False)),
}


def _randomise(model, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if not p.is_floating_point() or "inv_freq" in name:
                continue
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "e_score_correction_bias" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))


def _to_fp8_release_layout(path: Path, model) -> None:
    """Projections -> e4m3 + _scale_inv (as the release: not embed, lm_head, norms, router); HF model gets
    the dequantised values."""
    from safetensors.torch import load_file, save_file

    from dwdp_trtllm.engine.weights import dequantize_fp8_blockwise, quantize_fp8_blockwise

    f = path / "model.safetensors"
    tensors = load_file(str(f))
    state = {}
    for name in list(tensors):
        t = tensors[name]
        if t.dim() != 2 or not name.endswith("proj.weight") and "experts" not in name or "mlp.gate." in name:
            continue
        q, s = quantize_fp8_blockwise(t.float())
        tensors[name], tensors[name + "_scale_inv"] = q, s
        state[name] = dequantize_fp8_blockwise(q, s)
    save_file(tensors, str(f))
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [128, 128]}
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    # back into the HF model: per-expert names are fused in transformers >= 5 (gate_up_proj, down_proj)
    sd = model.state_dict()
    with torch.no_grad():
        for name, w in state.items():
            if ".experts." in name:
                pre, rest = name.split(".experts.")
                e, kind = int(rest.split(".")[0]), rest.split(".")[1]
                I = w.shape[0] if kind != "down_proj" else w.shape[1]
                if kind == "down_proj":
                    sd[f"{pre}.experts.down_proj"][e].copy_(w)
                else:
                    rows = slice(0, I) if kind == "gate_proj" else slice(I, 2 * I)
                    sd[f"{pre}.experts.gate_up_proj"][e, rows].copy_(w)
            else:
                sd[name].copy_(w)


def make_checkpoint(family: str, path: Path, seed: int = 0):
    """Write a tiny random checkpoint of `family` to `path`; returns the transformers model (float32, eval)."""
    import transformers

    cls_name, kwargs = FAMILIES[family]
    config = getattr(transformers, cls_name)(**kwargs)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    _randomise(model, seed)
    model.save_pretrained(str(path))
    if family == "deepseek_v3_fp8":
        _to_fp8_release_layout(path, model)
    return model


def hf_hidden(model, ids_T: torch.Tensor) -> torch.Tensor:
    """Final hidden states [T, H] (after the final norm) of the transformers model, float32."""
    with torch.no_grad():
        return model.model(input_ids=ids_T[None]).last_hidden_state[0].float()
