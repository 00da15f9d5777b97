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
#: Which DeepGEMM source scripts/bench_deepgemm.py records beside its numbers (default DEEPGEMM_SOURCE_DEFAULT).
DWDP_DEEPGEMM_SOURCE = "DWDP_DEEPGEMM_SOURCE"
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
