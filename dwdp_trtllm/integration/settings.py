"""The integration config file (DWDP_TRTLLM_CONFIG) and translation to/from upstream's `dwdp_config`.

File layout (YAML):
    engine: auto | upstream | dwdp_trtllm     # optional, default auto
    shutdown_timeout_s: 60                    # optional: executor shutdown (adapter.close: drain, the DWDP group's
                                              # barrier, release) takes at most this long in all
    dwdp_config:                              # upstream key; `dwdp:` is accepted too
      dwdp_size: 4
      num_experts_per_worker: 64              # upstream fields first, then ours (DwdpConfig)
      ...
A file holding only DwdpConfig fields at the top level is accepted too (engine then defaults to auto).

Upstream TensorRT-LLM's DwdpConfig (llmapi/llm_args.py) has exactly UPSTREAM_FIELDS; everything else in
our DwdpConfig is an extra that upstream's strict schema (extra="forbid") would reject, so
`to_upstream` returns the extras separately and never puts them in the upstream dict.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..spec.config import DwdpConfig
from ..spec.schema import ConfigError, from_dict, load_yaml

#: Fields of upstream TensorRT-LLM's DwdpConfig (tensorrt_llm/llmapi/llm_args.py), in its order.
UPSTREAM_FIELDS = ("dwdp_size", "num_groups", "num_experts_per_worker", "num_prefetch_experts", "contention_opt")
#: Upstream's default for contention_opt (ours defaults to True).
UPSTREAM_CONTENTION_OPT_DEFAULT = False
Engine = Literal["auto", "upstream", "dwdp_trtllm"]
ENGINES = ("auto", "upstream", "dwdp_trtllm")
_TOP_KEYS = ("engine", "shutdown_timeout_s", "dwdp_config", "dwdp")
#: shutdown_timeout_s: its default and bound (seconds; above 0, at most an hour: a shutdown that waits longer is a hang)
DEFAULT_SHUTDOWN_TIMEOUT_S, SHUTDOWN_TIMEOUT_MAX_S = 60.0, 3600.0


@dataclass(frozen=True, slots=True)
class IntegrationConfig:
    """What DWDP_TRTLLM_CONFIG points at: which engine runs DWDP and its DwdpConfig."""

    engine: Engine
    dwdp: DwdpConfig
    path: str | None = None
    #: the file's `gemm`, None when it names none: then dwdp.gemm is DwdpConfig's (the bench engine's) default, merge,
    #: which nobody asked for here, and the adapter tries the measured default for the weights at hand instead
    #: (moe_evidence.default_gemm)
    gemm_requested: str | None = None
    #: seconds executor shutdown waits at the barrier for the DWDP group's other ranks before releasing the transport
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S


def _given_gemm(section: Any, dwdp: DwdpConfig) -> str | None:
    """The gemm the file's section names (validated, in dwdp), None when it names none."""
    return dwdp.gemm if "gemm" in (section or {}) else None


def load_integration_config(path: str | Path) -> IntegrationConfig:
    """Read and validate an integration config file; errors name the file and key."""
    p = str(Path(path).resolve())
    data = load_yaml(p)
    engine = data.get("engine", "auto")
    if engine not in ENGINES:
        raise ConfigError(p, "engine", f"expected one of {', '.join(ENGINES)}, got {engine!r}")
    timeout = _shutdown_timeout(p, data.get("shutdown_timeout_s", DEFAULT_SHUTDOWN_TIMEOUT_S))
    if "dwdp_config" in data or "dwdp" in data:
        extra = sorted(k for k in data if k not in _TOP_KEYS)
        if extra:
            raise ConfigError(p, extra[0], f"unknown top-level key; expected {', '.join(_TOP_KEYS)}")
        if "dwdp_config" in data and "dwdp" in data:
            raise ConfigError(p, "dwdp", "give either dwdp_config or dwdp, not both")
        sec = "dwdp_config" if "dwdp_config" in data else "dwdp"
        dwdp = from_dict(DwdpConfig, data[sec], file=p, prefix=sec)
        return IntegrationConfig(engine=engine, dwdp=dwdp, path=p, gemm_requested=_given_gemm(data[sec], dwdp),
                                 shutdown_timeout_s=timeout)
    fields = {k: v for k, v in data.items() if k not in ("engine", "shutdown_timeout_s")}
    dwdp = from_dict(DwdpConfig, fields, file=p)
    return IntegrationConfig(engine=engine, dwdp=dwdp, path=p, gemm_requested=_given_gemm(fields, dwdp),
                             shutdown_timeout_s=timeout)


