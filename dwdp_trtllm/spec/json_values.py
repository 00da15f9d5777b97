"""The one typed reader of a checkpoint's JSON: parsing (config.json, model.safetensors.index.json) and every
config.json value's type and range, per key, in one table (`KEYS`).

A config.json comes from anywhere (a hub download, a hand edit, a conversion script): a value of the wrong type
(`max_position_embeddings: "4096"`, `weight_block_size: 128`, `rope_scaling.truncate: "no"`) must end in one line
naming the file, the key, the value and what was expected, never in a TypeError deep in a family's reader or a bool
read from a non-empty string. So hf_config.py (the engine's reader) and model_dims.py (the planner's) first call
`check_values` on the whole mapping, and take single values through `value`; both see the same table:
- every key that sets a ModelSpec field (`JSON_FIELDS`) has that field's type and bounds from models.FIELD_BOUNDS, the
  list every ModelSpec is checked against;
- the other keys a reader looks at (rope scaling, quantization, booleans, max_position_embeddings) are listed here.
A null value means "not given" (HF writes defaults as null); a reader that needs a value names the key as missing.

Parsing refuses JSON nested deeper than `MAX_DEPTH` (a real config.json is about 4 levels deep, an index 2): a
100,000-deep array is a RecursionError in Python's json module, and a merely deep one would be printed whole in an
error message.
"""
from __future__ import annotations

import json
import math
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .models import FIELD_BOUNDS
from .schema import ConfigError

#: the deepest nesting of arrays and objects a checkpoint's JSON may have
MAX_DEPTH = 32

#: config.json key -> the ModelSpec field it sets: its value is bounded by models.FIELD_BOUNDS
JSON_FIELDS = {
    "hidden_size": "hidden_size", "num_hidden_layers": "num_layers", "first_k_dense_replace": "first_k_dense",
    "intermediate_size": "dense_intermediate", "moe_intermediate_size": "moe_intermediate",
    "n_routed_experts": "num_experts", "num_experts": "num_experts", "num_local_experts": "num_experts",
    "num_experts_per_tok": "top_k", "n_shared_experts": "num_shared_experts", "vocab_size": "vocab_size",
    "num_attention_heads": "num_heads", "num_key_value_heads": "num_kv_heads", "head_dim": "head_dim",
    "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank", "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim", "n_group": "n_group",
    "topk_group": "topk_group", "routed_scaling_factor": "routed_scaling_factor", "rms_norm_eps": "rms_eps",
    "rope_theta": "rope_theta", "num_nextn_predict_layers": "mtp_layers", "sliding_window": "sliding_window",
    # other families' names for the same fields (model_dims.ALIASES: gpt-oss, Hunyuan, Qwen-style shared experts)
    "experts_per_token": "top_k", "moe_topk": "top_k", "num_shared_experts": "num_shared_experts",
}


@dataclass(frozen=True)
class Kind:
    """A value's type and range: int, float (finite), bool, or a list of `length` ints in [lo, hi]."""
    type: type
    lo: float | None = None
    hi: float | None = None
    length: int | None = None  # lists only

    def problem(self, v) -> str | None:
        """What is wrong with v (not None), or None."""
        if self.type is bool:
            return None if isinstance(v, bool) else "expected true or false"
        if self.type is list:
            item = Kind(int, self.lo, self.hi)
            if isinstance(v, list) and len(v) == self.length and not any(item.problem(x) for x in v):
                return None
            return f"expected a list of {self.length} integers in [{self.lo:,}, {self.hi:,}]"
        if self.type is int:
            ok, what = isinstance(v, int) and not isinstance(v, bool), f"an integer in [{self.lo:,}, {self.hi:,}]"
        else:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            what = f"a finite number in [{self.lo:g}, {self.hi:g}]"
        return None if ok and self.lo <= v <= self.hi else f"expected {what}"


_POSITIONS = Kind(int, 1, 1 << 24)  # context lengths: 16M tokens is ~100x the longest released
_YARN_NUMBER = Kind(float, -1e6, 1e6)  # models.yarn_problem's bound
_ROPE = {"original_max_position_embeddings": _POSITIONS, "truncate": Kind(bool), "partial_rotary_factor": Kind(float, 0, 1),
         **{k: _YARN_NUMBER for k in ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor")},
         "rope_theta": Kind(float, *FIELD_BOUNDS["rope_theta"][:2])}

#: key (nested keys joined by ".") -> its Kind: the one table of config.json value types
KEYS: dict[str, Kind] = {
    **{k: Kind(FIELD_BOUNDS[f][2], *FIELD_BOUNDS[f][:2]) for k, f in JSON_FIELDS.items()},
    "max_position_embeddings": _POSITIONS, "qk_head_dim": Kind(int, 1, 8192),
    **{k: Kind(bool) for k in ("norm_topk_prob", "rope_interleave", "tie_word_embeddings")},
    **{f"{top}.{k}": kind for top in ("rope_scaling", "rope_parameters") for k, kind in _ROPE.items()},
    "quantization_config.weight_block_size": Kind(list, 1, 1 << 16, length=2),
}


_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxlevel = 60, 60, 80, 4, 4, 2


def shown(v) -> str:
    """v as an error message shows it: a long string, number, list or mapping abbreviated with '...'."""
    return _SHOWN.repr(v)


def _at(data: dict, key: str):
    """The value at a dotted key (None when it or a mapping above it is absent, or a level above is no mapping)."""
    for part in key.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def check_values(data: dict, file: str) -> None:
    """Every value of `data` that `KEYS` lists (nulls: not given) has its type and range; ConfigError naming file,
    key, value and what was expected for the first that does not."""
    for key, kind in KEYS.items():
        v = _at(data, key)
        if v is not None and (problem := kind.problem(v)):
            raise ConfigError(file, key, f"{problem}, got {shown(v)}")


def value(data: dict, key: str, file: str, default: Any = ...) -> Any:
    """The value of a top-level `key` of KEYS, checked; `default` when absent or null (no default: ConfigError, the key
    is required)."""
    v = data.get(key)
    if v is None:
        if default is ...:
            raise ConfigError(file, key, "required key is missing")
        return default
    problem = KEYS[key].problem(v)
    if problem:
        raise ConfigError(file, key, f"{problem}, got {shown(v)}")
    return v


def _depth(v) -> int:
    """The nesting depth of parsed JSON (a scalar 0), without recursion."""
    deepest, stack = 0, [(v, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d + 1)
            if d + 1 > MAX_DEPTH:
                return d + 1
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def load_json(f: Path, key: str = "") -> Any:
    """The parsed JSON file f; ConfigError naming f when it cannot be read, is not JSON or nests deeper than
    MAX_DEPTH (key: the setting that named f, e.g. model.checkpoint for its index: the error names that key, f in
    its text)."""
    def fail(msg: str) -> ConfigError:
        return ConfigError(None, key, f"{f}: {msg}") if key else ConfigError(str(f), "", msg)

    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise fail(f"not valid JSON: {e}") from None
    except RecursionError:
        raise fail(f"nested deeper than Python's JSON reader allows; expected at most {MAX_DEPTH} levels of arrays "
                   "and objects") from None
    if _depth(data) > MAX_DEPTH:
        raise fail(f"nested more than {MAX_DEPTH} levels deep; expected at most {MAX_DEPTH} levels of arrays and objects")
    return data
