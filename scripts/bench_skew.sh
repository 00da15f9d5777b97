#!/usr/bin/env bash
# Routing skew on the GPU: `dwdp bench` with workload.routing_skew off, then at aiconfigurator's power-law shapes
# (power_law 1.01 and 1.2, the reference rows of its MoE tables), same model, tokens and seed; then one summary
# table: per MoE layer mean, busiest EP rank rows / mean, DEP's expert wait (a rank idle for the slowest rank's
# expert GEMM), DEP all-to-all, DWDP expert GEMM and prefetch wait, throughput DWDP/DEP.
#   usage: scripts/bench_skew.sh [config]      (default configs/bench/h200_r1_skew.yaml)
#   SKEW_POINTS="none:0 power_law:1.01 power_law:1.2" picks the runs; BENCH_TIMEOUT (s, per run, default 190);
#   DEVICE=cpu scripts/bench_skew.sh configs/bench/cpu_skew.yaml: a functional dry run on the CPU (CPU times are not results)
# Results under $OUT (default bench_out/bench_skew): skew.log, summary.txt and bench_skew.tar.gz (every run's files).
# gpu_check.sh users: `bash scripts/bench_skew.sh` as a step of its own (separate script, so the check stays G's).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/bench_out/bench_skew}"
cfg="${1:-configs/bench/h200_r1_skew.yaml}"
mkdir -p "$OUT/raw"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # multicast stays off
[ -d .carry/cutlass ] && export CUTLASS_DIR="$PWD/.carry/cutlass"
export DWDP_CACHE_DIR="${DWDP_CACHE_DIR:-/tmp/dwdp_cache}"
[ -d .carry/ops ] && mkdir -p "$DWDP_CACHE_DIR" && cp -r .carry/ops "$DWDP_CACHE_DIR/"
rc=0
{ git rev-parse --short HEAD 2>/dev/null || echo "commit unknown"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null; } | tee "$OUT/skew.log"
dirs=()
for p in ${SKEW_POINTS:-none:0 power_law:1.01 power_law:1.2}; do
  kind=${p%%:*}; alpha=${p#*:}
  d="$OUT/raw/skew_${kind}_${alpha}"
  echo "=== routing_skew kind=$kind alpha=$alpha ($(date +%T)) ===" | tee -a "$OUT/skew.log"
  set_alpha=(); [ "$kind" != none ] && set_alpha=(--set "workload.routing_skew.alpha=$alpha")
  timeout "${BENCH_TIMEOUT:-190}" python3 -m dwdp_trtllm.cli bench "$cfg" --device "${DEVICE:-cuda}" --out "$d" \
    --set "workload.routing_skew.kind=$kind" "${set_alpha[@]}" >> "$OUT/skew.log" 2>&1 || rc=1
  dirs+=("$d")
  tar -czf "$OUT/bench_skew.tar.gz" -C "$OUT" raw 2>/dev/null  # comes back even if a later run times out
done
python3 - "${dirs[@]}" <<'PY' | tee "$OUT/summary.txt"
import json, math, sys
from pathlib import Path
def g(d, path):
    for k in path.split("."):
        d = d.get(k) if isinstance(d, dict) else None
    return d
cols = [("busiest/mean rows", "dep.expert_load.rows_max_over_mean", 2),
        ("target", "dep.expert_load.target_max_over_mean", 2),
        ("DEP expert wait us/layer", "dep.expert_load.expert_wait_us", 0),
        ("DEP expert GEMM us/layer", "dep.expert_load.expert_gemm_us", 0),
        ("DEP all-to-all us/layer", "dep.layer_us.all_to_all", 0),
        ("DWDP expert GEMM us/layer", "dwdp.expert_load.expert_gemm_us", 0),
        ("DWDP prefetch wait us/layer", "dwdp.expert_load.prefetch_wait_us", 0),
        ("tokens/s/GPU DWDP/DEP", "ratio.tps_per_gpu", 3)]
print("| routing_skew | " + " | ".join(c[0] for c in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for d in sys.argv[1:]:
    f = Path(d) / "results.json"
    if not f.is_file():
        print(f"| {Path(d).name} | no results (see skew.log) |"); continue
    run = json.loads(f.read_text())["runs"][0]
    sk = run["config"]["workload"]["routing_skew"]
    name = "none" if sk["kind"] == "none" else f"{sk['kind']}_{sk['alpha']}"
    cells = []
    for _, path, digits in cols:
        v = g(run["metrics"], path)
        cells.append("-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}")
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
rm -rf "$OUT/raw"
echo "bench_skew: exit $rc"
exit $rc
