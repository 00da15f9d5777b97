"""The serving-feature matrix of a DWDP context server (engine dwdp_trtllm): every TensorRT-LLM setting such a server
of DeepSeek-V3/R1 or Qwen3-MoE can carry, each either supported or refused, and the check that enforces it on the
server's own LLM args before any weight is loaded (docs/TRTLLM.md, "Serving features").

`check_serving_args(args)` reads the object TensorRT-LLM hands its ModelLoader (TorchLlmArgs, or PyTorchConfig in the
versions whose loader has no llm_args) and returns every refusal; `refuse_unsupported(args)` raises them as one
ServingFeaturesRefused. trtllm/patches.py calls it first thing in its ModelLoader.load wrap, before the original builds
the model (upstream: PyTorchModelEngine.__init__ calls ModelLoader.load, which builds the model and then loads its
weights; py_executor_creator builds a draft PyTorchModelEngine only after the target's). Pure: attributes (or mapping
keys) only, no tensorrt_llm import. A key the installed version does not have is skipped: that version cannot set it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError

LLM_ARGS = "tensorrt_llm/llmapi/llm_args.py @ 0004396720054fd8"
PYTORCH_CONFIG = "tensorrt_llm/_torch/pyexecutor/config.py @ 01303b3887e0 (PyTorchConfig, loaders without llm_args)"
#: the one refusal of TensorRT-LLM's own dwdp_config beside our engine (also raised where upstream's creator builds its
#: DwdpManager and where our manager is registered: trtllm/patches.py)
_BOTH_WHY = "the TensorRT-LLM YAML also sets dwdp_config (upstream's engine would run too)"
_BOTH_INSTEAD = ("move dwdp_config from there into the DWDP_TRTLLM_CONFIG file (same keys), or set engine: upstream "
                 "in that file")
BOTH_ENGINES = f"engine dwdp_trtllm but {_BOTH_WHY}: {_BOTH_INSTEAD}"
#: the only MoE backend DWDP binds its expert weights into (trtllm/targets.py VERIFIED_BACKENDS holds its class)
MOE_BACKEND = "CUTLASS"
_ABSENT = object()
#: loader value: the checkpoint's MTP layer count (config.json num_nextn_predict_layers), where the caller read it
_MTP_LAYERS = "checkpoint_mtp_layers"
_NOT_VERIFIED = "not verified with DWDP"


@dataclass(frozen=True)
class Refusal:
    """One setting DWDP does not run with: the key as the YAML spells it, the value seen, why, what to set instead."""

    key: str
    value: str
    why: str
    instead: str

    def line(self) -> str:
        return f"{self.key} = {self.value}: {self.why}. Instead: {self.instead}"


class ServingFeaturesRefused(ConfigError):
    """Every refused setting of one server, in one message (exit 2 like any ConfigError)."""

    def __init__(self, refusals: list[Refusal]):
        self.refusals = refusals
        super().__init__(None, ", ".join(r.key for r in refusals), "refused")
        lines = "\n".join(f"  - {r.line()}" for r in refusals)
        self.args = (f"dwdp_trtllm: {len(refusals)} TensorRT-LLM setting(s) of this context server are not supported "
                     f"with DWDP (checked before any weight is loaded; nothing was loaded):\n{lines}",)

    def __str__(self) -> str:
        return self.args[0]


class _WithLoader:
    """The LLM args seen through the ModelLoader's own values (its spec_config and max_num_tokens, the ones it builds
    the model with: model_loader.py @ 004b733e0ed7, ModelLoader.__init__), which win where given."""

    def __init__(self, args: Any, loader_values: dict[str, Any]):
        self.args, self.loader_values = args, loader_values


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, _WithLoader):
        return obj.loader_values[name] if name in obj.loader_values else _get(obj.args, name)
    if obj is None:
        return _ABSENT
    if isinstance(obj, dict):
        return obj.get(name, _ABSENT)
    return getattr(obj, name, _ABSENT)


def _show(v: Any) -> str:
    if isinstance(v, enum.Enum):
        return repr(v.value)
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_show(x)}" for k, x in v.items()) + "}"
    return f"{type(v).__name__}(...)"


def _text(v: Any) -> str:
    return str(v.value if isinstance(v, enum.Enum) else v)


def _must_be_unset(key: str, why: str, instead: str) -> Callable[[Any], list[Refusal]]:
    def check(args):
        v = _get(args, key)
        return [] if v is _ABSENT or v is None else [Refusal(key, _show(v), why, instead)]
    return check


def _must_be(key: str, want: Any, why: str, instead: str) -> Callable[[Any], list[Refusal]]:
    def check(args):
        v = _get(args, key)
        return [] if v is _ABSENT or v == want else [Refusal(key, _show(v), why, instead)]
    return check


#: keys whose value must be an integer of at least `lo` (TorchLlmArgs / BaseLlmArgs / MoeConfig / MTPDecodingConfig
#: field types in llm_args.py @ 0004396720054fd8; MTP: set_max_total_draft_tokens raises "max_draft_len must be > 0 for
#: MTP", and num_nextn_predict_layers is remapped to max_draft_len there)
_INT_KEYS = {"max_num_tokens": 1, "max_batch_size": 1, "max_seq_len": 1, "tensor_parallel_size": 1,
             "pipeline_parallel_size": 1, "context_parallel_size": 1, "moe_expert_parallel_size": -1,
             "moe_tensor_parallel_size": -1, "moe_config.max_num_tokens": 1, "moe_max_num_tokens": 1,
             "speculative_config.num_nextn_predict_layers": 1, "speculative_config.max_draft_len": 1}
_BOOL_KEYS = ("enable_attention_dp", "disable_overlap_scheduler", "enable_chunked_prefill", "use_cuda_graph",
              "torch_compile_enabled", "speculative_config.use_mtp_vanilla", "speculative_config.mtp_eagle_one_model",
              "speculative_config.eagle3_one_model", "kv_cache_config.enable_block_reuse")
#: sections that are mappings (or config objects) in TensorRT-LLM's YAML
_SECTIONS = ("moe_config", "speculative_config", "kv_cache_config", "cuda_graph_config", "torch_compile_config",
             "dwdp_config", "cache_transceiver_config")
#: KvCacheConfig.free_gpu_memory_fraction: a fraction of the free memory (ge=0, le=1 where upstream bounds it)
FRACTION_KEY = "kv_cache_config.free_gpu_memory_fraction"


def _dotted(args, key: str) -> Any:
    head, _, leaf = key.partition(".")
    return _get(args, key) if not leaf else _get(_get(args, head), leaf)


def check_value_types(args) -> list[Refusal]:
    """A value of the wrong type or range for a key the matrix (or TensorRT-LLM's parser) reads as a number, a bool or
    a section: one refusal naming the key, what was found and what belongs there (the other checks skip such a value
    instead of comparing it). TensorRT-LLM's own objects are validated already; this catches a YAML read as a mapping
    (dwdp check-config) before TensorRT-LLM's parser would stop on it, or turn "2" into 2 silently."""
    out = []
    for key in _SECTIONS:
        v = _get(args, key)
        if v is not _ABSENT and v is not None and isinstance(v, (str, int, float, list, tuple)) \
                and not isinstance(v, enum.Enum):
            out.append(Refusal(key, _show_any(v), f"expected a section (a mapping of {key}'s fields), got "
                               f"{_kind(v)}", f"write {key} as a mapping, or null"))
    for key, lo in _INT_KEYS.items():
        v = _dotted(args, key)
        if v is _ABSENT or v is None:
            continue
        if _int(v) is None or v < lo:
            what = "an integer" + (f" of at least {lo}" if lo > -1 else "")
            out.append(Refusal(key, _show_any(v), f"expected {what}, got {_kind(v) if _int(v) is None else v}",
                               f"write {key} as {what} (no quotes), or remove it"))
    for key in _BOOL_KEYS:
        v = _dotted(args, key)
        if v is not _ABSENT and v is not None and not isinstance(v, bool):
            out.append(Refusal(key, _show_any(v), f"expected true or false, got {_kind(v)}",
                               f"write {key} as true or false (no quotes)"))
    v = _dotted(args, FRACTION_KEY)
    if v is not _ABSENT and v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                               or not 0 <= v <= 1):
        out.append(Refusal(FRACTION_KEY, _show_any(v), "expected a fraction of the free GPU memory in [0, 1], got "
                           + (_kind(v) if isinstance(v, bool) or not isinstance(v, (int, float)) else str(v)),
                           f"write {FRACTION_KEY} as a number in [0, 1]"))
    return out


