"""Which engine this process runs, decided once per process (no tensorrt_llm import).

- DWDP_TRTLLM_CONFIG set: our file decides. engine upstream -> we patch nothing (the TensorRT-LLM
  YAML must carry dwdp_config); dwdp_trtllm or auto -> our engine (auto cannot pick upstream for a
  DwdpConfig of ours: upstream needs NVFP4, which our weight_dtype does not cover).
- Only DWDP_TRTLLM=1: the upstream `dwdp_config:` key in the TensorRT-LLM YAML drives upstream's
  engine; we only verify the patch targets.
- Processes whose global rank is >= num_groups * dwdp_size (generation servers, which
  disaggregated_mpi_worker places after the context servers) get engine "none".
"""
from __future__ import annotations

import importlib.util

from .. import env

_cache: dict = {}


def upstream_dwdp_present() -> bool:
    """Upstream DWDP module exists in the installed TensorRT-LLM (spec lookup only, nothing imported)."""
    try:
        return importlib.util.find_spec("tensorrt_llm._torch.pyexecutor.dwdp") is not None
    except (ImportError, ValueError):
        return False


def integration_config():
    """The IntegrationConfig of DWDP_TRTLLM_CONFIG, or None when only DWDP_TRTLLM=1 is set."""
    if "config" not in _cache:
        from .boot import state
        cfg = state().get("config")
        path = env.get(env.DWDP_TRTLLM_CONFIG)
        if cfg is None and path:
            from .settings import load_integration_config
            cfg = load_integration_config(path)
        _cache["config"] = cfg
    return _cache["config"]


def global_rank() -> int:
    le = env.launch_env()
    return le["rank"] if le else 0


def engine_for_process() -> str:
    """'dwdp_trtllm' | 'upstream' | 'none' for this process."""
    if "engine" not in _cache:
        cfg = integration_config()
        if cfg is None:
            _cache["engine"] = "upstream"
        elif global_rank() >= cfg.dwdp.world_size:
            _cache["engine"] = "none"
        elif cfg.engine == "upstream":
            _cache["engine"] = "upstream"
        else:
            _cache["engine"] = "dwdp_trtllm"
    return _cache["engine"]


def reset_for_tests() -> None:
    _cache.clear()
