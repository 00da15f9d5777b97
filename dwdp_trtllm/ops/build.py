"""JIT build and load of the dwdp C++/CUDA ops (plugins/) through torch.utils.cpp_extension.

One shared library registers TORCH_LIBRARY(dwdp): the CPU build holds only the CPU kernel (small, CI), the CUDA
build adds the CUTLASS sm90a kernels (one .cu per variant, so ninja compiles them in parallel). Builds are cached
under dwdp_trtllm.env.cache_dir()/ops/<name>-<key>, key = hash(torch version, arch, CUTLASS headers' version, every
plugin source). CUTLASS headers come from the nvidia-cutlass wheel (cutlass_library/source/include), or from the
CUTLASS_DIR environment variable (read through dwdp_trtllm.env).
"""
from __future__ import annotations

import hashlib
import shutil
import threading
from pathlib import Path

import torch

from .. import env

CPU_SOURCES = ("grouped_gemm_cpu.cpp",)
#: FP8 blockwise grouped GEMM variants (plugins/include/dwdp/grouped_gemm.h DWDP_FP8_VARIANTS; one .cu each).
FP8_VARIANTS = ("coop_128x128_c1x2", "coop_128x128_c1x1", "coop_128x128_c2x1", "coop_128x128_c2x2",
                "pp_64x128_c1x2", "pp_64x128_c2x1")
#: sources the glue reaches through weak symbols (each may be left out of a build, DWDP_OPS_EXCLUDE): the FP8 variants
#: and the BF16 2x1-cluster variant
OPTIONAL_SOURCES = ("grouped_gemm_bf16_coop_c2x1.cu", *(f"grouped_gemm_fp8_{v}.cu" for v in FP8_VARIANTS))
CUDA_SOURCES = ("grouped_gemm_cuda.cpp", "grouped_gemm_bf16_coop.cu", "grouped_gemm_bf16_pingpong.cu",
                *OPTIONAL_SOURCES)
CUDA_ARCH = "sm90a"
# torch adds the -D__CUDA_NO_*__ flags for extensions; CUTLASS's numeric types need the conversions back.
_CUDA_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
               "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
               "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_OPERATORS__"]

_lock = threading.Lock()
_loaded: dict[str, Path] = {}


class OpsBuildError(RuntimeError):
    """The ops cannot be built or loaded here; the message says why and what to install."""


def plugins_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "plugins"


def cutlass_include_dirs() -> list[Path]:
    """[include, tools/util/include] of CUTLASS: $CUTLASS_DIR (a CUTLASS checkout, its include/, or a folder holding
    include/ and tools/util/include) first, else the nvidia-cutlass wheel."""
    override = env.get(env.CUTLASS_DIR)
    if override:
        root = Path(override)
        cands = [root, root / "include", root.parent]
    else:
        try:
            import cutlass_library
        except ImportError as e:
            raise OpsBuildError("CUTLASS headers not found: pip install nvidia-cutlass (or set CUTLASS_DIR)") from e
        root = Path(cutlass_library.__file__).parent / "source"
        cands = [root]
    for c in cands:
        inc = c / "include" if (c / "include" / "cutlass").is_dir() else c
        if (inc / "cutlass" / "cutlass.h").is_file():
            util = [p for p in (inc.parent / "tools" / "util" / "include", inc) if (p / "cutlass" / "util").is_dir()]
            if not util:
                raise OpsBuildError(f"CUTLASS at {inc} lacks tools/util/include (cutlass/util/packed_stride.hpp)")
            return [inc, util[0]] if util[0] != inc else [inc]
    raise OpsBuildError(f"no cutlass/cutlass.h under {override or root} (set CUTLASS_DIR to a CUTLASS checkout)")


def excluded_sources() -> tuple[str, ...]:
    """CUDA sources left out of the build ($DWDP_OPS_EXCLUDE, comma-separated file names; only OPTIONAL_SOURCES may
    be left out: the glue reaches them through weak symbols, and the op falls back to kFp8FallbackVariant, or to the
    BF16 1x2-cluster variant)."""
    names = tuple(n.strip() for n in (env.get(env.DWDP_OPS_EXCLUDE) or "").split(",") if n.strip())
    bad = [n for n in names if n not in OPTIONAL_SOURCES]
    if bad:
        raise OpsBuildError(f"{env.DWDP_OPS_EXCLUDE}: {bad} are not optional variant sources of {OPTIONAL_SOURCES}")
    return names


def _source_files(cuda: bool) -> list[Path]:
    d = plugins_dir() / "csrc"
    skip = excluded_sources() if cuda else ()
    return [d / s for s in CPU_SOURCES + (CUDA_SOURCES if cuda else ()) if s not in skip]