def _shutdown_timeout(path: str, value: Any) -> float:
    """The file's shutdown_timeout_s as float seconds; ConfigError naming the key unless a number in
    (0, SHUTDOWN_TIMEOUT_MAX_S]."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= SHUTDOWN_TIMEOUT_MAX_S
    if not ok:  # NaN fails the comparison too
        raise ConfigError(path, "shutdown_timeout_s", f"expected seconds in (0, {SHUTDOWN_TIMEOUT_MAX_S:g}], got {value!r}")
    return float(value)


def extras_of(cfg: DwdpConfig) -> dict[str, Any]:
    """Our fields that upstream's DwdpConfig does not have, with their values."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in UPSTREAM_FIELDS}


def to_upstream(cfg: DwdpConfig, num_experts: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(upstream dwdp_config dict, dropped extras) for `cfg`.

    Upstream only knows the [r*stride, r*stride+size) placement. A derived placement (both counts 0)
    translates when it is uniform: num_experts divisible by dwdp_size and redundant_experts == 0
    (size = stride = num_experts // dwdp_size); otherwise ConfigError naming the key that blocks it.
    """
    size, stride = cfg.num_experts_per_worker, cfg.num_prefetch_experts
    if not cfg.upstream_placement:
        if num_experts is None:
            raise ConfigError(None, "num_experts_per_worker",
                              "derived placement (0) needs the model's expert count to translate to upstream")
        if cfg.redundant_experts:
            raise ConfigError(None, "redundant_experts",
                              "upstream has no wrap-around redundancy; use num_experts_per_worker/num_prefetch_experts")
        if num_experts % cfg.dwdp_size:
            raise ConfigError(None, "dwdp_size",
                              f"{num_experts} experts do not split evenly over dwdp_size {cfg.dwdp_size}; "
                              "give num_experts_per_worker/num_prefetch_experts explicitly")
        size = stride = num_experts // cfg.dwdp_size
    up = {"dwdp_size": cfg.dwdp_size, "num_groups": cfg.num_groups, "num_experts_per_worker": size,
          "num_prefetch_experts": stride, "contention_opt": cfg.contention_opt}
    return up, extras_of(cfg)


def from_upstream(data: Any, *, extras: dict[str, Any] | None = None, file: str | None = None,
                  prefix: str = "dwdp_config") -> DwdpConfig:
    """Our DwdpConfig from an upstream dwdp_config mapping (or a pydantic object with those fields).

    Keeps upstream's meaning: a missing contention_opt is upstream's default (False), not ours.
    `extras` (our fields only) are merged in explicitly; an upstream key there is an error.
    """
    if hasattr(data, "model_dump"):
        data = data.model_dump()
    if not isinstance(data, dict):
        raise ConfigError(file, prefix, f"expected a mapping of upstream DwdpConfig fields, got {data!r}")
    for k in data:
        if k not in UPSTREAM_FIELDS:
            raise ConfigError(file, f"{prefix}.{k}", f"not an upstream DwdpConfig field; expected one of {', '.join(UPSTREAM_FIELDS)}")
    merged = {"contention_opt": UPSTREAM_CONTENTION_OPT_DEFAULT, **data}
    for k, v in (extras or {}).items():
        if k in UPSTREAM_FIELDS:
            raise ConfigError(file, f"{prefix}.{k}", "upstream field given as an extra; put it in the upstream mapping")
        merged[k] = v
    return from_dict(DwdpConfig, merged, file=file, prefix=prefix)


def upstream_supported(upstream_available: bool, sm: int | None, weight_dtype: str) -> bool:
    """Upstream DWDP runs only on Blackwell (sm >= 100) with NVFP4 + CuteDSL, and needs its DwdpConfig."""
    return upstream_available and sm is not None and sm >= 100 and weight_dtype == "nvfp4"


def choose_engine(requested: str, *, upstream_available: bool, sm: int | None, weight_dtype: str) -> tuple[str, str]:
    """(engine, reason); ConfigError when upstream is requested and this TensorRT-LLM lacks it."""
    upstream_ok = upstream_supported(upstream_available, sm, weight_dtype)
    if requested == "upstream":
        if not upstream_available:
            raise ConfigError(None, "engine", "upstream: the installed TensorRT-LLM has no DwdpConfig "
                              "(TorchLlmArgs.model_fields lacks dwdp_config); use engine: dwdp_trtllm")
        return "upstream", "requested"
    if requested == "dwdp_trtllm":
        return "dwdp_trtllm", "requested"
    if requested != "auto":
        raise ConfigError(None, "engine", f"expected one of {', '.join(ENGINES)}, got {requested!r}")
    if upstream_ok:
        return "upstream", f"auto: upstream DWDP present and sm_{sm} + {weight_dtype} is its supported case"
    why = ("TensorRT-LLM has no DwdpConfig" if not upstream_available else
           f"upstream DWDP needs Blackwell + nvfp4 (here sm_{sm}, {weight_dtype})")
    return "dwdp_trtllm", f"auto: {why}"