def _kind(v: Any) -> str:
    return {str: "a string", list: "a list", tuple: "a list", dict: "a mapping", bool: "a bool", float: "a number",
            int: "an integer"}.get(type(v), type(v).__name__)


def _show_any(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_show_any(x) for x in v[:4]) + (", ...]" if len(v) > 4 else "]")
    return _show(v)


_GRAPH_WHY = ("a CUDA graph captured at warmup would hold DWDP's per-layer wait and bind (waits on copies recorded "
              "outside the capture, slot choices baked in, prefetch copies captured instead of run)")


def _cuda_graphs(args) -> list[Refusal]:
    out = _must_be_unset("cuda_graph_config", _GRAPH_WHY + "; TorchLlmArgs turns CUDA graphs on when the key is "
                         "omitted (default_factory=CudaGraphConfig)", "set cuda_graph_config: null")(args)
    out += _must_be("use_cuda_graph", False, _GRAPH_WHY, "set use_cuda_graph: false")(args)
    v = _get(args, "prefill_cuda_graph_backend")
    if v is not _ABSENT and v is not None and _text(v).lower() != "disabled":
        out.append(Refusal("prefill_cuda_graph_backend", _show(v), "prefill CUDA graphs would capture the DWDP "
                           "layers themselves: " + _GRAPH_WHY, "set prefill_cuda_graph_backend: disabled"))
    return out


