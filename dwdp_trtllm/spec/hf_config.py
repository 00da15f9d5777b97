"""A ModelSpec from a HuggingFace checkpoint's config.json (DeepSeek-V3/R1, DeepSeek-V2, Qwen3-MoE, Mixtral, OLMoE).

Every key of the file is either mapped onto the spec, checked to hold the one value the engine implements,
or ignored because it does not change a prefill forward (training-only, tokenizer ids, generation); any
other key or value raises ConfigError naming the file, the key, the value and what is supported. Both
the release format (`rope_theta` + `rope_scaling`) and transformers >= 5's `rope_parameters` are read.
Every value's type and range comes from json_values.py (the one table the planner's model_dims.py uses too),
checked for the whole file before a family's reader looks at it. Pure: reads one JSON file (again only when it
changed: spec_from_hf_config's cache), no torch.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .json_values import check_values, load_json, shown, value
from .models import YARN_FLOATS, ModelSpec, YarnScaling, field_problem, yarn_problem
from .schema import ConfigError

#: keys that do not change the context-phase forward of any supported family
IGNORED = frozenset({
    "architectures", "auto_map", "model_type", "transformers_version", "torch_dtype", "dtype", "bos_token_id",
    "eos_token_id", "pad_token_id", "initializer_range", "use_cache", "attention_dropout", "output_router_logits",
    "router_aux_loss_coef", "aux_loss_alpha", "seq_aux", "ep_size", "max_position_embeddings", "tie_word_embeddings",
    "router_jitter_noise",  # Mixtral: training only
    "quantization_config",  # checked by _check_quantization
    "_name_or_path", "return_dict", "output_hidden_states", "output_attentions", "use_return_dict", "chunk_size_feed_forward",
    "is_encoder_decoder", "tokenizer_class", "qk_head_dim", "head_dim",  # head dims: checked per family below
    "num_key_value_heads",  # MLA ignores it; GQA maps it explicitly
    "rope_theta", "rope_scaling", "rope_parameters",  # read by _rope
})

SUPPORTED = ("deepseek_v3", "deepseek_v2", "qwen3_moe", "mixtral", "olmoe")

class _Reader:
    """Takes keys out of a config dict, remembering which ones were used; errors name file and key."""

    def __init__(self, data: dict, file: str):
        self.data, self.file, self.used = data, file, set()

    def error(self, key: str, msg: str) -> ConfigError:
        return ConfigError(self.file, key, msg)

    def get(self, key: str, default: Any = ...) -> Any:
        """The value of `key`, its type and range from json_values.KEYS; `default` when absent or null."""
        self.used.add(key)
        return value(self.data, key, self.file, default)

    def require(self, key: str, allowed: tuple, why: str) -> None:
        """`key` absent or one of `allowed` (the only values the engine implements)."""
        self.used.add(key)
        if key in self.data and self.data[key] not in allowed:
            raise self.error(key, f"value {shown(self.data[key])} is not supported: {why} (supported: "
                                  f"{', '.join(repr(a) for a in allowed)})")


def _rope(r: _Reader, dim: int) -> tuple[float, YarnScaling | None]:
    params = r.data.get("rope_parameters") or {}
    legacy = r.data.get("rope_scaling")
    key = "rope_parameters" if params else "rope_scaling"
    if not isinstance(params, dict) or legacy is not None and not isinstance(legacy, dict):
        raise r.error(key, f"expected a mapping, got {shown(params or legacy)}")
    scaling = dict(params or legacy or {})
    theta_key = f"{key}.rope_theta" if "rope_theta" in scaling else "rope_theta"
    theta = scaling.pop("rope_theta", r.data.get("rope_theta", 10000.0))
    problem = field_problem("rope_theta", theta)
    if problem:
        raise r.error(theta_key, problem)
    kind = scaling.pop("rope_type", None) or scaling.pop("type", None) or "default"
    scaling.pop("type", None)
    if kind == "default":
        extra = {k: v for k, v in scaling.items() if k != "partial_rotary_factor" or v != 1.0}
        if extra:
            raise r.error(key, f"keys {sorted(extra)} given for rope type 'default': supported are rope type "
                               f"'default' (no other keys) and 'yarn'")
        return float(theta), None
    if kind != "yarn":
        raise r.error(f"{key}.rope_type", f"value {shown(kind)} is not supported: the engine implements 'default' and 'yarn'")
    known = {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
             "attention_factor", "truncate"}
    for k, v in scaling.items():
        if k not in known:
            raise r.error(f"{key}.{k}", f"value {shown(v)}: not a yarn key the engine implements (supported: {', '.join(sorted(known))})")
    if scaling.get("partial_rotary_factor", 1.0) != 1.0:
        raise r.error(f"{key}.partial_rotary_factor", "only 1.0 is supported")
    orig = scaling.get("original_max_position_embeddings")
    if not isinstance(orig, int) or orig < 1:
        raise r.error(f"{key}.original_max_position_embeddings", f"expected an integer >= 1 for yarn, got {shown(orig)}")
    factor = scaling.get("factor")
    if factor is None:  # HF: the ratio of max_position_embeddings to the pretrained length
        if r.data.get("max_position_embeddings") is None:
            raise r.error("max_position_embeddings", f"expected an integer in [1, 16,777,216] when {key}.factor is absent "
                                                     "(yarn's factor = max_position_embeddings / original_max_position_"
                                                     f"embeddings), got {shown(r.data.get('max_position_embeddings'))}")
        factor = value(r.data, "max_position_embeddings", r.file) / orig
    vals = {}
    for k in YARN_FLOATS:
        v = factor if k == "factor" else scaling.get(k)
        problem = yarn_problem(v)
        if problem:
            raise r.error(f"{key}.{k}", problem)
        vals[k] = v
    return float(theta), YarnScaling(
        factor=float(vals["factor"]), original_max_position_embeddings=orig,
        beta_fast=float(vals["beta_fast"] or 32), beta_slow=float(vals["beta_slow"] or 1),  # HF: `or` defaults
        mscale=float(vals["mscale"] or 0.0), mscale_all_dim=float(vals["mscale_all_dim"] or 0.0),
        attention_factor=None if vals["attention_factor"] is None else float(vals["attention_factor"]),
        truncate=True if scaling.get("truncate") is None else scaling["truncate"])  # a bool: json_values.KEYS


def _check_quantization(r: _Reader) -> None:
    q = r.data.get("quantization_config")
    if q is None:
        return
    if not isinstance(q, dict):
        raise r.error("quantization_config", f"expected a mapping, got {shown(q)}")
    if q.get("quant_method") != "fp8":
        raise r.error("quantization_config.quant_method", f"value {shown(q.get('quant_method'))} is not supported: "
                                                          "only DeepSeek's block FP8 ('fp8') is read")
    if q.get("fmt", "e4m3") != "e4m3":
        raise r.error("quantization_config.fmt", f"value {shown(q['fmt'])} is not supported: expected 'e4m3'")
    if q.get("weight_block_size", [128, 128]) != [128, 128]:  # a list of 2 ints or null here: json_values.KEYS
        raise r.error("quantization_config.weight_block_size", f"value {shown(q['weight_block_size'])} is not "
                                                               "supported: expected [128, 128]")


def _deepseek(r: _Reader, v3: bool) -> dict:
    r.require("hidden_act", ("silu",), "experts and MLPs are SwiGLU")
    r.require("attention_bias", (False,), "the projections carry no bias")
    r.require("moe_layer_freq", (1,), "every layer after first_k_dense_replace is MoE")
    r.require("pretraining_tp", (1,), "tensor-parallel pretraining slices are not emulated")
    r.require("mlp_bias", (False,), "the MLPs carry no bias")
    r.require("scoring_func", ("sigmoid",) if v3 else ("softmax",), "the router of this family")
    r.require("topk_method", ("noaux_tc",) if v3 else ("greedy",), "the router of this family")
    q_lora = r.get("q_lora_rank", 0)
    out = dict(
        family="deepseek", attention="mla", hidden_size=r.get("hidden_size"), num_layers=r.get("num_hidden_layers"),
        first_k_dense=r.get("first_k_dense_replace", 0), dense_intermediate=r.get("intermediate_size"),
        moe_intermediate=r.get("moe_intermediate_size"), num_experts=r.get("n_routed_experts"),
        top_k=r.get("num_experts_per_tok"), num_shared_experts=r.get("n_shared_experts", 0),
        vocab_size=r.get("vocab_size"), num_heads=r.get("num_attention_heads"), q_lora_rank=q_lora,
        kv_lora_rank=r.get("kv_lora_rank"), qk_nope_head_dim=r.get("qk_nope_head_dim"),
        qk_rope_head_dim=r.get("qk_rope_head_dim"), v_head_dim=r.get("v_head_dim"),
        n_group=r.get("n_group", 1) if v3 else 1, topk_group=r.get("topk_group", 1) if v3 else 1,
        norm_topk_prob=r.get("norm_topk_prob", v3) if v3 else False,
        routed_scaling_factor=float(r.get("routed_scaling_factor", 1.0)),
        rms_eps=float(r.get("rms_norm_eps", 1e-6)),
        router="sigmoid_grouped" if v3 else "softmax",
        rope_interleave=r.get("rope_interleave", True) if v3 else True,
        mtp_layers=r.get("num_nextn_predict_layers", 0))  # MTP layers: not part of the engine's trunk
    if not v3:
        for k in ("n_group", "topk_group"):  # only group_limited_greedy reads them; greedy ignores them
            r.used.add(k)
        # DeepSeek-V2's reference (transformers modeling_deepseek_v2.py: DeepseekV2TopkRouter, apply_rotary_emb)
        # never normalises the top-k weights and always rotates interleaved pairs (view_as_complex of (2i, 2i+1)):
        # these keys do not change its forward, so the engine follows the reference whatever they say
        for k in ("norm_topk_prob", "rope_interleave"):
            r.get(k, None)  # still a bool where given
    out["num_kv_heads"] = out["num_heads"]
    qk = r.data.get("qk_head_dim")
    if qk is not None and qk != out["qk_nope_head_dim"] + out["qk_rope_head_dim"]:
        raise r.error("qk_head_dim", f"{qk} != qk_nope_head_dim + qk_rope_head_dim")
    out["rope_theta"], out["rope_scaling"] = _rope(r, out["qk_rope_head_dim"])
    return out


def _gqa_common(r: _Reader, family: str) -> dict:
    r.require("hidden_act", ("silu",), "experts are SwiGLU")
    r.require("attention_bias", (False,), "the projections carry no bias")
    H, nh = r.get("hidden_size"), r.get("num_attention_heads")
    head_dim = r.get("head_dim", H // nh) if family != "olmoe" else H // nh
    out = dict(family=family, attention="gqa", hidden_size=H, num_layers=r.get("num_hidden_layers"), first_k_dense=0,
               top_k=r.get("num_experts_per_tok"), num_shared_experts=0, vocab_size=r.get("vocab_size"), num_heads=nh,
               num_kv_heads=r.get("num_key_value_heads", nh), head_dim=head_dim,
               rms_eps=float(r.get("rms_norm_eps", 1e-6)))
    out["rope_theta"], out["rope_scaling"] = _rope(r, head_dim)
    if out["rope_scaling"] is not None:
        raise r.error("rope_parameters" if r.data.get("rope_parameters") else "rope_scaling", f"yarn is implemented for the MLA families (deepseek_v3, deepseek_v2) only, "
                                      f"not for {family!r}")
    return out


def _qwen3_moe(r: _Reader) -> dict:
    r.require("decoder_sparse_step", (1,), "every layer is MoE")
    r.require("mlp_only_layers", ([],), "every layer is MoE")
    r.require("use_sliding_window", (False,), "attention is full causal")
    r.used.update({"sliding_window", "max_window_layers"})  # read by HF only with use_sliding_window
    out = _gqa_common(r, "qwen3_moe")
    r.used.add("intermediate_size")  # the dense MLP of mlp_only_layers, which must be empty
    out.update(dense_intermediate=r.get("moe_intermediate_size"), moe_intermediate=r.get("moe_intermediate_size"),
               num_experts=r.get("num_experts") if "num_experts" in r.data else r.get("num_local_experts"),
               norm_topk_prob=r.get("norm_topk_prob", False), qk_norm=True)
    return out


def _mixtral(r: _Reader) -> dict:
    r.require("sliding_window", (None,), "attention is full causal")
    out = _gqa_common(r, "mixtral")
    inter = r.get("intermediate_size")
    out.update(dense_intermediate=inter, moe_intermediate=inter, num_experts=r.get("num_local_experts"),
               norm_topk_prob=True)
    return out


def _olmoe(r: _Reader) -> dict:
    r.require("clip_qkv", (None,), "q/k/v are not clipped")
    if r.data.get("head_dim") not in (None, r.get("hidden_size") // r.get("num_attention_heads")):
        raise r.error("head_dim", f"value {shown(r.data['head_dim'])}: OLMoE's head dim is hidden_size // num_attention_heads")
    out = _gqa_common(r, "olmoe")
    inter = r.get("intermediate_size")
    out.update(dense_intermediate=inter, moe_intermediate=inter, num_experts=r.get("num_experts"),
               norm_topk_prob=r.get("norm_topk_prob", False), qk_norm=True)
    return out


def _check_layer_types(r: _Reader, num_layers: int) -> None:
    """transformers >= 5 writes `layer_types` (one attention kind per layer): full causal attention everywhere is
    what the engine runs; a sliding-window or linear-attention layer is refused naming its index."""
    r.used.add("layer_types")
    lt = r.data.get("layer_types")
    if lt is None:
        return
    if not isinstance(lt, list) or len(lt) != num_layers:
        raise r.error("layer_types", f"expected a list of {num_layers} entries (num_hidden_layers), got {shown(lt)}")
    for i, kind in enumerate(lt):
        if kind != "full_attention":
            raise r.error("layer_types", f"layer {i} is {shown(kind)}: the engine implements full causal attention only "
                                         "(supported: 'full_attention' for every layer)")


_FAMILIES: dict[str, Callable[[_Reader], dict]] = {
    "deepseek_v3": lambda r: _deepseek(r, True), "deepseek_v2": lambda r: _deepseek(r, False),
    "qwen3_moe": _qwen3_moe, "mixtral": _mixtral, "olmoe": _olmoe}


def _config_file(path: str | Path) -> Path:
    p = Path(path)
    return p / "config.json" if p.is_dir() else p


def read_config_json(path: str | Path) -> tuple[dict, str]:
    """(the parsed config.json of a checkpoint directory or file, its path); ConfigError naming the file."""
    f = _config_file(path)
    if not f.is_file():
        raise ConfigError(str(f), "", "config.json not found: a checkpoint directory holds config.json next to its *.safetensors")
    data = load_json(f)
    if not isinstance(data, dict):
        raise ConfigError(str(f), "", f"expected a JSON object, got {type(data).__name__}")
    return data, str(f)


#: spec_from_hf_config's specs by (config.json's absolute path, the file's identity, name). ModelConfig checks its
#: checkpoint when built and every spec() call (several per bench point, per rank) asks again: the file is read and
#: checked once while it is unchanged. Identity = device, inode, size, mtime and ctime in ns: an edit in place or a
#: file renamed over it is read again (an edit of the same size within the filesystem's timestamp tick is not seen).
#: Only specs are kept (ModelSpec is frozen); a file that fails is read again on the next call.
_SPECS: dict[tuple, ModelSpec] = {}
_SPECS_MAX = 64


def _identity(f: Path) -> tuple | None:
    try:
        st = f.stat()
    except OSError:
        return None  # read_config_json names the problem
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def spec_from_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """The full-depth ModelSpec of the checkpoint at `path` (a directory holding config.json, or the file); the
    file is read again only when it changed since the last call (_SPECS)."""
    f = _config_file(path)
    ident = _identity(f)  # before the read: an edit during it changes the key, so the next call reads again
    key = None if ident is None else (str(f.absolute()), ident, name)
    if key is not None and key in _SPECS:
        return _SPECS[key]
    spec = _spec_from_file(path, name)
    if key is not None:
        if len(_SPECS) >= _SPECS_MAX:
            _SPECS.pop(next(iter(_SPECS)))  # the oldest entry
        _SPECS[key] = spec
    return spec


def _spec_from_file(path: str | Path, name: str | None) -> ModelSpec:
    data, file = read_config_json(path)
    mt = data.get("model_type")
    if mt not in _FAMILIES:
        raise ConfigError(file, "model_type", f"value {shown(mt)} is not supported; supported: {', '.join(SUPPORTED)}")
    check_values(data, file)  # every value's type and range first: the family readers below compute with them
    r = _Reader(data, file)
    fields = _FAMILIES[mt](r)
    _check_quantization(r)
    _check_layer_types(r, fields["num_layers"])
    for k, v in data.items():
        if k not in r.used and k not in IGNORED:
            raise ConfigError(file, k, f"value {shown(v)}: a key dwdp does not map for model_type {mt!r} (mapped keys: "
                                       f"{', '.join(sorted(r.used))}); remove it if it does not change the forward")
    try:
        return ModelSpec(name=name or f"hf:{Path(file).parent.name}", **fields)
    except ValueError as e:
        raise ConfigError(file, "", str(e)) from None
