// dwdp::grouped_gemm schema (TORCH_LIBRARY) and its CPU implementation: a plain loop over experts with at::matmul.
//
// Legend: T tokens sorted by expert, E experts, K in-features, N out-features, B weight buffers,
// KB = ceil(K/128), NB = ceil(N/128).
//   a_TK [T, K]; offs_E int32 cumulative END offsets (group e = rows [offs[e-1], offs[e]));
//   weights: B tensors [rows_b, N, K]; expert e uses weights[bidx_E[e]][row_E[e]];
//   out_TN = a_group @ W_e^T, accumulated in fp32, returned in a's dtype (bf16 for fp8 inputs).
//   FP8: a e4m3 with a_scale [T, KB] (1x128 groups), weights e4m3 with weight_scales [rows_b, NB, KB] (128x128).
// The CPU path exists so the schema, registration and dispatch run in CI; the fast path is grouped_gemm_cuda.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "dwdp_ops_common.h"

namespace dwdp {
namespace {

// Block-scaled FP8 [R, C] (scales [ceil(R/br), ceil(C/bc)]) to fp32.
at::Tensor dequant(const at::Tensor& x_RC, const at::Tensor& s, int64_t br, int64_t bc) {
  auto R = x_RC.size(0), C = x_RC.size(1);
  auto full = s.to(at::kFloat).repeat_interleave(br, 0).repeat_interleave(bc, 1);
  return x_RC.to(at::kFloat) * full.narrow(0, 0, R).narrow(1, 0, C);
}

at::Tensor grouped_gemm_cpu(const at::Tensor& a, const at::Tensor& offs, at::TensorList weights,
                            const at::Tensor& bidx, const at::Tensor& row, const std::optional<at::Tensor>& a_scale,
                            std::optional<at::TensorList> weight_scales) {
  check_grouped_gemm_args(a, offs, weights, bidx, row, a_scale, weight_scales);
  const bool fp8 = a.scalar_type() == at::kFloat8_e4m3fn;
  const int64_t T = a.size(0), K = a.size(1), N = weights[0].size(1), E = offs.size(0);
  auto out_dtype = fp8 ? at::kBFloat16 : a.scalar_type();
  auto out = at::empty({T, N}, a.options().dtype(out_dtype));
  auto offs_c = offs.to(at::kLong).contiguous();
  auto bidx_c = bidx.to(at::kLong).contiguous();
  auto row_c = row.to(at::kLong).contiguous();
  const int64_t* o = offs_c.data_ptr<int64_t>();
  const int64_t* b = bidx_c.data_ptr<int64_t>();
  const int64_t* r = row_c.data_ptr<int64_t>();
  int64_t start = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t end = o[e];
    TORCH_CHECK(end >= start && end <= T, "dwdp::grouped_gemm: offs must be non-decreasing and <= T=", T,
                "; offs[", e, "]=", end, " after ", start);
    TORCH_CHECK(b[e] >= 0 && b[e] < (int64_t)weights.size(), "dwdp::grouped_gemm: expert_buffer_idx[", e, "]=", b[e],
                " is not in [0, ", weights.size(), ")");
    TORCH_CHECK(r[e] >= 0 && r[e] < weights[b[e]].size(0), "dwdp::grouped_gemm: expert_row[", e, "]=", r[e],
                " is not in [0, ", weights[b[e]].size(0), ") for weights[", b[e], "]");
    if (end > start) {
      auto a_MK = a.narrow(0, start, end - start);
      auto w_NK = weights[b[e]][r[e]];
      at::Tensor y_MN;
      if (fp8) {
        auto sa = a_scale->narrow(0, start, end - start);
        y_MN = at::matmul(dequant(a_MK, sa, 1, 128), dequant(w_NK, (*weight_scales)[b[e]][r[e]], 128, 128).t());
      } else {
        y_MN = at::matmul(a_MK.to(at::kFloat), w_NK.to(at::kFloat).t());  // fp32 accumulation for bf16 too
      }
      out.narrow(0, start, end - start).copy_(y_MN);
    }
    start = end;
  }
  // Rows at and past offs[E-1] belong to no expert: unspecified by contract (CUDA leaves them), zeroed here.
  if (start < T) out.narrow(0, start, T - start).zero_();
  return out;
}

}  // namespace

TORCH_LIBRARY(dwdp, m) {
  m.def(
      "grouped_gemm(Tensor a, Tensor offs, Tensor[] weights, Tensor expert_buffer_idx, Tensor expert_row, "
      "Tensor? a_scale=None, Tensor[]? weight_scales=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(dwdp, CPU, m) { m.impl("grouped_gemm", &grouped_gemm_cpu); }

}  // namespace dwdp
