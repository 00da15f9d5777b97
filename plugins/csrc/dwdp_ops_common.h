// Argument checks shared by the CPU and CUDA implementations of dwdp::grouped_gemm (torch glue only).
// Every message names the argument and what was expected, matching dwdp_trtllm/ops/grouped_gemm.py.
#pragma once
#include <ATen/ATen.h>

namespace dwdp {

inline void check_grouped_gemm_args(const at::Tensor& a, const at::Tensor& offs, at::TensorList weights,
                                    const at::Tensor& bidx, const at::Tensor& row,
                                    const std::optional<at::Tensor>& a_scale,
                                    const std::optional<at::TensorList>& weight_scales) {
  TORCH_CHECK(a.dim() == 2, "dwdp::grouped_gemm: a must be [T, K], got ", a.sizes());
  TORCH_CHECK(a.is_contiguous(), "dwdp::grouped_gemm: a must be contiguous");
  TORCH_CHECK(offs.dim() == 1 && offs.scalar_type() == at::kInt, "dwdp::grouped_gemm: offs must be int32 [E], got ",
              offs.scalar_type(), " ", offs.sizes());
  const int64_t E = offs.size(0);
  for (const auto* t : {&bidx, &row}) {
    const char* name = t == &bidx ? "expert_buffer_idx" : "expert_row";
    TORCH_CHECK(t->dim() == 1 && t->size(0) == E && t->scalar_type() == at::kInt, "dwdp::grouped_gemm: ", name,
                " must be int32 [E=", E, "], got ", t->scalar_type(), " ", t->sizes());
    TORCH_CHECK(t->device() == a.device(), "dwdp::grouped_gemm: ", name, " is on ", t->device(), ", a on ", a.device());
  }
  TORCH_CHECK(offs.device() == a.device(), "dwdp::grouped_gemm: offs is on ", offs.device(), ", a on ", a.device());
  TORCH_CHECK(!weights.empty(), "dwdp::grouped_gemm: weights must hold at least one buffer");
  const int64_t K = a.size(1), N = weights[0].dim() == 3 ? weights[0].size(1) : -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto& w = weights[i];
    TORCH_CHECK(w.dim() == 3 && w.size(1) == N && w.size(2) == K, "dwdp::grouped_gemm: weights[", i,
                "] must be [rows, N=", N, ", K=", K, "], got ", w.sizes());
    TORCH_CHECK(w.scalar_type() == a.scalar_type(), "dwdp::grouped_gemm: weights[", i, "] is ", w.scalar_type(),
                ", a is ", a.scalar_type());
    TORCH_CHECK(w.is_contiguous(), "dwdp::grouped_gemm: weights[", i, "] must be contiguous");
    TORCH_CHECK(w.device() == a.device(), "dwdp::grouped_gemm: weights[", i, "] is on ", w.device(), ", a on ",
                a.device());
  }
  const bool fp8 = a.scalar_type() == at::kFloat8_e4m3fn;
  if (!fp8) {
    TORCH_CHECK(!a_scale.has_value() && !weight_scales.has_value(),
                "dwdp::grouped_gemm: a_scale/weight_scales are only for float8_e4m3fn inputs, a is ", a.scalar_type());
    return;
  }
  const int64_t KB = (K + 127) / 128, NB = (N + 127) / 128;
  TORCH_CHECK(a_scale.has_value() && weight_scales.has_value(),
              "dwdp::grouped_gemm: float8_e4m3fn inputs need a_scale [T, ceil(K/128)] and weight_scales");
  TORCH_CHECK(a_scale->dim() == 2 && a_scale->size(0) == a.size(0) && a_scale->size(1) == KB &&
                  a_scale->scalar_type() == at::kFloat && a_scale->is_contiguous(),
              "dwdp::grouped_gemm: a_scale must be contiguous float32 [T=", a.size(0), ", KB=", KB, "], got ",
              a_scale->scalar_type(), " ", a_scale->sizes());
  TORCH_CHECK(weight_scales->size() == weights.size(), "dwdp::grouped_gemm: weight_scales must hold one tensor per ",
              "weights buffer (", weights.size(), "), got ", weight_scales->size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto& s = (*weight_scales)[i];
    TORCH_CHECK(s.dim() == 3 && s.size(0) == weights[i].size(0) && s.size(1) == NB && s.size(2) == KB &&
                    s.scalar_type() == at::kFloat && s.is_contiguous() && s.device() == a.device(),
                "dwdp::grouped_gemm: weight_scales[", i, "] must be contiguous float32 [", weights[i].size(0),
                ", NB=", NB, ", KB=", KB, "] on ", a.device(), ", got ", s.scalar_type(), " ", s.sizes());
  }
}

}  // namespace dwdp
