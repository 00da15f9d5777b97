#!/usr/bin/env bash
# Everything the GPU machine (device tool) runs in one call: build the ops, run the GPU tests, run the
# benchmarks; logs and results under $OUT (at most 8 files come back: per-section logs + one tarball).
#   usage: scripts/gpu_check.sh [sections...]
#     sections: env host_gpus build tune plugin transport engine profile attn trtllm fp8 grouped deepgemm moeop routedop verify calibrate calib floorsust bench (default: env plugin transport engine bench)
#   DWDP_BENCH_CONFIGS="a.yaml b.yaml" picks the bench configs, BENCH_ARGS="--floor" adds `dwdp bench` flags
# Carry `.carry` (CUTLASS headers copied from the nvidia-cutlass wheel to .carry/cutlass) with the call. `build`
# returns the built library as $OUT/ops_lib.tgz (ops/<key>/dwdp_ops_cuda.so); unpacked into .carry/ and carried,
# a later call loads it instead of compiling (ops/build.py: the key hashes every source, torch and the flags).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/bench_out/gpu_check}"
mkdir -p "$OUT/raw"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # multicast stays off
[ -d .carry/cutlass ] && export CUTLASS_DIR="$PWD/.carry/cutlass"
export DWDP_CACHE_DIR="${DWDP_CACHE_DIR:-/tmp/dwdp_cache}"
[ -d .carry/ops ] && mkdir -p "$DWDP_CACHE_DIR" && cp -r .carry/ops "$DWDP_CACHE_DIR/"
sections="${*:-env plugin transport engine bench}"
rc=0
section() { echo; echo "=== $1 ($(date +%T)) ==="; }
for s in $sections; do
  case $s in
    env)
      section env
      { nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,power.draw --format=csv
        python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'python', sys.version.split()[0])"
        git rev-parse --short HEAD 2>/dev/null || echo "commit unknown"; } 2>&1 | tee "$OUT/env.log"
      # the GPU tests skip without CUDA: a machine that shows none must not read as green
      python3 -c "import sys, torch; sys.exit(0 if torch.cuda.device_count() else 1)" \
        || { echo "gpu_check: torch sees no CUDA device" | tee -a "$OUT/env.log"; rc=1; } ;;
    host_gpus)  # the pre-flight's GPU memory per CUDA index (host_resources.gpu_memory, CUDA_VISIBLE_DEVICES
                # applied) against torch's view of the same devices; seconds. Results: $OUT/raw/host_gpus/result.jsonl
      section host_gpus; mkdir -p "$OUT/raw/host_gpus"
      last=$(( $(nvidia-smi -L | wc -l) - 1 )); uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | tail -n 1 | cut -c1-12)
      for vis in unset "$last" "$uuid" "-1"; do
        ( if [ "$vis" = unset ]; then unset CUDA_VISIBLE_DEVICES; else export CUDA_VISIBLE_DEVICES="$vis"; fi
          python3 -c "
import json, os, torch
from dwdp_trtllm.deploy.host_resources import gpu_memory
g = gpu_memory(); nv = list(g[1]) if g else None
t = [torch.cuda.mem_get_info(i)[1] for i in range(torch.cuda.device_count())]
ok = nv is not None and len(nv) == len(t) and all(abs(a - b) <= 0.02 * b for a, b in zip(nv, t))
print(json.dumps({'CUDA_VISIBLE_DEVICES': os.environ.get('CUDA_VISIBLE_DEVICES'), 'nvml_total': nv, 'torch_total': t, 'ok': ok}))
raise SystemExit(0 if ok else 1)" ) >> "$OUT/raw/host_gpus/result.jsonl" 2>&1 || rc=1
      done; cat "$OUT/raw/host_gpus/result.jsonl" ;;
    build)
      section build
      # an optional variant (FP8, or the BF16 2x1 cluster) that fails to compile is left out (DWDP_OPS_EXCLUDE,
      # exported to the later sections) and the build retried, so one variant cannot take the production op down
      for try in 1 2 3; do
        MAX_JOBS=${MAX_JOBS:-16} python3 -m dwdp_trtllm.cli build-ops --cuda >> "$OUT/build.log" 2>&1 && break
        failed=$(grep -oE "FAILED: [^ ]*grouped_gemm_(fp8_[a-z0-9_]+|bf16_coop_c2x1)\.cuda\.o" "$OUT/build.log" | grep -oE "grouped_gemm_(fp8_[a-z0-9_]+|bf16_coop_c2x1)" | sort -u | sed 's/$/.cu/' | paste -sd, -)
        [ -z "$failed" ] && { rc=1; break; }
        export DWDP_OPS_EXCLUDE="$failed"; echo "gpu_check: build failed; retrying without $failed" | tee -a "$OUT/build.log"
        [ $try = 3 ] && rc=1
      done; tail -n 5 "$OUT/build.log"
      (cd "$DWDP_CACHE_DIR" && tar -czf "$OUT/ops_lib.tgz" ops/*/dwdp_ops_cuda.so) 2>/dev/null ;;
    tune)  # every FP8 grouped GEMM variant + scheduler knobs vs torch (scripts/bench_fp8_grouped.py); it writes
           # the production dispatch header by measurement, the ops are rebuilt with it (the build's objects reused:
           # only the glue recompiles) and returned as ops_lib.tgz with the header; then the grouped GEMM GPU tests
      section tune
      hdr=plugins/csrc/grouped_gemm_fp8_dispatch.h; new_hdr="$OUT/raw/tune/grouped_gemm_fp8_dispatch.h"
      timeout "${TUNE_TIMEOUT:-300}" python3 scripts/bench_fp8_grouped.py --out "$OUT/raw/tune" --write-dispatch "$new_hdr" > "$OUT/tune.log" 2>&1 || rc=1
      if [ -s "$new_hdr" ] && ! cmp -s "$new_hdr" "$hdr"; then
        key() { python3 -c "from dwdp_trtllm.ops.build import build_key; print(build_key(True))"; }
        old=$(key); cp "$new_hdr" "$hdr"; new=$(key)
        mkdir -p "$DWDP_CACHE_DIR/ops/dwdp_ops_cuda-$new" && cp -a "$DWDP_CACHE_DIR/ops/dwdp_ops_cuda-$old/." "$DWDP_CACHE_DIR/ops/dwdp_ops_cuda-$new/"
        rm -f "$DWDP_CACHE_DIR/ops/dwdp_ops_cuda-$new/grouped_gemm_cuda.o" "$DWDP_CACHE_DIR/ops/dwdp_ops_cuda-$new/dwdp_ops_cuda.so"
        echo "gpu_check: dispatch changed; rebuilding $old -> $new" >> "$OUT/tune.log"
        MAX_JOBS=${MAX_JOBS:-16} python3 -m dwdp_trtllm.cli build-ops --cuda >> "$OUT/tune.log" 2>&1 || rc=1
        (cd "$DWDP_CACHE_DIR" && tar -czf "$OUT/ops_lib.tgz" "ops/dwdp_ops_cuda-$new/dwdp_ops_cuda.so") 2>/dev/null
      fi
      cp "$hdr" "$OUT/grouped_gemm_fp8_dispatch.h"
      timeout "${TUNE_TIMEOUT:-300}" python3 -m pytest -q -rs tests/gpu/test_grouped_gemm_cuda.py >> "$OUT/tune.log" 2>&1 || rc=1
      grep -E "^\| fc|Choice|Bit-identical|FAILED|passed|failed|Error|rebuilding" "$OUT/tune.log" | tail -n 40 ;;
    plugin)
      section plugin
      bash scripts/gpu/plugin_check.sh "$OUT/raw/plugin" > "$OUT/plugin.log" 2>&1 || rc=1; tail -n 25 "$OUT/plugin.log" ;;
    transport)
      section transport
      OUT="$OUT/raw/transport" bash scripts/gpu/transport_check.sh > "$OUT/transport.log" 2>&1 || rc=1
      tail -n 25 "$OUT/transport.log" ;;
    engine)
      section engine
      timeout "${ENGINE_TIMEOUT:-300}" python3 -m pytest -q -s -rs tests/gpu/test_fused_cuda.py tests/gpu/test_engine_cuda.py tests/gpu/test_dwdp_layer_graph.py tests/unit/test_launch_external.py > "$OUT/engine.log" 2>&1 || rc=1
      grep -E "max relative error|passed|failed|Error|FAILED" "$OUT/engine.log" | tail -n 20 ;;
    profile)  # where the engine's time goes: chunked-prefill iteration at 16K tokens, BF16 and FP8
      section profile
      for a in ${PROFILE_RUNS:-"--weight-dtype bf16 --gemm merge" "--weight-dtype fp8 --gemm multi_buffer"}; do
        timeout "${PROFILE_TIMEOUT:-240}" python3 scripts/profile_engine.py --out "$OUT/raw/profile" --isl 8192 --tokens 16384 --mix $a \
          2>&1 | grep -E "^\[|Self CUDA time" | tee -a "$OUT/profile.log" || rc=1
        tar -czf "$OUT/profile.tgz" -C "$OUT/raw" profile 2>/dev/null  # back even if a later step runs out of time
      done ;;
    attn)  # the engine's attention phase at 8K: GPU tests of a chunk over its cached prefix both
           # ways and of the FP8 o_proj input quantised per chunk, then the FP8 8K chunked-prefill profile with the
           # engine's choice (auto) and with the split way forced (the way before): attention phase ms, measured/floor
      section attn
      timeout "${ATTN_TIMEOUT:-150}" python3 -m pytest -q -rs tests/gpu/test_engine_cuda.py tests/gpu/test_fp8_linear_cuda.py \
        -k "prefix or either_way or quant or in_place" > "$OUT/attn.log" 2>&1 || rc=1
      for way in ${ATTN_WAYS:-auto split}; do  # each run also reports where the GPU idles (gaps_*.txt, trace_*.json.gz)
        timeout "${ATTN_TIMEOUT:-150}" python3 scripts/profile_engine.py --out "$OUT/raw/attn" --isl 8192 --tokens 16384 --mix \
          --weight-dtype fp8 --gemm multi_buffer --prefix-way $way 2>&1 | grep -E "^\[|Self CUDA time" >> "$OUT/attn.log" || rc=1
      done
      grep -E "passed|failed|FAILED|Error|phase ms|floor ms|wall ms|strides|host syncs|GPU in the|  phase " "$OUT/attn.log" | tail -n 30 ;;
    trtllm)  # the adapter's CUDA path (fake TensorRT-LLM modules, real transport) + host time per layer
      section trtllm
      DWDP_TRTLLM_GPU_RESULTS="$OUT/raw/trtllm" timeout "${TRTLLM_TIMEOUT:-300}" python3 -m pytest -q -rs tests/gpu/test_trtllm_adapter_cuda.py -k "not shutdown" > "$OUT/trtllm.log" 2>&1 || rc=1
      # executor shutdown frees the exported buffers after the DWDP group's barrier (3 worlds, ~1 min; shutdown_*.json)
      DWDP_TRTLLM_GPU_RESULTS="$OUT/raw/trtllm" timeout "${TRTLLM_SHUTDOWN_TIMEOUT:-150}" python3 -m pytest -q -rs tests/gpu/test_trtllm_adapter_cuda.py -k shutdown >> "$OUT/trtllm.log" 2>&1 || rc=1
      # CUDA graph capture refused by name around a DWDP layer; a peer killed while serving, per transport (vmm_fd, ipc)
      DWDP_TRTLLM_GPU_RESULTS="$OUT/raw/trtllm" timeout "${TRTLLM_TIMEOUT:-300}" python3 -m pytest -q -rs \
        tests/gpu/test_trtllm_capture_cuda.py tests/gpu/test_dead_peer_cuda.py >> "$OUT/trtllm.log" 2>&1 || rc=1
      timeout "${TRTLLM_TIMEOUT:-200}" python3 scripts/bench_trtllm_host_time.py --out "$OUT/raw/trtllm" >> "$OUT/trtllm.log" 2>&1 || rc=1
      grep -E "passed|failed|Error|host|ms" "$OUT/trtllm.log" | tail -n 25 ;;
    fp8)  # FP8 block-scale linear layers: GPU tests (kernel vs the recipe's reference, model vs its
          # dequantised reference, the quantiser), then the kernel choice on DeepSeek-R1 shapes (FP8_BENCH_ARGS, e.g. --no-plugin)
      section fp8
      timeout "${FP8_TIMEOUT:-300}" python3 -m pytest -q -s -rs tests/gpu/test_fp8_linear_cuda.py tests/gpu/test_fused_cuda.py \
        -k "quant or kernel or swiglu or model" > "$OUT/fp8.log" 2>&1 || rc=1
      timeout "${FP8_TIMEOUT:-300}" python3 scripts/bench_fp8_linear.py --out "$OUT/raw/fp8_linear" ${FP8_BENCH_ARGS:-} >> "$OUT/fp8.log" 2>&1 || rc=1
      grep -E "rel error|passed|failed|Error|FAILED|set, T=|^\| (q_b|o|dense_gate_up|kv_a) " "$OUT/fp8.log" | tail -n 40 ;;
    grouped)  # the FP8 grouped GEMM (the op's production dispatch and the variants) against torch._scaled_grouped_mm
      section grouped
      timeout "${GROUPED_TIMEOUT:-300}" python3 scripts/bench_fp8_grouped.py --no-knobs --out "$OUT/raw/grouped" > "$OUT/grouped.log" 2>&1 || rc=1
      tail -n 20 "$OUT/grouped.log" ;;
    deepgemm)  # DeepGEMM's FP8 grouped GEMM vs ours (docs/history/benchmarks-2026-12.md section 13): build DeepGEMM from the
               # .carry/deepgemm bundle (scripts/gpu/deepgemm_build.sh), time both on the same inputs
               # (scripts/bench_deepgemm.py), its GPU tests; returns deepgemm_built.tgz (the built _C + the JIT cache:
               # unpacked into .carry/deepgemm/deep_gemm and .carry/deepgemm_jit, a later call compiles nothing)
      section deepgemm; mkdir -p "$OUT/raw/deepgemm"
      export DWDP_DEEPGEMM_DIR=/tmp/deepgemm DG_JIT_CACHE_DIR=/tmp/deepgemm_jit DG_PRINT_CONFIGS=${DG_PRINT_CONFIGS:-1}
      mkdir -p "$DG_JIT_CACHE_DIR"; [ -d .carry/deepgemm_jit ] && cp -r .carry/deepgemm_jit/. "$DG_JIT_CACHE_DIR/"
      if timeout "${DEEPGEMM_BUILD_TIMEOUT:-400}" bash scripts/gpu/deepgemm_build.sh "$DWDP_DEEPGEMM_DIR" > "$OUT/deepgemm.log" 2>&1; then
        pids=""  # DeepGEMM's JIT compiles one kernel per configuration at first call: all of them at once, one process each
        for pair in fc1:idx fc1:psum fc2:idx fc2:psum; do
          timeout "${DEEPGEMM_TIMEOUT:-420}" python3 scripts/bench_deepgemm.py --prewarm $pair ${DEEPGEMM_ARGS:-} >> "$OUT/deepgemm.log" 2>&1 & pids="$pids $!"
        done
        for p in $pids; do wait $p || echo "gpu_check: a DeepGEMM prewarm failed (the bench compiles what is missing)" >> "$OUT/deepgemm.log"; done
        built() { tar -czf "$OUT/deepgemm_built.tgz" -C / "${DWDP_DEEPGEMM_DIR#/}/deep_gemm/$(cd "$DWDP_DEEPGEMM_DIR/deep_gemm" && ls _C*.so | head -n 1)" "${DWDP_DEEPGEMM_DIR#/}/deep_gemm/BUILT_WITH" "${DG_JIT_CACHE_DIR#/}" 2>/dev/null; }
        timeout "${DEEPGEMM_TIMEOUT:-420}" python3 scripts/bench_deepgemm.py --out "$OUT/raw/deepgemm" ${DEEPGEMM_ARGS:-} >> "$OUT/deepgemm.log" 2>&1 || rc=1
        built  # again after the tests, which compile their own shapes: what is there comes back even if time runs out
        timeout "${DEEPGEMM_TEST_TIMEOUT:-200}" python3 -m pytest -q -rs tests/gpu/test_deepgemm_cuda.py >> "$OUT/deepgemm.log" 2>&1 || rc=1
        built
      else
        rc=1; echo "gpu_check: DeepGEMM did not build" >> "$OUT/deepgemm.log"
      fi
      grep -vE "^(\[|  )" "$OUT/deepgemm.log" | grep -E "^fc|^\| fc|deep_gemm|passed|failed|FAILED|rror|did not build" | tail -n 40 ;;
    moeop)  # our whole routed-expert op (multi_buffer unit, one [E, ...] buffer, and gemm: deepgemm on that
            # buffer when DeepGEMM is there) at 4K/8K/16K tokens, uniform + power-law routing, 3 interleaved rounds,
            # beside TensorRT-LLM's fp8_block MoE table (the adapter's FP8 default). DeepGEMM set up as the deepgemm
            # section does (its /tmp tree if that section ran, else deepgemm_build.sh reusing the carried _C;
            # .carry/deepgemm_jit); kernels not in the cache are compiled first, one process per GEMM and token count
            # (seconds in the log, and the op's first call per point in the JSON); returns deepgemm_built.tgz (~2-3 min)
      section moeop; mkdir -p "$OUT/raw/moeop"; : > "$OUT/moeop.log"
      export DWDP_DEEPGEMM_DIR=/tmp/deepgemm DG_JIT_CACHE_DIR=/tmp/deepgemm_jit DG_PRINT_CONFIGS=${DG_PRINT_CONFIGS:-1}
      mkdir -p "$DG_JIT_CACHE_DIR"; [ -d .carry/deepgemm_jit ] && cp -r .carry/deepgemm_jit/. "$DG_JIT_CACHE_DIR/"
      dg=off
      if ls "$DWDP_DEEPGEMM_DIR"/deep_gemm/_C*.so >/dev/null 2>&1 \
         || timeout "${DEEPGEMM_BUILD_TIMEOUT:-120}" bash scripts/gpu/deepgemm_build.sh "$DWDP_DEEPGEMM_DIR" >> "$OUT/moeop.log" 2>&1; then
        dg=auto; t0=$(date +%s); pids=""
        for gemm in fc1 fc2; do for T in 4096 8192 16384; do
          timeout "${MOEOP_PREWARM_TIMEOUT:-120}" python3 scripts/bench_moe_op_vs_trtllm.py --prewarm-deepgemm $gemm --tokens $T >> "$OUT/moeop.log" 2>&1 & pids="$pids $!"
        done; done
        for p in $pids; do wait $p || echo "gpu_check: a DeepGEMM prewarm failed (the bench compiles what is missing)" >> "$OUT/moeop.log"; done
        echo "gpu_check: DeepGEMM prewarm took $(( $(date +%s) - t0 )) s" >> "$OUT/moeop.log"
      else
        echo "gpu_check: DeepGEMM did not build: moeop runs without the deepgemm path" >> "$OUT/moeop.log"
      fi
      timeout "${MOEOP_TIMEOUT:-240}" python3 scripts/bench_moe_op_vs_trtllm.py --out "$OUT/raw/moeop" --rounds 3 --deepgemm $dg >> "$OUT/moeop.log" 2>&1 || rc=1
      [ $dg = auto ] && tar -czf "$OUT/deepgemm_built.tgz" -C / "${DWDP_DEEPGEMM_DIR#/}/deep_gemm/$(cd "$DWDP_DEEPGEMM_DIR/deep_gemm" && ls _C*.so | head -n 1)" "${DWDP_DEEPGEMM_DIR#/}/deep_gemm/BUILT_WITH" "${DG_JIT_CACHE_DIR#/}" 2>/dev/null
      grep -E "^paths|prewarm|did not build|rror" "$OUT/moeop.log" | tail -n 12; tail -n 34 "$OUT/moeop.log" ;;
    routedop)  # the routed-expert op a DWDP rank runs (DeepGEMM's mainloop over [local | slot], one call per buffer)
               # beside its GEMMs alone and the op before (CUTLASS): builds the CUDA ops and DeepGEMM side by side
               # unless carried (.carry/ops, .carry/deepgemm with _C), JIT-compiles DeepGEMM's kernels for every
               # point in parallel processes, runs the op's GPU tests, then scripts/bench_routed_op.py
               # (ROUTEDOP_ARGS); returns ops_lib.tgz and deepgemm_built.tgz (with the JIT cache) to carry next time
      section routedop; mkdir -p "$OUT/raw/routedop"; : > "$OUT/routedop.log"
      # DeepGEMM as the product builds it: `dwdp build-ops --deepgemm` from the pinned source (.carry/deepgemm, a
      # DeepGEMM tree at ops/deepgemm_build.PIN_DEEPGEMM with third-party/fmt) into $DWDP_CACHE_DIR/deepgemm/<pin>,
      # where ops/deepgemm.module() finds it (no DWDP_DEEPGEMM_DIR); a carried build (.carry/deepgemm_cache) is reused
      unset DWDP_DEEPGEMM_DIR; export DG_JIT_CACHE_DIR=/tmp/deepgemm_jit
      mkdir -p "$DG_JIT_CACHE_DIR" "$DWDP_CACHE_DIR"; [ -d .carry/deepgemm_jit ] && cp -r .carry/deepgemm_jit/. "$DG_JIT_CACHE_DIR/"
      [ -d .carry/deepgemm_cache ] && cp -a .carry/deepgemm_cache/. "$DWDP_CACHE_DIR/deepgemm/"
      t0=$(date +%s)
      (MAX_JOBS=${MAX_JOBS:-12} python3 -m dwdp_trtllm.cli build-ops --cuda > "$OUT/raw/routedop/build_ops.log" 2>&1; echo "build-ops exit $?" >> "$OUT/raw/routedop/build_ops.log") & bpid=$!
      timeout "${DEEPGEMM_BUILD_TIMEOUT:-400}" python3 -c "
import sys; from pathlib import Path
from dwdp_trtllm.ops import build, deepgemm_build as dgb
print(dgb.build(Path('.carry/deepgemm'), build.cutlass_include_dirs()[0], jobs=4))" >> "$OUT/routedop.log" 2>&1 \
        || { rc=1; echo "gpu_check: DeepGEMM did not build" >> "$OUT/routedop.log"; }
      wait $bpid; tail -n 3 "$OUT/raw/routedop/build_ops.log" >> "$OUT/routedop.log"
      python3 -m dwdp_trtllm.cli build-ops --cuda --deepgemm --deepgemm-src .carry/deepgemm >> "$OUT/routedop.log" 2>&1 || rc=1
      (cd "$DWDP_CACHE_DIR" && tar -czf "$OUT/ops_lib.tgz" ops/*/dwdp_ops_cuda.so) 2>/dev/null
      echo "gpu_check: builds took $(( $(date +%s) - t0 )) s" >> "$OUT/routedop.log"
      # one process per point, as many at once as the GPU's free memory holds (~30 GB each: two copies of R1's FP8 experts)
      t0=$(date +%s); par=$(( $(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -n 1) / 30000 ))
      [ "$par" -lt 1 ] && par=1; echo "gpu_check: prewarm $par at a time" >> "$OUT/routedop.log"
      for T in ${ROUTEDOP_PREWARM_TOKENS:-4096 8192 16384 32768}; do for r in uniform power_law; do
        while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n || echo "gpu_check: a prewarm failed" >> "$OUT/routedop.log"; done
        timeout "${ROUTEDOP_PREWARM_TIMEOUT:-300}" python3 scripts/bench_routed_op.py --out /tmp/prewarm_$T$r --tokens $T --routings $r \
          --variants op_dg,op_one,gemm_dg --rounds 1 --warmup-ms 1 --rep-ms 1 > /tmp/prewarm_$T$r.log 2>&1 &
      done; done
      while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || echo "gpu_check: a prewarm failed" >> "$OUT/routedop.log"; done
      cat /tmp/prewarm_*.log | grep -E "rror|Traceback" | head -n 20 >> "$OUT/routedop.log"
      echo "gpu_check: DeepGEMM prewarm took $(( $(date +%s) - t0 )) s" >> "$OUT/routedop.log"
      built() { tar -czf "$OUT/deepgemm_built.tgz" --exclude='*.o' -C / "${DWDP_CACHE_DIR#/}/deepgemm" "${DG_JIT_CACHE_DIR#/}" 2>/dev/null; }
      built
      timeout "${ROUTEDOP_TIMEOUT:-400}" python3 scripts/bench_routed_op.py --out "$OUT/raw/routedop" ${ROUTEDOP_ARGS:-} >> "$OUT/routedop.log" 2>&1 || rc=1
      cp "$OUT/raw/routedop/routed_op.json" "$OUT/routed_op.json" 2>/dev/null
      built
      timeout "${ROUTEDOP_TEST_TIMEOUT:-300}" python3 -m pytest -q -s -rs tests/gpu/test_deepgemm_cuda.py > "$OUT/raw/routedop/tests.log" 2>&1 || rc=1
      grep -E "T=|passed|failed|FAILED|Error" "$OUT/raw/routedop/tests.log" | tail -n 30 >> "$OUT/routedop.log"
      cp "$OUT/raw/routedop/tests.log" "$OUT/routedop_tests.log"
      built
      tail -n 60 "$OUT/routedop.log" ;;
    verify)  # dwdp verify on the GPU (tests, then a DeepSeek-R1-shaped FP8 model)
      section verify
      timeout "${VERIFY_TIMEOUT:-300}" python3 -m pytest -q -rs tests/gpu/test_verify_cuda.py > "$OUT/verify.log" 2>&1 || rc=1
      timeout "${VERIFY_TIMEOUT:-400}" python3 -m dwdp_trtllm.cli verify configs/verify/h200_dsr1_fp8.yaml --device cuda >> "$OUT/verify.log" 2>&1 || rc=1
      tail -n 14 "$OUT/verify.log" ;;
    calibrate)  # `dwdp calibrate` on this node (its one-GPU parts; peer inputs stay priors; the file names the GPU inside) + its GPU tests + the
                # sizing simulator against a Poisson bench on this GPU; the file under $OUT/raw/calibrate
      section calibrate
      mkdir -p "$OUT/raw/calibrate"
      timeout "${CALIBRATE_TIMEOUT:-400}" python3 -m dwdp_trtllm.cli calibrate --device cuda --out "$OUT/raw/calibrate/calibrate.json" \
        > "$OUT/calibrate.log" 2>&1 || rc=1
      timeout "${CALIBRATE_TEST_TIMEOUT:-300}" python3 -m pytest -q -rs tests/gpu/test_calibrate_cuda.py tests/gpu/test_sizing_bench_cuda.py \
        >> "$OUT/calibrate.log" 2>&1 || rc=1
      grep -E "passed|failed|rror|\[[0-9]/|wrote" "$OUT/calibrate.log" | tail -n 30 ;;
    calib)  # the planner's engine calibration (one `dwdp bench --floor` campaign, FP8 linear layers on for
            # FP8 experts): exactly perf_check.sh's points b2 b8 b32 f2 f8 f32, one rank each; results under $OUT/raw/calib
            # (raw.tar.gz: raw/<point>/results.json); adopt with scripts/dev/adopt_floor_campaign.py (docs/PLANNER.md section 5)
      section calib
      OUT="$OUT/raw/calib" BENCH_TIMEOUT="${CALIB_TIMEOUT:-120}" bash scripts/gpu/perf_check.sh f8 b8 f2 b2 f32 b32 \
        > "$OUT/calib.log" 2>&1 || rc=1
      grep -E "^===|^│ (attention|experts|other|iteration) |wrote|rror" "$OUT/calib.log" | tail -n 50 ;;
    floorsust)  # calib's FP8 R1 points (one rank, DeepSeek-R1 width, FP8 experts on multi_buffer, FP8
                # linears) with `--floor --floor-sustained`: the burst floor, the floor under sustained load and the engine in
                # one run, with the SM clock / power of each; $OUT/raw/floorsust/<point>/results.json + summary.jsonl (~2 min)
      section floorsust; mkdir -p "$OUT/raw/floorsust"
      timeout 120 python3 -m pytest -q -s -rs tests/gpu/test_floor_sustained_cuda.py > "$OUT/floorsust.log" 2>&1 || rc=1
      for pt in ${FLOORSUST_POINTS:-f8 f2}; do
        case $pt in f2) p=(--set workload.isl=2048 --set workload.tokens_per_rank=81920) ;; f8) p=(--set workload.isl=8192 --set workload.tokens_per_rank=81920) ;;
          f32) p=(--set workload.isl=32768 --set workload.max_num_tokens=32768 --set workload.tokens_per_rank=163840) ;; *) echo "floorsust: unknown point $pt"; rc=2; continue ;; esac
        timeout "${FLOORSUST_TIMEOUT:-120}" python3 -m dwdp_trtllm.cli bench configs/bench/h200_smoke.yaml --device cuda --floor --floor-sustained \
          --no-plots --out "$OUT/raw/floorsust/$pt" --set run.ranks=1 --set dwdp.dwdp_size=1 --set workload.imbalance_cv=0 --set 'run.modes=[dep]' \
          --set dwdp.weight_dtype=fp8 --set dwdp.gemm=multi_buffer "${p[@]}" >> "$OUT/floorsust.log" 2>&1 || rc=1
        python3 -m dwdp_trtllm.bench.floor_sustained "$OUT/raw/floorsust/$pt/results.json" >> "$OUT/raw/floorsust/summary.jsonl" 2>> "$OUT/floorsust.log" || rc=1
      done
      grep -E "passed|failed|sampler:|burst |GPU during|^│ (attention|experts|other|iteration|SM clock|power) |rror" "$OUT/floorsust.log" | tail -n 40
      cat "$OUT/raw/floorsust/summary.jsonl" ;;
    bench)
      section bench
      for cfg in ${DWDP_BENCH_CONFIGS:-configs/bench/h200_smoke.yaml}; do
        name=$(basename "$cfg" .yaml)
        timeout "${BENCH_TIMEOUT:-400}" python3 -m dwdp_trtllm.cli bench "$cfg" --device cuda --out "$OUT/raw/bench_$name" ${BENCH_ARGS:-} \
          >> "$OUT/bench.log" 2>&1 || rc=1
        tar -czf "$OUT/bench_$name.tar.gz" -C "$OUT/raw" "bench_$name" 2>/dev/null  # comes back even if a later step times out
      done
      tail -n 60 "$OUT/bench.log" ;;
    *) echo "unknown section $s"; rc=2 ;;
  esac
done
tar -czf "$OUT/raw.tar.gz" -C "$OUT" raw 2>/dev/null && rm -rf "$OUT/raw"
echo "gpu_check: exit $rc"
exit $rc