def _torch_compile(args) -> list[Refusal]:
    v = _get(args, "torch_compile_config")
    out = []
    if v is not _ABSENT and v is not None:
        piecewise = bool(_get(v, "enable_piecewise_cuda_graph") is True)
        traced = "torch.compile traces the MoE layers whose DWDP wait and bind run on the host per call: "
        why = ("piecewise CUDA graphs: " + _GRAPH_WHY) if piecewise else traced + _NOT_VERIFIED
        shown = "{enable_piecewise_cuda_graph: True, ...}" if piecewise else _show(v)
        out.append(Refusal("torch_compile_config", shown, why, "set torch_compile_config: null"))
    out += _must_be("torch_compile_enabled", False, "torch.compile of the DWDP layers: " + _NOT_VERIFIED,
                    "set torch_compile_enabled: false")(args)
    return out


def _overlap(args) -> list[Refusal]:
    why = (f"the overlap scheduler is {_NOT_VERIFIED} (upstream's DWDP does not support it either; its recipes and "
           "ours turn it off on context servers)")
    return _must_be("disable_overlap_scheduler", True, why, "set disable_overlap_scheduler: true")(args)


def _moe(args) -> list[Refusal]:
    out = []
    moe = _get(args, "moe_config")
    legacy = {"backend": "moe_backend", "load_balancer": "moe_load_balancer", "max_num_tokens": "moe_max_num_tokens"}
    for field, old in legacy.items():  # TorchLlmArgs.moe_config.<field>, or PyTorchConfig.moe_<field>
        key, v = (f"moe_config.{field}", _get(moe, field)) if moe is not _ABSENT else (old, _get(args, old))
        if v is _ABSENT:
            continue
        if field == "backend" and isinstance(v, (str, enum.Enum)) and _text(v).upper() != MOE_BACKEND:
            why = ("AUTO chooses the backend per model and GPU after this check" if _text(v).upper() == "AUTO" else
                   "its expert kernel is not one DWDP binds its weights into")
            out.append(Refusal(key, _show(v), why + "; DWDP runs on CutlassFusedMoE only", f"set {key}: {MOE_BACKEND}"))
        if field == "load_balancer" and v is not None:
            out.append(Refusal(key, _show(v), "the expert load balancer moves experts between ranks at run time while "
                               "DWDP's placement is fixed (upstream refuses the two together as well)",
                               f"remove {key}"))
        if field == "max_num_tokens" and _int(v) is not None:
            limit = _int(_get(args, "max_num_tokens"))
            if limit is None or v < limit:
                at = f"at least max_num_tokens ({limit})" if limit is not None else "at least max_num_tokens"
                out.append(Refusal(key, _show(v), "MoE chunking runs a layer's experts in several chunks (an auxiliary "
                                   "stream overlapping them) inside one DWDP bind: " + _NOT_VERIFIED,
                                   f"remove {key}, or set it to {at}"))
    return out


