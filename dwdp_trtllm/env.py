"""Every environment variable the package reads, read here and nowhere else."""
from __future__ import annotations

import os
from pathlib import Path

#: Path of a DWDP YAML config that activates the TensorRT-LLM integration in every process.
DWDP_TRTLLM_CONFIG = "DWDP_TRTLLM_CONFIG"
#: "1" activates the TensorRT-LLM integration with the config carried in the TensorRT-LLM YAML.
DWDP_TRTLLM = "DWDP_TRTLLM"
#: Cache directory of JIT-built ops (default ~/.cache/dwdp_trtllm).
DWDP_CACHE_DIR = "DWDP_CACHE_DIR"
#: Where CUTLASS headers live when the nvidia-cutlass wheel is not installed.
CUTLASS_DIR = "CUTLASS_DIR"
#: Comma-separated FP8 variant sources (grouped_gemm_fp8_<tag>.cu) to leave out of the CUDA ops build (one that
#: fails to compile on some toolchain); the glue reaches the variants through weak symbols.
DWDP_OPS_EXCLUDE = "DWDP_OPS_EXCLUDE"
#: "1": count host synchronisations inside the DWDP MoE layer on CUDA (torch sync debug mode; tests).
DWDP_CHECK_SYNC = "DWDP_CHECK_SYNC"
#: "1": run the engine's elementwise chains eagerly on CUDA instead of its Triton kernels (engine/fused.py).
DWDP_NO_FUSE = "DWDP_NO_FUSE"
#: A built DeepGEMM source tree (scripts/gpu/deepgemm_build.sh's DEST) put on sys.path before `import deep_gemm`
#: (ops/deepgemm.py).
DWDP_DEEPGEMM_DIR = "DWDP_DEEPGEMM_DIR"
#: The FP8 routed experts' GEMM mainloop under gemm multi_buffer / composite_view on sm_90: "cutlass" (default:
#: dwdp::grouped_gemm's CUTLASS kernels; in an engine iteration DeepGEMM's op ran slower and stopped for seconds to
#: compile each new shape, docs/BENCHMARKS.md "Routed-expert op"), "auto" (DeepGEMM when built and the call is large
#: enough for its op alone to win, engine/gemm_paths.DEEPGEMM_MIN_ROWS_PER_EXPERT, else ours), "deepgemm" (DeepGEMM
#: whenever it can run, whatever the call's size).
DWDP_MOE_MAINLOOP = "DWDP_MOE_MAINLOOP"
MOE_MAINLOOPS = ("auto", "cutlass", "deepgemm")
#: Which DeepGEMM source scripts/bench_deepgemm.py records beside its numbers (default DEEPGEMM_SOURCE_DEFAULT).
DWDP_DEEPGEMM_SOURCE = "DWDP_DEEPGEMM_SOURCE"
#: The commit of the code that runs, where the checkout's own .git cannot say it (a copied tree whose .git is stale):
#: `dwdp calibrate` records it as its moe_op record's commit instead of `git rev-parse HEAD`.
DWDP_COMMIT = "DWDP_COMMIT"
#: Rendezvous launch of DWDP context workers (one single-GPU `trtllm-serve` per context rank, no MPI world between
#: them), the variables NVIDIA's srt-slurm launcher sets for TensorRT-LLM's DWDP prefill workers
#: (`src/srtctl/backends/trtllm.py`, `TRTLLMBackend.get_process_environment`): this worker's context rank, the
#: address and port of rank 0's store, and how long the rendezvous may take (seconds).
TRTLLM_DWDP_RANK = "TRTLLM_DWDP_RANK"
TRTLLM_DWDP_MASTER_ADDR = "TRTLLM_DWDP_MASTER_ADDR"
TRTLLM_DWDP_MASTER_PORT = "TRTLLM_DWDP_MASTER_PORT"
TRTLLM_DWDP_RENDEZVOUS_TIMEOUT_S = "TRTLLM_DWDP_RENDEZVOUS_TIMEOUT_S"
#: the rendezvous wait when TRTLLM_DWDP_RENDEZVOUS_TIMEOUT_S is unset (srt-slurm's DWDP_RENDEZVOUS_TIMEOUT_S)
RENDEZVOUS_TIMEOUT_DEFAULT_S = 3600.0
#: the DeepGEMM commit scripts/gpu/deepgemm_build.sh builds by default
DEEPGEMM_SOURCE_DEFAULT = "deepseek-ai/DeepGEMM 54e2261"


