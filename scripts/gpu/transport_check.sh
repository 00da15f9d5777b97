#!/usr/bin/env bash
# Device check for issue #6 (one H200): CUDA transports (ipc, vmm_fd across processes sharing the GPU),
# copy-scheduler methods bit-exact, then scripts/bench_copy.py. Logs and results land in $OUT.
#   bash scripts/gpu/transport_check.sh            # OUT defaults to /tmp/dwdp_transport_check
set -uo pipefail
OUT=${OUT:-/tmp/dwdp_transport_check}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv \
  | tee "$OUT/gpu.txt"
python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda.bindings', cuda.bindings.__version__)" \
  | tee -a "$OUT/gpu.txt"
timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -rs -p no:cacheprovider \
  tests/gpu/test_transport_cuda.py tests/gpu/test_copy_scheduler_cuda.py 2>&1 | tee "$OUT/tests.log"
tests_rc=${PIPESTATUS[0]}
timeout "${BENCH_TIMEOUT:-150}" python3 scripts/bench_copy.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
echo "tests rc=$tests_rc bench rc=$bench_rc"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
