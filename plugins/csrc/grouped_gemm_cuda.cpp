// CUDA implementation of dwdp::grouped_gemm: torch glue around the raw-pointer CUTLASS sm90 kernels
// (plugins/include/dwdp/grouped_gemm.h). Legend and contract: see grouped_gemm_cpu.cpp.
//
// Stream: everything is enqueued on the current torch CUDA stream; no host sync, no .item().
// Memory: output and workspace come from the torch caching allocator (graph-capture safe).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "dwdp/grouped_gemm.h"
#include "dwdp_ops_common.h"
#include "grouped_gemm_fp8_dispatch.h"

namespace dwdp {

// The FP8 variants' entry points are weak references: a variant whose .cu was left out of the build (ops/build.py
// DWDP_OPS_EXCLUDE, used when one fails to compile) is a null pointer here instead of a link error.
#define DWDP_WEAK_FP8_VARIANT(tag)                                                                         \
  __attribute__((weak)) size_t grouped_gemm_fp8_##tag##_workspace(const GroupedGemmParams& p);                   \
  __attribute__((weak)) const char* grouped_gemm_fp8_##tag(const GroupedGemmParams& p, void* workspace,         \
                                                           size_t workspace_bytes, cudaStream_t stream);
DWDP_FP8_VARIANTS(DWDP_WEAK_FP8_VARIANT)
__attribute__((weak)) size_t grouped_gemm_bf16_coop_c2x1_workspace(const GroupedGemmParams& p);
__attribute__((weak)) const char* grouped_gemm_bf16_coop_c2x1(const GroupedGemmParams& p, void* workspace,
                                                              size_t workspace_bytes, cudaStream_t stream);

// BF16: from this many rows per expert (on average) the 2x1-cluster variant runs (an expert's weight tile read once for
// two row tiles). Measured on an H100 (docs/BENCHMARKS.md, "Routed-expert op"), R1 shapes, fc1 + fc2: 9.08 / 13.68 /
// 22.08 ms against the 1x2 cluster's 10.45 / 16.44 / 29.72 at 128 / 256 / 512 rows per expert; ping-pong below.
constexpr int64_t kBf16ClusterMRowsPerExpert = 96;