def _int(v: Any) -> int | None:
    """v when it is an integer (not a bool), else None: a value of another type is refused by _types, not compared."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _parallelism(args) -> list[Refusal]:
    tp1 = "DWDP context servers are TP1 instances, one GPU each (attention is data-parallel across them)"
    out = []
    tp = _int(_get(args, "tensor_parallel_size"))
    if _get(args, "enable_attention_dp") is True and tp is not None and tp > 1:
        # at TP1 attention DP changes nothing (attention TP size 1, one rank per DP group: the recipe's context
        # servers); beside TP > 1 it is part of the TP layout refused below
        out.append(Refusal("enable_attention_dp", "True", f"{tp1}; with tensor_parallel_size {tp} attention DP "
                           "spreads one server over several GPUs", "set enable_attention_dp: false, or keep it with "
                           "tensor_parallel_size: 1"))
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size"):
        v = _get(args, key)
        if _int(v) is not None and v != 1:
            out.append(Refusal(key, _show(v), tp1, f"set {key}: 1 (one context server per GPU)"))
    for key in ("moe_expert_parallel_size", "moe_tensor_parallel_size"):
        v = _int(_get(args, key))
        if v is not None and v > 1:
            out.append(Refusal(key, _show(v), tp1 + "; DWDP partitions the experts itself", f"remove {key}"))
    return out


#: speculative decoding modes that build a separate draft model (upstream SpeculativeDecodingMode.has_draft_model:
#: is_eagle3() or is_draft_target() or is_mtp_eagle(); which mode a config gets: its spec_dec_mode, llm_args.py)
_TWO_MODEL_WHY = ("two-model speculative decoding builds a second PyTorchModelEngine (the draft model) in the same "
                  "executor, whose ModelLoader.load would set DWDP up a second time in this process")
_SPEC_INSTEAD = ("use decoding_type: MTP with mtp_eagle_one_model: true (one-model MTP, the default), or remove "
                 "speculative_config on the DWDP context servers")


def checkpoint_mtp_layers(spec: Any, mtp_layers: int | None = None) -> int | None:
    """MTP layers of the checkpoint as upstream's spec_dec_mode reads them: `mtp_layers` (the checkpoint's config.json
    num_nextn_predict_layers, where the caller has it), else the config's num_nextn_predict_layers_from_model_config
    (versions that keep it: set from the model config at load, default 1); None: not known before the model loads,
    which upstream treats as 1 (llm_args.py @ 0004396720054fd8, MTPDecodingConfig.spec_dec_mode: "Treat None (before
    model load) as 1")."""
    if _int(mtp_layers) is not None:
        return mtp_layers
    return _int(_get(spec, "num_nextn_predict_layers_from_model_config"))


