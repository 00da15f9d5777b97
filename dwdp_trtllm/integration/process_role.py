"""What this process is in a DWDP deployment, decided once per process (no tensorrt_llm import): its integration
config, its global rank, the engine it runs, the placement of a model's experts and its HopperDwdpManager.

Engine:
- DWDP_TRTLLM_CONFIG set: our file decides. engine upstream -> we patch nothing (the TensorRT-LLM
  YAML must carry dwdp_config); dwdp_trtllm or auto -> our engine (auto cannot pick upstream for a
  DwdpConfig of ours: upstream needs NVFP4, which our weight_dtype does not cover).
- Only DWDP_TRTLLM=1: the upstream `dwdp_config:` key in the TensorRT-LLM YAML drives upstream's
  engine; we patch nothing.
- Processes whose global rank is >= num_groups * dwdp_size (generation servers, which
  disaggregated_mpi_worker places after the context servers) get engine "none".
The rank is env.launch_env's (under mpirun the MPI rank), or TRTLLM_DWDP_RANK under a rendezvous launch. boot.py hands over the config it validated at
activation (remember_config); this module imports nothing of the integration at module level.
"""
from __future__ import annotations

from .. import env

_cache: dict = {}


def remember_config(cfg) -> None:
    """The IntegrationConfig boot validated at activation (read once per process)."""
    if cfg is not None:
        _cache["config"] = cfg


def integration_config():
    """The IntegrationConfig of DWDP_TRTLLM_CONFIG, or None when only DWDP_TRTLLM=1 is set."""
    if "config" not in _cache:
        path = env.get(env.DWDP_TRTLLM_CONFIG)
        cfg = None
        if path:
            from .settings import load_integration_config
            cfg = load_integration_config(path)
        _cache["config"] = cfg
    return _cache["config"]


def global_rank() -> int:
    """This process's context rank: TRTLLM_DWDP_RANK under a rendezvous launch (group.py), else the launcher's."""
    rv = env.dwdp_rendezvous()
    if rv is not None:
        return rv["rank"]
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


def dwdp_rank() -> int:
    """This context rank's index in its DWDP group (global rank mod dwdp_size; groups are consecutive ranks)."""
    return global_rank() % integration_config().dwdp.dwdp_size


def placement_for(num_experts: int):
    """(DwdpConfig, placement) of the process's integration config: validated and built once per
    num_experts (every MoE layer of a model asks; the balanced source search is not free)."""
    key = ("placement", num_experts)
    if key not in _cache:
        cfg = integration_config()
        if cfg is None:
            raise RuntimeError("dwdp_trtllm engine active without DWDP_TRTLLM_CONFIG: set it to the integration YAML "
                               "(dwdp serve does this) or use engine: upstream")
        from ..core.placement import make_placement
        cfg.dwdp.validate_for(num_experts, None, file=cfg.path, prefix="dwdp_config")
        _cache[key] = (cfg.dwdp, make_placement(cfg.dwdp, num_experts))
    return _cache[key]


def process_manager():
    """The HopperDwdpManager of this process (created on first use, and again after the previous one was exited;
    dwdp_trtllm engine only). Registering it as upstream's global manager (VA era) is trtllm/patches.py's
    register_process_manager, at import of pyexecutor.dwdp and before every ModelLoader.load, so a model built after
    an executor shutdown finds the fresh one registered, as upstream's creator enters a new manager per executor."""
    if "manager" not in _cache or _cache["manager"].closed:
        from .hopper_manager import HopperDwdpManager
        cfg = integration_config().dwdp
        _cache["manager"] = HopperDwdpManager(cfg, dwdp_rank(), rank=global_rank())
    return _cache["manager"]


def close_process_manager(executor=None) -> None:
    """Executor shutdown: exit the process's manager (runtime closed, unregistered) if one is open. executor: the
    PyExecutor that shut down; when it hung or its worker thread still runs (executor_shutdown.local_close) the
    runtime closes locally first (no collective)."""
    mgr = _cache.get("manager")
    if mgr is not None and not mgr.closed:
        from .executor_shutdown import local_close
        local = None if executor is None else local_close(executor)
        if local is not None:
            try:
                rt = mgr.runtime
            except RuntimeError:  # no runtime attached yet: nothing to close
                rt = None
            if rt is not None:
                rt.close(local)
        mgr.__exit__(None, None, None)