namespace {

int sm_count(int device) {
  static int counts[64] = {};
  if (device < 0 || device >= 64) return 0;
  if (counts[device] == 0) {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    counts[device] = n;
  }
  return counts[device];
}

using WsFn = size_t (*)(const GroupedGemmParams&);
using RunFn = const char* (*)(const GroupedGemmParams&, void*, size_t, cudaStream_t);


struct Fp8Variant {
  const char* name;
  WsFn ws;
  RunFn run;
  bool built() const { return ws != nullptr && run != nullptr; }
};
#define DWDP_FP8_VARIANT_ENTRY(tag) Fp8Variant{#tag, &grouped_gemm_fp8_##tag##_workspace, &grouped_gemm_fp8_##tag},
const Fp8Variant kFp8Variants[] = {DWDP_FP8_VARIANTS(DWDP_FP8_VARIANT_ENTRY)};

const Fp8Variant* find_fp8_variant(const std::string& name) {
  for (const auto& v : kFp8Variants)
    if (name == v.name) return &v;
  return nullptr;
}

// BF16 variants (one .cu each); coop_c2x1 may be left out of a build (weak), the others are always there.
const Fp8Variant kBf16Variants[] = {
    Fp8Variant{"coop", &grouped_gemm_bf16_coop_workspace, &grouped_gemm_bf16_coop},
    Fp8Variant{"coop_c2x1", &grouped_gemm_bf16_coop_c2x1_workspace, &grouped_gemm_bf16_coop_c2x1},
    Fp8Variant{"pingpong", &grouped_gemm_bf16_pingpong_workspace, &grouped_gemm_bf16_pingpong}};
using Bf16Variant = Fp8Variant;

const Bf16Variant* find_bf16_variant(const std::string& name) {
  for (const auto& v : kBf16Variants)
    if (name == v.name) return &v;
  return nullptr;
}
const char* bf16_default_variant(int64_t T, int64_t E);

// The kernels' raw-pointer arguments (checked_output ran first).
GroupedGemmParams make_params(const at::Tensor& a, const at::Tensor& offs, at::TensorList weights,
                              const at::Tensor& bidx, const at::Tensor& row, const std::optional<at::Tensor>& a_scale,
                              std::optional<at::TensorList> weight_scales, const at::Tensor& out) {
  const bool fp8 = a.scalar_type() == at::kFloat8_e4m3fn;
  GroupedGemmParams p;
  p.a = a.data_ptr();
  p.offs = offs.data_ptr<int32_t>();
  p.bidx = bidx.data_ptr<int32_t>();
  p.row = row.data_ptr<int32_t>();
  p.num_buffers = int(weights.size());
  for (int i = 0; i < p.num_buffers; ++i) {
    p.buffers[i] = weights[i].data_ptr();
    p.buffer_rows[i] = weights[i].size(0);
    if (fp8) p.buffer_scales[i] = (*weight_scales)[i].data_ptr<float>();
  }
  if (fp8) p.a_scale = a_scale->data_ptr<float>();
  p.out = out.data_ptr();
  p.T = a.size(0);
  p.N = weights[0].size(1);
  p.K = a.size(1);
  p.E = int(offs.size(0));
  p.device = a.device().index();
  p.sm_count = sm_count(p.device);
  return p;
}

// Argument checks shared by the op and its tuning twin; returns the [T, N] bf16 output.
at::Tensor checked_output(const at::Tensor& a, const at::Tensor& offs, at::TensorList weights,
                          const at::Tensor& bidx, const at::Tensor& row, const std::optional<at::Tensor>& a_scale,
                          std::optional<at::TensorList> weight_scales) {
  check_grouped_gemm_args(a, offs, weights, bidx, row, a_scale, weight_scales);
  const bool fp8 = a.scalar_type() == at::kFloat8_e4m3fn;
  TORCH_CHECK(fp8 || a.scalar_type() == at::kBFloat16, "dwdp::grouped_gemm (CUDA): a must be bfloat16 or ",
              "float8_e4m3fn, got ", a.scalar_type());
  TORCH_CHECK((int64_t)weights.size() <= kMaxBuffers, "dwdp::grouped_gemm (CUDA): at most ", kMaxBuffers,
              " weight buffers, got ", weights.size());
  const int64_t T = a.size(0), K = a.size(1), N = weights[0].size(1), E = offs.size(0);
  const int64_t align = fp8 ? 128 : 8;
  TORCH_CHECK(K % align == 0 && N % align == 0, "dwdp::grouped_gemm (CUDA): K=", K, " and N=", N,
              " must be multiples of ", align, " for ", a.scalar_type());
  TORCH_CHECK(T < (int64_t(1) << 31) && E < (int64_t(1) << 31), "dwdp::grouped_gemm (CUDA): T and E must fit int32");
  return at::empty({T, N}, a.options().dtype(at::kBFloat16));
}

void enqueue(GroupedGemmParams& p, WsFn ws_fn, RunFn run_fn, const at::Tensor& a) {
  const size_t bytes = ws_fn(p);
  auto ws = at::empty({int64_t(bytes)}, a.options().dtype(at::kByte));
  const char* err = run_fn(p, ws.data_ptr(), bytes, c10::cuda::getCurrentCUDAStream(p.device).stream());
  TORCH_CHECK(err == nullptr, err);
}

at::Tensor grouped_gemm_cuda(const at::Tensor& a, const at::Tensor& offs, at::TensorList weights,
                             const at::Tensor& bidx, const at::Tensor& row, const std::optional<at::Tensor>& a_scale,
                             std::optional<at::TensorList> weight_scales) {
  auto out = checked_output(a, offs, weights, bidx, row, a_scale, weight_scales);
  if (out.numel() == 0 || offs.size(0) == 0) return out;
  c10::cuda::CUDAGuard guard(a.device());
  GroupedGemmParams p = make_params(a, offs, weights, bidx, row, a_scale, weight_scales, out);
  if (a.scalar_type() == at::kFloat8_e4m3fn) {
    // chosen by measurement on host-known shapes only (grouped_gemm_fp8_dispatch.h), never on offs values
    const Fp8Choice c = fp8_default_choice(p.T, p.E, p.N, p.K);
    const Fp8Variant* v = find_fp8_variant(c.variant);
    if (v == nullptr || !v->built()) v = find_fp8_variant(kFp8FallbackVariant);
    TORCH_CHECK(v != nullptr && v->built(), "dwdp::grouped_gemm (CUDA): neither the FP8 variant ", c.variant,
                " nor the fallback ", kFp8FallbackVariant, " is in this build");
    p.raster = c.raster;
    p.swizzle = c.swizzle;
    enqueue(p, v->ws, v->run, a);
  } else {
    const Bf16Variant* v = find_bf16_variant(bf16_default_variant(p.T, p.E));
    if (v == nullptr || !v->built()) v = find_bf16_variant("coop");
    enqueue(p, v->ws, v->run, a);
  }
  return out;
}

// The BF16 variant for host-known shapes (rows T, experts E), never offs values.
const char* bf16_default_variant(int64_t T, int64_t E) {
  // Few rows per expert (small T*topk/E) waste most of a 128-row tile: ping-pong 64-row tiles there.
  if (T < kBf16ClusterMRowsPerExpert * E) return "pingpong";
  return "coop_c2x1";  // "coop" (1x2 cluster) where the 2x1 variant is not in the build
}

// Tuning twin of the BF16 op (scripts/bench_routed_op.py): the same contract plus the variant's name.
at::Tensor grouped_gemm_bf16_tune_cuda(const at::Tensor& a, const at::Tensor& offs, at::TensorList weights,
                                       const at::Tensor& bidx, const at::Tensor& row, const std::string& variant) {
  TORCH_CHECK(a.scalar_type() == at::kBFloat16, "dwdp::grouped_gemm_bf16_tune: a must be bfloat16");
  const Bf16Variant* v = find_bf16_variant(variant);
  TORCH_CHECK(v != nullptr && v->built(), "dwdp::grouped_gemm_bf16_tune: variant '", variant,
              "' is unknown or not in this build (see dwdp::grouped_gemm_bf16_variants)");
  auto out = checked_output(a, offs, weights, bidx, row, std::nullopt, std::nullopt);
  if (out.numel() == 0 || offs.size(0) == 0) return out;
  c10::cuda::CUDAGuard guard(a.device());
  GroupedGemmParams p = make_params(a, offs, weights, bidx, row, std::nullopt, std::nullopt, out);
  enqueue(p, v->ws, v->run, a);
  return out;
}

// Names of the BF16 variants in this build, and the production choice for (T, E).
std::vector<std::string> grouped_gemm_bf16_variants() {
  std::vector<std::string> names;
  for (const auto& v : kBf16Variants)
    if (v.built()) names.emplace_back(v.name);
  return names;
}
std::string grouped_gemm_bf16_choice(int64_t T, int64_t E) { return bf16_default_variant(T, E); }

// Tuning twin of the FP8 op (scripts/bench_fp8_grouped.py): the same contract plus the variant's name and the
// scheduler knobs; not used by the engine.
at::Tensor grouped_gemm_fp8_tune_cuda(const at::Tensor& a, const at::Tensor& offs, at::TensorList weights,
                                      const at::Tensor& bidx, const at::Tensor& row, const at::Tensor& a_scale,
                                      at::TensorList weight_scales, const std::string& variant, int64_t raster,
                                      int64_t swizzle) {
  TORCH_CHECK(a.scalar_type() == at::kFloat8_e4m3fn, "dwdp::grouped_gemm_fp8_tune: a must be float8_e4m3fn");
  const Fp8Variant* v = find_fp8_variant(variant);
  TORCH_CHECK(v != nullptr && v->built(), "dwdp::grouped_gemm_fp8_tune: variant '", variant,
              "' is unknown or not in this build (see dwdp::grouped_gemm_fp8_variants)");
  TORCH_CHECK(raster >= 0 && raster <= 2 && swizzle >= 0 && swizzle <= 8,
              "dwdp::grouped_gemm_fp8_tune: raster in 0..2 and swizzle in 0..8, got ", raster, ", ", swizzle);
  std::optional<at::Tensor> sa(a_scale);
  std::optional<at::TensorList> sw(weight_scales);
  auto out = checked_output(a, offs, weights, bidx, row, sa, sw);
  if (out.numel() == 0 || offs.size(0) == 0) return out;
  c10::cuda::CUDAGuard guard(a.device());
  GroupedGemmParams p = make_params(a, offs, weights, bidx, row, sa, sw, out);
  p.raster = int(raster);
  p.swizzle = int(swizzle);
  enqueue(p, v->ws, v->run, a);
  return out;
}

// Names of the FP8 variants in this build.
std::vector<std::string> grouped_gemm_fp8_variants() {
  std::vector<std::string> names;
  for (const auto& v : kFp8Variants)
    if (v.built()) names.emplace_back(v.name);
  return names;
}

// The production FP8 choice for host-known shapes (rows T, experts E, N, K): "variant,raster,swizzle".
std::string grouped_gemm_fp8_choice(int64_t T, int64_t E, int64_t N, int64_t K) {
  const Fp8Choice c = fp8_default_choice(T, E, N, K);
  return std::string(c.variant) + "," + std::to_string(c.raster) + "," + std::to_string(c.swizzle);
}

}  // namespace