def build_key(cuda: bool) -> str:
    """Hash of everything the library depends on: torch version, arch, plugin sources and headers, CUTLASS version."""
    h = hashlib.sha256()
    h.update(f"torch={torch.__version__};arch={CUDA_ARCH if cuda else 'cpu'};flags={_CUDA_FLAGS}".encode())
    if cuda and excluded_sources():  # a build without some variants is another library
        h.update(f"exclude={sorted(excluded_sources())}".encode())
    files = sorted(plugins_dir().rglob("*"))
    for f in files:
        if f.is_file() and f.suffix in (".h", ".cuh", ".cpp", ".cu"):
            h.update(str(f.relative_to(plugins_dir())).encode())
            h.update(f.read_bytes())
    if cuda:
        h.update((cutlass_include_dirs()[0] / "cutlass" / "version.h").read_bytes())
    return h.hexdigest()[:16]


def _check_toolchain(cuda: bool) -> None:
    from torch.utils import cpp_extension

    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        raise OpsBuildError("no C++ compiler (c++/g++/clang++) on PATH: install g++ to build the dwdp ops")
    if not (Path(cpp_extension.include_paths()[0]) / "torch" / "library.h").is_file():
        raise OpsBuildError(f"torch C++ headers missing under {cpp_extension.include_paths()[0]}")
    if cuda:
        if torch.version.cuda is None:
            raise OpsBuildError(f"torch {torch.__version__} is a CPU build: the CUDA ops need a CUDA build of torch")
        home = cpp_extension.CUDA_HOME
        if not home or not (Path(home) / "bin" / "nvcc").is_file():
            raise OpsBuildError(f"nvcc not found (CUDA_HOME={home!r}): install the CUDA toolkit to build the CUDA ops")


def build_plan(cuda: bool) -> tuple[str, Path, list[Path]]:
    """(library name, build directory, sources) of one flavour: where load() builds it and what it compiles (one object
    file per source, then the link). `dwdp build-ops` shows its progress from these."""
    name = "dwdp_ops_cuda" if cuda else "dwdp_ops_cpu"
    return name, env.cache_dir() / "ops" / f"{name}-{build_key(cuda)}", _source_files(cuda)


def is_built(cuda: bool) -> bool:
    """The library of this flavour is in the cache (its key hashes every input, so a library there is current)."""
    name, build_dir, _ = build_plan(cuda)
    return (build_dir / f"{name}.so").is_file()


def default_cuda() -> bool:
    return torch.cuda.is_available() and torch.version.cuda is not None


def load(cuda: bool | None = None, verbose: bool = False) -> Path:
    """Build (if not cached) and load the dwdp ops; returns the shared library path. Raises OpsBuildError.

    Only one flavour can live in a process (both register TORCH_LIBRARY(dwdp)); the CUDA build contains the CPU
    kernel too, so asking for CPU after CUDA is satisfied by it.
    """
    cuda = default_cuda() if cuda is None else cuda
    with _lock:
        if "cuda" in _loaded:
            return _loaded["cuda"]
        if "cpu" in _loaded:
            if not cuda:
                return _loaded["cpu"]
            raise OpsBuildError("the CPU-only dwdp ops are already loaded in this process; load(cuda=True) first")
        _check_toolchain(cuda)
        from torch.utils import cpp_extension

        name, build_dir, sources = build_plan(cuda)
        build_dir.mkdir(parents=True, exist_ok=True)
        includes = [str(plugins_dir() / "include"), str(plugins_dir() / "csrc")]
        if cuda:
            includes += [str(p) for p in cutlass_include_dirs()]
        path = build_dir / f"{name}.so"
        if path.is_file() and not (build_dir / "build.ninja").is_file():
            # a library placed here without its build tree (carried from another machine): the key hashes every
            # source, header, the torch version and the CUDA flags, so it is this build; load it as is
            torch.ops.load_library(str(path))
            _loaded["cuda" if cuda else "cpu"] = path
            return path
        try:
            cpp_extension.load(
                name=name, sources=[str(s) for s in sources], extra_cflags=["-O2"],
                extra_cuda_cflags=_CUDA_FLAGS if cuda else None, extra_include_paths=includes,
                build_directory=str(build_dir), verbose=verbose, with_cuda=cuda, is_python_module=False)
        except (RuntimeError, OSError, ImportError) as e:
            raise OpsBuildError(f"building {name} in {build_dir} failed: {e}") from e
        _loaded["cuda" if cuda else "cpu"] = path
        return path
