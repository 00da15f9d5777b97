#!/usr/bin/env bash
# Build DeepGEMM (deepseek-ai/DeepGEMM) from the git-ignored source bundle .carry/deepgemm on a CUDA machine, for
# scripts/bench_deepgemm.py and dwdp_trtllm/ops/deepgemm.py (docs/history/benchmarks-2026-12.md section 13).
#   usage: scripts/gpu/deepgemm_build.sh [DEST]   (default /tmp/deepgemm; then export DWDP_DEEPGEMM_DIR=DEST)
# The bundle: DeepGEMM's csrc/, deep_gemm/, setup.py, scripts/generate_pyi.py, LICENSE at 54e2261 and fmt's include/
# at 553ec11 under third-party/fmt (its submodule pins); CUTLASS/CuTe headers come from .carry/cutlass (4.2.0; the
# pin is 4.2.1, whose include/ differs only in sm100 epilogue files and version.h). Make it on a machine with the
# mirror: git --git-dir=<DeepGEMM mirror> archive 54e2261 csrc deep_gemm setup.py scripts/generate_pyi.py LICENSE |
# tar -x -C .carry/deepgemm; git --git-dir=<fmt mirror> archive 553ec11 include LICENSE | tar -x -C .carry/deepgemm/third-party/fmt.
# Builds deep_gemm._C (csrc/python_api.cpp, a torch extension linked with cudart + nvrtc) in place; the kernels are
# JIT-compiled with nvcc at their first call into DG_JIT_CACHE_DIR. A prebuilt _C (deep_gemm/_C*.so in the bundle,
# from an earlier build on the same image) is reused unless the bundle's deep_gemm/BUILT_WITH names another
# DEEPGEMM_BUILD (below); a _C without BUILT_WITH is reused whatever DEEPGEMM_BUILD asks (the script says so).
# gpu_check.sh's deepgemm_built.tgz carries BUILT_WITH beside _C. Exit 2 if the bundle or CUTLASS is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$PWD/.carry/deepgemm; dest=${1:-/tmp/deepgemm}
cut=${CUTLASS_DIR:-$PWD/.carry/cutlass}/include
[ -f "$src/csrc/python_api.cpp" ] || { echo "deepgemm_build: $src/csrc/python_api.cpp missing: DeepGEMM's sources go there (see this script's header)" >&2; exit 2; }
[ -d "$cut/cute" ] || { echo "deepgemm_build: CUTLASS headers missing at $cut (set CUTLASS_DIR)" >&2; exit 2; }
rm -rf "$dest"; mkdir -p "$dest"; cp -r "$src"/. "$dest"/
mkdir -p "$dest/third-party/cutlass"
ln -sfn "$cut" "$dest/third-party/cutlass/include"
ln -sfn "$cut/cute" "$dest/deep_gemm/include/cute"; ln -sfn "$cut/cutlass" "$dest/deep_gemm/include/cutlass"
# DEEPGEMM_BUILD=setup (default; the build measured in docs/history/benchmarks-2026-12.md section 13): DeepGEMM's own setup.py
# (plain setuptools build_ext); torch: the same extension (sources, include dirs, flags, libraries of its setup.py)
# through torch.utils.cpp_extension.load (torch's pybind11 ABI flags). A prebuilt _C of the other kind is dropped.
# Either one's _C segfaults in std::regex at its first JIT call on the H200 image unless libstdc++ is made global
# first: dwdp_trtllm/ops/deepgemm.py module() does that (python code importing deep_gemm directly must too).
how=${DEEPGEMM_BUILD:-setup}
if [ -f "$src/deep_gemm/BUILT_WITH" ] && [ "$(cat "$src/deep_gemm/BUILT_WITH")" != "$how" ]; then rm -f "$dest"/deep_gemm/_C*.so; fi
if ls "$dest"/deep_gemm/_C*.so >/dev/null 2>&1 && [ ! -f "$src/deep_gemm/BUILT_WITH" ]; then
  echo "deepgemm_build: reusing the bundle's prebuilt _C; it has no BUILT_WITH, so how it was built is not known (DEEPGEMM_BUILD=$how not checked)"
fi
if ! ls "$dest"/deep_gemm/_C*.so >/dev/null 2>&1; then
  echo "$how" > "$dest/deep_gemm/BUILT_WITH"
  if [ "$how" = setup ]; then
    (cd "$dest" && DG_USE_LOCAL_VERSION=0 MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build_ext --inplace)
  else
  (cd "$dest" && echo "deepgemm_build: building _C with torch.utils.cpp_extension.load" && python3 - <<'PY'
import shutil, torch
from torch.utils.cpp_extension import CUDA_HOME, load
cxx = ["-std=c++17", "-O3", "-fPIC", "-Wno-psabi", "-Wno-deprecated-declarations",
       f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"]
inc = [f"{CUDA_HOME}/include", f"{CUDA_HOME}/include/cccl", "deep_gemm/include", "third-party/cutlass/include",
       "third-party/fmt/include"]
import os; os.makedirs("build_C", exist_ok=True)
load(name="_C", sources=["csrc/python_api.cpp"], extra_include_paths=inc, extra_cflags=cxx, with_cuda=True,
     extra_ldflags=[f"-L{CUDA_HOME}/lib64", "-lcudart", "-lnvrtc"], build_directory="build_C", verbose=True)
shutil.copy("build_C/_C.so", "deep_gemm/_C.so")
PY
  )
  fi
fi
ls "$dest"/deep_gemm/_C*.so
(cd "$dest" && python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__version__, 'imported from', deep_gemm.__file__)")