def speculative_mode(spec: Any, mtp_layers: int | None = None) -> str:
    """'none' | 'one-model MTP' | 'two-model' | 'other' for a speculative_config (object or mapping), as upstream's
    spec_dec_mode decides it (llm_args.py @ 0004396720054fd8, MTPDecodingConfig.spec_dec_mode: with n the checkpoint's
    MTP layers, n == 1 and not use_mtp_vanilla gives MTP_EAGLE_ONE_MODEL for mtp_eagle_one_model true and MTP_EAGLE,
    the two-model path, for false; anything else, n > 1 included, gives MTP, run inside the target model. The same
    commit's log_two_model_deprecation_warning also turns mtp_eagle_one_model false back to true, so from there on
    MTP is always one-model; earlier versions key on num_nextn_predict_layers_from_model_config the same way and keep
    the false). mtp_layers: the checkpoint's MTP layer count where known (checkpoint_mtp_layers). EagleDecodingConfig
    gives EAGLE3 (two-model) for eagle3_one_model false; DraftTargetDecodingConfig loads a separate draft checkpoint."""
    if spec is None or spec is _ABSENT:
        return "none"
    kind = _text(_get(spec, "decoding_type")) if _get(spec, "decoding_type") is not _ABSENT else type(spec).__name__
    kind = kind.upper().replace("DECODINGCONFIG", "")
    if kind == "MTP":
        n = checkpoint_mtp_layers(spec, mtp_layers)
        two = (_get(spec, "use_mtp_vanilla") is not True and _get(spec, "mtp_eagle_one_model") is False
               and (n is None or n == 1))
        return "two-model" if two else "one-model MTP"
    if kind in ("EAGLE", "EAGLE3") and _get(spec, "eagle3_one_model") is False:
        return "two-model"
    if kind in ("DRAFT_TARGET", "DRAFTTARGET"):
        return "two-model"
    return "other"


def _speculative(args) -> list[Refusal]:
    spec = _get(args, "speculative_config")
    mode = speculative_mode(spec, _get(args, _MTP_LAYERS) if isinstance(args, _WithLoader) else None)
    if mode in ("none", "one-model MTP"):
        return []
    kind = _get(spec, "decoding_type")
    shown = f"{{decoding_type: {_show(kind)}, ...}}" if kind is not _ABSENT else _show(spec)
    why = _TWO_MODEL_WHY if mode == "two-model" else "this speculative decoding method is " + _NOT_VERIFIED
    if mode == "two-model" and _text(kind).upper() == "MTP":
        why += ("; MTP with mtp_eagle_one_model false is two-model only on a checkpoint with one MTP layer (with more, "
                "TensorRT-LLM runs MTP inside the target model)")
    return [Refusal("speculative_config", shown, why, _SPEC_INSTEAD)]


def _dwdp_config(args) -> list[Refusal]:
    v = _get(args, "dwdp_config")
    if v is _ABSENT or v is None:
        return []
    return [Refusal("dwdp_config", _show(v), "engine dwdp_trtllm but " + _BOTH_WHY, _BOTH_INSTEAD)]


@dataclass(frozen=True)
class ServingFeature:
    """One row of the matrix: what users call it, the keys it covers, its status, where upstream defines it, and the
    check (None: supported whatever the value)."""

    feature: str
    keys: tuple[str, ...]
    status: str
    source: str
    check: Callable[[Any], list[Refusal]] | None = None