// Tuning and introspection ops of the CUDA build only (the CPU build has no FP8 variants).
TORCH_LIBRARY_FRAGMENT(dwdp, m) {
  m.def("grouped_gemm_fp8_tune(Tensor a, Tensor offs, Tensor[] weights, Tensor expert_buffer_idx, Tensor expert_row, "
        "Tensor a_scale, Tensor[] weight_scales, str variant, int raster=0, int swizzle=0) -> Tensor");
  m.def("grouped_gemm_fp8_variants() -> str[]", &grouped_gemm_fp8_variants);
  m.def("grouped_gemm_fp8_choice(int T, int E, int N, int K) -> str", &grouped_gemm_fp8_choice);
  m.def("grouped_gemm_bf16_tune(Tensor a, Tensor offs, Tensor[] weights, Tensor expert_buffer_idx, Tensor expert_row, "
        "str variant) -> Tensor");
  m.def("grouped_gemm_bf16_variants() -> str[]", &grouped_gemm_bf16_variants);
  m.def("grouped_gemm_bf16_choice(int T, int E) -> str", &grouped_gemm_bf16_choice);
}
TORCH_LIBRARY_IMPL(dwdp, CUDA, m) {
  m.impl("grouped_gemm", &grouped_gemm_cuda);
  m.impl("grouped_gemm_fp8_tune", &grouped_gemm_fp8_tune_cuda);
  m.impl("grouped_gemm_bf16_tune", &grouped_gemm_bf16_tune_cuda);
}

}  // namespace dwdp
