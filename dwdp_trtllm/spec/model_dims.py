"""A dims-only ModelSpec from any MoE checkpoint's config.json, for planning (pure; no torch).

hf_config.spec_from_hf_config reads the families the embedded engine runs and refuses every value it does not
implement. The planner needs less: the dimensions that set FLOPs, bytes and copy volume. This reader takes only
those, from every family whose config.json names them (DeepSeek-V2/V3/R1, Qwen3-MoE, Mixtral, OLMoE, gpt-oss,
GLM-4.5 / glm4_moe, and any config using the same key names), and sliding-window attention (sliding_window with
layer_types, gpt-oss's alternate layers, or every layer where use_sliding_window is not false). `not_priced(data)`
names every other key that could change the time (group-limited routing, activation clamps, an experts' format the
planner has no rates for, ...): `dwdp plan` prints them in one "not priced:" line; COST_FREE keys (names, token ids,
initialisation, norm epsilons, rope parameters, training-only losses) cannot change a prefill's time and are not
listed. The spec it returns has `family` set to the config's model_type, and
`dims_only_reason(spec)` says why the engine cannot run it. `dwdp plan --model`, `dwdp plan-placement --model` and
`dwdp gen-config --preset` (or --model DIR) read a config.json through it, so every command prices the same spec.
Every value is checked by json_values.check_values (type and range per key: models.FIELD_BOUNDS for the keys that
set a ModelSpec field), the one table hf_config.py reads with too.

What dims-only leaves out, per family (not_priced lists the keys):
  gpt_oss   attention sinks, expert biases, swiglu_limit (the sliding window on alternate layers is priced);
  glm4_moe  partial rotary (cost-free), q/k norm, group-limited routing (n_group / topk_group).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .hf_config import SUPPORTED, read_config_json
from .json_values import check_values, shown, value
from .models import ModelSpec
from .schema import ConfigError

#: config keys that name the same dimension in different families, first match wins
ALIASES: dict[str, tuple[str, ...]] = {
    "num_experts": ("n_routed_experts", "num_local_experts", "num_experts"),
    "top_k": ("num_experts_per_tok", "experts_per_token", "moe_topk"),
    "moe_intermediate": ("moe_intermediate_size", "intermediate_size"),
    "num_shared_experts": ("n_shared_experts", "num_shared_experts"),
}
#: model_type -> ModelSpec.family where the engine's name differs
_ENGINE_FAMILY = {"deepseek_v3": "deepseek", "deepseek_v2": "deepseek"}
#: the families the embedded engine implements: hf_config.SUPPORTED, by ModelSpec.family
ENGINE_FAMILIES = tuple(dict.fromkeys(_ENGINE_FAMILY.get(t, t) for t in SUPPORTED))
#: quantization_config.quant_method (or ModelOpt's quant_algo) -> the planner's weight dtype for routed experts
QUANT_DTYPES = {"mxfp4": "mxfp4", "fp8": "fp8", "nvfp4": "nvfp4", "fp4": "nvfp4"}
#: keys the planner prices: the dimensions dims_from_config reads, the sliding window, the experts' format
PRICED_KEYS = frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                         "vocab_size", "intermediate_size", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
                         "qk_rope_head_dim", "v_head_dim", "first_k_dense_replace", "mlp_only_layers",
                         "sliding_window", "layer_types", "use_sliding_window"} | {k for v in ALIASES.values() for k in v})
#: keys that cannot change a prefill's time: names, token ids, initialisation, norm epsilons, rope parameters (the
#: rotation costs the same whatever its frequencies), dropout, caching and training-only losses
COST_FREE = frozenset({"_name_or_path", "architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
                       "auto_map", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps",
                       "layer_norm_eps", "tie_word_embeddings", "use_cache", "output_router_logits",
                       "router_aux_loss_coef", "aux_loss_alpha", "seq_aux", "max_position_embeddings", "rope_theta",
                       "rope_scaling", "rope_parameters", "rope_interleave", "partial_rotary_factor",
                       "attention_dropout", "hidden_act", "norm_topk_prob", "routed_scaling_factor",
                       "scoring_func", "topk_method", "max_window_layers", "num_nextn_predict_layers"})


def _int(data: dict, file: str, key: str, *, lo: int = 1, default: Any = ...) -> int:
    """An integer key (json_values.KEYS: type and range), and >= `lo` where the structure needs more than its range
    (a GQA head_dim, MLA ranks > 0)."""
    if data.get(key) is None and default is ...:
        raise ConfigError(file, key, "required key is missing (a dims-only plan needs it)")
    v = value(data, key, file, default)
    if data.get(key) is not None and v < lo:
        raise ConfigError(file, key, f"expected an integer >= {lo}, got {shown(v)}")
    return v


def _alias(data: dict, file: str, what: str, *, default: Any = ...) -> int:
    for key in ALIASES[what]:
        if data.get(key) is not None:
            return _int(data, file, key, lo=0 if what == "num_shared_experts" else 1)
    if default is ...:
        raise ConfigError(file, ALIASES[what][0], f"required key is missing (also looked for {', '.join(ALIASES[what][1:])})")
    return default


def _first_k_dense(data: dict, file: str, layers: int) -> int:
    if data.get("first_k_dense_replace") is not None:
        return _int(data, file, "first_k_dense_replace", lo=0)
    only = data.get("mlp_only_layers") or []  # Qwen3-MoE: dense layers by index; the planner counts leading ones
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise ConfigError(file, "mlp_only_layers", f"expected a list of layer indices, got {shown(only)}")
    if sorted(only) != list(range(len(only))):
        raise ConfigError(file, "mlp_only_layers", f"dense layers {only} are not the first layers: the planner models "
                                                   "dense layers before MoE layers")
    return len(only)


def weight_dtype_of(data: dict) -> str | None:
    """The routed experts' storage format that the checkpoint's quantization_config names, if any."""
    q = data.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method") or q.get("quant_algo") or "").lower()
    if method == "modelopt":
        method = str(q.get("quant_algo", "")).lower()
    return QUANT_DTYPES.get(method)


def dims_from_config(data: dict, file: str = "config.json", name: str | None = None) -> ModelSpec:
    """The planner's ModelSpec from a parsed config.json; a missing or bad dimension raises ConfigError naming
    `file` and the key."""
    if not isinstance(data, dict):
        raise ConfigError(file, "", f"expected a JSON object, got {type(data).__name__}")
    check_values(data, file)
    H = _int(data, file, "hidden_size")
    layers = _int(data, file, "num_hidden_layers")
    E = _alias(data, file, "num_experts")
    k = _alias(data, file, "top_k")
    if k > E:
        raise ConfigError(file, ALIASES["top_k"][0], f"{k} experts per token > {E} experts")
    moe_inter = _alias(data, file, "moe_intermediate")
    heads = _int(data, file, "num_attention_heads")
    dense = _first_k_dense(data, file, layers)
    if dense > layers:
        raise ConfigError(file, "first_k_dense_replace", f"{dense} dense layers > num_hidden_layers {layers}")
    common: dict[str, Any] = dict(
        name=name or str(data.get("_name_or_path") or Path(file).parent.name or "model"),
        family=_ENGINE_FAMILY.get(str(data.get("model_type")), str(data.get("model_type", "unknown"))), hidden_size=H, num_layers=layers, first_k_dense=dense,
        dense_intermediate=_int(data, file, "intermediate_size", default=moe_inter), moe_intermediate=moe_inter,
        num_experts=E, top_k=k, num_shared_experts=_alias(data, file, "num_shared_experts", default=0),
        vocab_size=_int(data, file, "vocab_size"), num_heads=heads,
        mtp_layers=_int(data, file, "num_nextn_predict_layers", lo=0, default=0))
    if data.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3 shapes)
        common.update(attention="mla", num_kv_heads=heads, q_lora_rank=_int(data, file, "q_lora_rank", lo=0, default=0),
                      kv_lora_rank=_int(data, file, "kv_lora_rank"), qk_nope_head_dim=_int(data, file, "qk_nope_head_dim"),
                      qk_rope_head_dim=_int(data, file, "qk_rope_head_dim"), v_head_dim=_int(data, file, "v_head_dim"))
    else:
        kv = _int(data, file, "num_key_value_heads", default=heads)
        if heads % kv:
            raise ConfigError(file, "num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}")
        common.update(attention="gqa", num_kv_heads=kv, head_dim=_int(data, file, "head_dim", default=H // heads))
    # routing groups only constrain the engine's router; keep them when they divide E, else plan ungrouped
    n_group = data.get("n_group") if isinstance(data.get("n_group"), int) and data.get("n_group", 0) >= 1 else 1
    if E % n_group == 0:
        topk_group = data.get("topk_group") if isinstance(data.get("topk_group"), int) else n_group
        common.update(n_group=n_group, topk_group=min(max(topk_group, 1), n_group))
    common.update(_sliding(data, file, layers))
    try:
        return ModelSpec(**common)
    except ValueError as e:
        raise ConfigError(file, "", str(e)) from None


def _sliding(data: dict, file: str, layers: int) -> dict:
    """sliding_window / sliding_window_layers for ModelSpec: layer_types' "sliding_attention" entries; gpt-oss without
    layer_types: every other layer (transformers' GptOssConfig default, layers 0, 2, 4, ... sliding); else every
    layer where a window is set and use_sliding_window is not false (Mistral-style); none without a window."""
    w = data.get("sliding_window")
    if w is None or data.get("use_sliding_window") is False:
        return {}
    w = _int(data, file, "sliding_window")
    types = data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
            raise ConfigError(file, "layer_types", f"expected a list of {layers} strings (one per layer), got {types!r}")
        n = sum(t == "sliding_attention" for t in types)
    elif data.get("model_type") == "gpt_oss":
        n = (layers + 1) // 2
    else:
        n = layers
    return {"sliding_window": w, "sliding_window_layers": n}


def not_priced(data: dict, spec: ModelSpec | None = None) -> tuple[str, ...]:
    """Every key of a config.json the planner neither prices nor knows to be cost-free (PRICED_KEYS, COST_FREE), named
    with what it is where that helps: group-limited routing, a quantization the planner has no rates for (W4A8)."""
    out = []
    for k in data:
        if k in PRICED_KEYS or k in COST_FREE:
            continue
        if k == "quantization_config":
            wd = weight_dtype_of(data)
            if wd is not None:
                continue
            q = data[k] if isinstance(data[k], dict) else {}
            algo = q.get("quant_algo") or q.get("quant_method") or "?"
            out.append(f"quantization_config ({algo}: no rates for it; experts priced at --weight-dtype)")
        elif k in ("n_group", "topk_group"):
            if (data.get("n_group") or 1) > 1 and "group-limited routing" not in " ".join(out):
                out.append(f"group-limited routing (n_group {data.get('n_group')}, topk_group {data.get('topk_group')})")
        else:
            out.append(k)
    return tuple(out)


def preset_not_priced(spec: ModelSpec) -> tuple[str, ...]:
    """What a preset's spec carries that the planner does not price."""
    out = []
    if spec.n_group > 1:
        out.append(f"group-limited routing (n_group {spec.n_group}, topk_group {spec.topk_group})")
    if spec.qk_norm:
        out.append("q/k norm")
    return tuple(out)


def dims_from_config_json(path: str | Path, name: str | None = None) -> ModelSpec:
    """dims_from_config of a checkpoint directory's (or a file's) config.json."""
    data, f = read_config_json(path)
    return dims_from_config(data, str(f), name)


def dims_only_reason(spec: ModelSpec) -> str | None:
    """Why the embedded engine cannot run this spec (None: its family is one the engine implements)."""
    if spec.family in ENGINE_FAMILIES:
        return None
    return (f"model_type {spec.family!r} is planned from its dimensions only; the embedded engine runs "
            f"{', '.join(SUPPORTED)}")


def is_config_path(text: str) -> bool:
    """`--model` names a config.json (a .json file or a checkpoint directory) rather than a preset."""
    p = Path(text)
    return text.endswith(".json") or p.is_dir() or "/" in text