SERVING_FEATURES: tuple[ServingFeature, ...] = (
    ServingFeature("speculative decoding, one-model MTP", ("speculative_config",), "supported",
                   LLM_ARGS + " MTPDecodingConfig.spec_dec_mode (MTP_EAGLE_ONE_MODEL, MTP)", _speculative),
    ServingFeature("speculative decoding, two-model (Eagle3 / MTP with mtp_eagle_one_model false, draft-target)",
                   ("speculative_config",), "refused", LLM_ARGS + " EagleDecodingConfig.spec_dec_mode, "
                   "MTPDecodingConfig.spec_dec_mode (MTP_EAGLE), DraftTargetDecodingConfig", None),
    ServingFeature("speculative decoding, other methods (Eagle3 one-model, NGram, PARD, DFlash, SA, AUTO, ...)",
                   ("speculative_config",), "refused", LLM_ARGS + " DecodingBaseConfig subclasses", None),
    ServingFeature("CUDA graphs", ("cuda_graph_config", "use_cuda_graph", "prefill_cuda_graph_backend"), "refused",
                   LLM_ARGS + " TorchLlmArgs.cuda_graph_config (default_factory=CudaGraphConfig), "
                   "prefill_cuda_graph_backend; " + PYTORCH_CONFIG + " use_cuda_graph (default True)", _cuda_graphs),
    ServingFeature("torch.compile, piecewise CUDA graphs", ("torch_compile_config", "torch_compile_enabled"), "refused",
                   LLM_ARGS + " TorchLlmArgs.torch_compile_config, TorchCompileConfig.enable_piecewise_cuda_graph; "
                   + PYTORCH_CONFIG + " torch_compile_enabled", _torch_compile),
    ServingFeature("overlap scheduler", ("disable_overlap_scheduler",), "refused (must be true)",
                   LLM_ARGS + " TorchLlmArgs.disable_overlap_scheduler (default False)", _overlap),
    ServingFeature("MoE backend, chunking, load balancer",
                   ("moe_config.backend", "moe_config.max_num_tokens", "moe_config.load_balancer"),
                   "CUTLASS only; chunking and load balancer refused",
                   LLM_ARGS + " MoeConfig (backend default AUTO); " + PYTORCH_CONFIG + " moe_backend, "
                   "moe_max_num_tokens, moe_load_balancer", _moe),
    ServingFeature("attention DP, tensor / pipeline / MoE parallelism",
                   ("enable_attention_dp", "tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size",
                    "moe_expert_parallel_size", "moe_tensor_parallel_size"),
                   "TP1 context servers; attention DP accepted at TP1", LLM_ARGS + " BaseLlmArgs", _parallelism),
    ServingFeature("upstream's own DWDP", ("dwdp_config",), "refused beside engine dwdp_trtllm",
                   LLM_ARGS + " TorchLlmArgs.dwdp_config", _dwdp_config),
    ServingFeature("chunked prefill", ("enable_chunked_prefill",), "supported", LLM_ARGS + " BaseLlmArgs"),
    ServingFeature("KV cache settings", ("kv_cache_config",), "supported", LLM_ARGS + " BaseLlmArgs.kv_cache_config"),
    ServingFeature("batch limits", ("max_num_tokens", "max_batch_size"), "supported", LLM_ARGS + " BaseLlmArgs"),
    ServingFeature("weight updates (update_weights, ModelLoader.reload)", (), "refused before any weight changes",
                   "tensorrt_llm/llmapi/rlhf_utils.py WorkerExtension.update_weights: NVIDIA's @ 65b31db1 starts with "
                   "the pre_reload_weights walk (refused at its first module, the model root); the fork "
                   "Barry-Delaney/TensorRT-LLM @ c513246cf9aa runs a check_reload_capability preflight first "
                   "(refused there)", None),
)


def check_serving_args(args: Any, loader_values: dict[str, Any] | None = None) -> list[Refusal]:
    """Every refusal for one server's LLM args (TorchLlmArgs / PyTorchConfig, or a mapping of the same keys).
    `loader_values`: the ModelLoader's own `speculative_config` (its spec_config) and `max_num_tokens`, used where
    not None in place of the args' (the values the loader builds the model with)."""
    given = {k: v for k, v in (loader_values or {}).items() if v is not None}
    view = _WithLoader(args, given) if given else args
    typed = check_value_types(view)  # a key of the wrong type is said once, there, and not compared by the rows below
    bad = {r.key for r in typed}
    return typed + [r for f in SERVING_FEATURES if f.check is not None for r in f.check(view)
                    if r.key not in bad and r.key.partition(".")[0] not in bad]


def refuse_unsupported(args: Any, loader_values: dict[str, Any] | None = None) -> None:
    """Raise ServingFeaturesRefused naming every refused setting of `args` (check_serving_args); return when none."""
    refusals = check_serving_args(args, loader_values)
    if refusals:
        raise ServingFeaturesRefused(refusals)
