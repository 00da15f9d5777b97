#!/usr/bin/env bash
# Engine speed on one H200: fused-kernel tests, a profile of one forward, and `dwdp bench --floor`
# points (one rank: no communication, no sharing) at ISL 2K / 8K / 32K, BF16 and FP8 experts.
#   usage: OUT=dir scripts/gpu/perf_check.sh [steps...]   steps: test kernels profile b8 b2 b32 f8 f2 f32 f8o f2o f32o smoke smoke8 smoke8o
#   f* run FP8 experts with FP8 linear layers (model.fp8_linear null = on with fp8 weights); f*o the same point with the
#   linear layers at BF16 (model.fp8_linear=false: the engine before its FP8 linear layers)
#   (default: all but kernels and smoke; kernels: scripts/bench_moe_kernels.py, the MoE layer's non-GEMM kernels)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/bench_out/perf_check}"; mkdir -p "$OUT/raw"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 DWDP_CACHE_DIR="${DWDP_CACHE_DIR:-/tmp/dwdp_cache}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d .carry/cutlass ] && export CUTLASS_DIR="$PWD/.carry/cutlass"
one=(--set run.ranks=1 --set dwdp.dwdp_size=1 --set workload.imbalance_cv=0 --set dwdp.gemm=merge --set 'run.modes=[dep]')
bench() {  # name, extra args...
  local name=$1; shift
  timeout "${BENCH_TIMEOUT:-300}" python3 -m dwdp_trtllm.cli bench configs/bench/h200_smoke.yaml --device cuda --floor --no-plots \
    --out "$OUT/raw/$name" "${one[@]}" "$@" 2>&1 | tail -n 22 | tee -a "$OUT/bench.log"
}
rc=0
for s in ${*:-test profile b8 f8 b2 b32 f2 f32}; do
  echo "=== $s ($(date +%T)) ===" | tee -a "$OUT/bench.log"
  case $s in
    test) timeout 300 python3 -m pytest -q -x -rs tests/gpu/test_fused_cuda.py 2>&1 | tail -n 15 | tee "$OUT/test.log" ;;
    kernels) timeout 200 python3 scripts/bench_moe_kernels.py --out "$OUT/raw/kernels" 2>&1 | tail -n 16 | tee -a "$OUT/bench.log" ;;
    profile) timeout 200 python3 scripts/profile_engine.py --out "$OUT" --isl 8192 --tokens 16384 2>&1 | grep -E "^\[|Self CUDA time" ;;
    b8) bench b8 --set workload.isl=8192 --set workload.tokens_per_rank=81920 --set 'run.modes=[dep,dwdp]' ;;
    b2) bench b2 --set workload.isl=2048 --set workload.tokens_per_rank=81920 ;;
    b32) bench b32 --set workload.isl=32768 --set workload.max_num_tokens=32768 --set workload.tokens_per_rank=163840 ;;
    f8) bench f8 --set workload.isl=8192 --set workload.tokens_per_rank=81920 --set dwdp.weight_dtype=fp8 --set dwdp.gemm=multi_buffer ;;
    f2) bench f2 --set workload.isl=2048 --set workload.tokens_per_rank=81920 --set dwdp.weight_dtype=fp8 --set dwdp.gemm=multi_buffer ;;
    f32) bench f32 --set workload.isl=32768 --set workload.max_num_tokens=32768 --set workload.tokens_per_rank=163840 --set dwdp.weight_dtype=fp8 --set dwdp.gemm=multi_buffer ;;
    f8o) bench f8o --set workload.isl=8192 --set workload.tokens_per_rank=81920 --set dwdp.weight_dtype=fp8 --set dwdp.gemm=multi_buffer --set model.fp8_linear=false ;;
    f2o) bench f2o --set workload.isl=2048 --set workload.tokens_per_rank=81920 --set dwdp.weight_dtype=fp8 --set dwdp.gemm=multi_buffer --set model.fp8_linear=false ;;
    f32o) bench f32o --set workload.isl=32768 --set workload.max_num_tokens=32768 --set workload.tokens_per_rank=163840 --set dwdp.weight_dtype=fp8 --set dwdp.gemm=multi_buffer --set model.fp8_linear=false ;;
    smoke8|smoke8o)  # section 3's point (2 ranks sharing the GPU, DEP and DWDP) with FP8 experts, FP8 linears on / off
      lin=(); [ "$s" = smoke8o ] && lin=(--set model.fp8_linear=false)
      timeout "${BENCH_TIMEOUT:-300}" python3 -m dwdp_trtllm.cli bench configs/bench/h200_smoke.yaml --device cuda --floor --no-plots \
        --out "$OUT/raw/$s" --set dwdp.weight_dtype=fp8 "${lin[@]}" 2>&1 | tail -n 60 | tee -a "$OUT/bench.log" ;;
    smoke) timeout "${BENCH_TIMEOUT:-300}" python3 -m dwdp_trtllm.cli bench configs/bench/h200_smoke.yaml --device cuda --floor \
             --out "$OUT/raw/smoke" 2>&1 | tail -n 60 | tee -a "$OUT/bench.log" ;;
    *) echo "unknown step $s"; rc=2 ;;
  esac
  tar -czf "$OUT/raw.tar.gz" -C "$OUT" raw 2>/dev/null  # after every step: a later timeout loses nothing
done
rm -rf "$OUT/raw"
exit $rc
