#!/usr/bin/env bash
# GPU section for the dwdp ops (called by scripts/gpu_check.sh): build the CUDA ops, run their GPU tests, then the
# grouped-GEMM benchmark. Usage: scripts/gpu/plugin_check.sh [OUT_DIR]   (CUTLASS_DIR may point at carried headers)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-${OUT:-bench_out}}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rc=0
t0=$(date +%s)
# the build goes through the library call (not the `dwdp` CLI) so other subcommands cannot break this check
python3 -c "from dwdp_trtllm.ops.build import load; print('dwdp ops:', load(cuda=True, verbose=True))" 2>&1 \
  | tail -n 60 | tee "$OUT/plugin_build.log" || rc=1
echo "plugin_check: build took $(( $(date +%s) - t0 )) s"
python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_grouped_gemm_cuda.py tests/gpu/test_composite_view.py \
  2>&1 | tee "$OUT/plugin_tests.log" | tail -n 40 || rc=1
python3 scripts/bench_grouped_gemm.py --out "$OUT" "${@:2}" 2>&1 | tee "$OUT/plugin_bench.log" || rc=1
exit $rc
