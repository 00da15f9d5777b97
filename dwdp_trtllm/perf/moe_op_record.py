"""One measurement of this project's whole routed-expert op (a *record*): its format and strict validation (pure).

`dwdp calibrate` writes one as the calibration file's `moe_op` key (perf/calibration.py reads it through
parse_record); a shipped table `dwdp_trtllm/data/moe_op/<gpu>.json` lists several under "records"
(perf/moe_op.py reads them and prices DWDP's routed experts with one). The format is perf/moe_op.py's docstring and
dwdp_trtllm/data/moe_op/README.md.
"""
from __future__ import annotations

from typing import Any

from ..spec.schema import ConfigError
from .calibration_detail import _mapping
from .kernel_tables import DISTS

GEMMS = ("multi_buffer", "composite_view", "merge")
WEIGHT_DTYPES = ("fp8", "bf16")
MODEL_KEYS = {"name": str, "hidden": int, "moe_inter": int, "experts": int, "top_k": int}
SPLIT_KEYS = ("dwdp_size", "local_experts", "slot_experts")
SOURCE_KEYS = ("gpu", "date", "commit", "command", "how", "host")
#: the source fields a record must carry (provenance: where, when, which code, what ran)
SOURCE_NEED = ("gpu", "date", "commit", "command")


def _err(file: str, key: str, expected: str):
    return ConfigError(file, key, expected)


def _int(file: str, key: str, v: Any, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise _err(file, key, f"expected an integer >= {lo}, got {v!r}")
    return v


def _rows(file: str, key: str, v: Any) -> tuple[tuple[float, float], ...]:
    """[[tokens, ms], ...]: tokens integers >= 1, distinct; ms > 0 and finite; sorted by tokens."""
    if not isinstance(v, list) or not v:
        raise _err(file, key, f"expected a non-empty list of [tokens, ms] pairs, got {v!r}")
    out = []
    for i, p in enumerate(v):
        if not isinstance(p, list) or len(p) != 2:
            raise _err(file, f"{key}[{i}]", f"expected a pair [tokens, ms], got {p!r}")
        t = _int(file, f"{key}[{i}][0]", p[0])
        ms = p[1]
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not (0 < ms < float("inf")):
            raise _err(file, f"{key}[{i}][1]", f"expected ms > 0, got {ms!r}")
        out.append((float(t), float(ms)))
    if len({t for t, _ in out}) != len(out):
        raise _err(file, key, f"token counts must be distinct, got {[int(t) for t, _ in out]}")
    return tuple(sorted(out))


def mapping(file: str, key: str, v: Any, allowed, need=()) -> dict:
    """v as a mapping of only `allowed` keys with every `need` key (calibration_detail's one check of a record)."""
    return _mapping(file, key, v, tuple(allowed), need=need)


def parse_record(v: Any, file: str, key: str = "moe_op") -> dict:
    """A validated record (module docstring), `ms` rows as sorted tuples; ConfigError naming file and dotted key."""
    r = mapping(file, key, v, ("gemm", "weight_dtype", "model", "split", "ms", "source"),
              need=("gemm", "weight_dtype", "model", "split", "ms", "source"))
    if r["gemm"] not in GEMMS:
        raise _err(file, f"{key}.gemm", f"expected one of {', '.join(GEMMS)}, got {r['gemm']!r}")
    if r["weight_dtype"] not in WEIGHT_DTYPES:
        raise _err(file, f"{key}.weight_dtype", f"expected one of {', '.join(WEIGHT_DTYPES)}, got {r['weight_dtype']!r}")
    m = mapping(file, f"{key}.model", r["model"], tuple(MODEL_KEYS), need=tuple(MODEL_KEYS))
    model = {}
    for k, t in MODEL_KEYS.items():
        model[k] = m[k] if t is str else _int(file, f"{key}.model.{k}", m[k])
        if t is str and (not isinstance(m[k], str) or not m[k]):
            raise _err(file, f"{key}.model.{k}", f"expected a non-empty string, got {m[k]!r}")
    s = mapping(file, f"{key}.split", r["split"], SPLIT_KEYS, need=SPLIT_KEYS)
    split = {k: _int(file, f"{key}.split.{k}", s[k], lo=0 if k == "slot_experts" else 1) for k in SPLIT_KEYS}
    if split["local_experts"] + split["slot_experts"] != model["experts"]:
        raise _err(file, f"{key}.split", f"local_experts + slot_experts must be the model's {model['experts']} "
                                         f"experts, got {split['local_experts']} + {split['slot_experts']}")
    ms = mapping(file, f"{key}.ms", r["ms"], DISTS, need=("balanced",))
    src = mapping(file, f"{key}.source", r["source"], SOURCE_KEYS, need=SOURCE_NEED)
    for k, x in src.items():
        if not isinstance(x, str) or not x:
            raise _err(file, f"{key}.source.{k}", f"expected a non-empty string, got {x!r}")
    return {"gemm": r["gemm"], "weight_dtype": r["weight_dtype"], "model": model, "split": split,
            "ms": {d: _rows(file, f"{key}.ms.{d}", x) for d, x in ms.items()}, "source": dict(src)}


def record_json(rec: dict) -> dict:
    """A parsed record back as JSON values (rows as [int tokens, ms] lists)."""
    return {**rec, "ms": {d: [[int(t), ms] for t, ms in rows] for d, rows in rec["ms"].items()}}


def model_dims(model) -> dict:
    """A ModelSpec's dims as a record's `model` names them."""
    return {"name": model.name, "hidden": model.hidden_size, "moe_inter": model.moe_intermediate,
            "experts": model.num_experts, "top_k": model.top_k}