def get(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def cache_dir() -> Path:
    return Path(os.environ.get(DWDP_CACHE_DIR) or Path.home() / ".cache" / "dwdp_trtllm")


def check_sync() -> bool:
    return os.environ.get(DWDP_CHECK_SYNC) == "1"


def no_fuse() -> bool:
    return os.environ.get(DWDP_NO_FUSE) == "1"


def deepgemm_dir() -> str | None:
    """DWDP_DEEPGEMM_DIR as set (None or empty: unset)."""
    return os.environ.get(DWDP_DEEPGEMM_DIR) or None


def moe_mainloop() -> str:
    """DWDP_MOE_MAINLOOP (default "cutlass"); ValueError naming the variable on any other value."""
    v = os.environ.get(DWDP_MOE_MAINLOOP) or "cutlass"
    if v not in MOE_MAINLOOPS:
        raise ValueError(f"{DWDP_MOE_MAINLOOP}={v!r}: expected one of {', '.join(MOE_MAINLOOPS)}")
    return v


def deepgemm_source() -> str:
    """DWDP_DEEPGEMM_SOURCE, else DEEPGEMM_SOURCE_DEFAULT."""
    return os.environ.get(DWDP_DEEPGEMM_SOURCE) or DEEPGEMM_SOURCE_DEFAULT


def launch_env() -> dict[str, int] | None:
    """(rank, world_size, local_rank) from torchrun or mpirun variables, or None when not launched by them.

    Under mpirun the MPI variables win: the global MPI rank is the process's rank (TensorRT-LLM's
    disaggregated_mpi_worker places context servers first by it), and a RANK/WORLD_SIZE some launcher layer
    exports (e.g. instance-local torch.distributed settings) must not change it."""
    env = os.environ
    torchrun = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    mpi = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
           ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"))
    for r, w, lr in ((*mpi, torchrun) if launched_by_mpi() else (torchrun, *mpi)):
        if r in env and w in env:
            return {"rank": int(env[r]), "world_size": int(env[w]), "local_rank": int(env.get(lr, env[r]))}
    return None


def dwdp_rendezvous() -> dict | None:
    """{rank, addr, port, timeout_s} of a rendezvous launch (TRTLLM_DWDP_RANK set), else None. A rank without the
    master's address or port, or a value that is not a number of the right range, is a ConfigError naming the
    variable."""
    from .errors import ConfigError
    env = os.environ
    if env.get(TRTLLM_DWDP_RANK) is None:
        return None

    def number(name: str, kind, low, default=None):
        raw = env.get(name)
        if raw is None or raw == "":
            if default is not None:
                return default
            raise ConfigError(None, name, f"must be set when {TRTLLM_DWDP_RANK} is (the rendezvous launch)")
        try:
            v = kind(raw)
        except ValueError:
            v = None
        if v is None or v < low or (name == TRTLLM_DWDP_MASTER_PORT and v > 65535):
            rng = "1..65535" if name == TRTLLM_DWDP_MASTER_PORT else f">= {low}"
            raise ConfigError(None, name, f"must be a {kind.__name__} {rng}, got {raw!r}")
        return v

    addr = env.get(TRTLLM_DWDP_MASTER_ADDR) or ""
    if not addr:
        raise ConfigError(None, TRTLLM_DWDP_MASTER_ADDR, f"must be set when {TRTLLM_DWDP_RANK} is (the host of the "
                                                         "worker whose rank is 0)")
    return {"rank": number(TRTLLM_DWDP_RANK, int, 0), "addr": addr,
            "port": number(TRTLLM_DWDP_MASTER_PORT, int, 1),
            "timeout_s": number(TRTLLM_DWDP_RENDEZVOUS_TIMEOUT_S, float, 1.0, RENDEZVOUS_TIMEOUT_DEFAULT_S)}


def launched_by_mpi() -> bool:
    return "OMPI_COMM_WORLD_RANK" in os.environ or "PMI_RANK" in os.environ


def cuda_visible_devices() -> str | None:
    """CUDA_VISIBLE_DEVICES as set (None: unset, every GPU visible); host_resources.visible_gpus reads it as CUDA does."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


#: NVLink multicast must stay off on the lent multi-GPU machines (a program using it can take the host's GPUs down).
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def set_multicast_off() -> None:
    """Force the multicast-off settings in this process (children inherit them)."""
    os.environ.update(MULTICAST_OFF)
