// CUDA implementation of dwdp::grouped_gemm: torch glue around the raw-pointer CUTLASS sm90 kernels
// (plugins/include/dwdp/grouped_gemm.h). Legend and contract: see grouped_gemm_cpu.cpp.
//
// Stream: everything is enqueued on the current torch CUDA stream; no host sync, no .item().
// Memory: output and workspace come from the torch caching allocator (graph-capture safe).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "dwdp/grouped_gemm.h"
#include "dwdp_ops_common.h"

namespace dwdp {
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

at::Tensor grouped_gemm_cuda(const at::Tensor& a, const at::Tensor& offs, at::TensorList weights,
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
  c10::cuda::CUDAGuard guard(a.device());
  auto out = at::empty({T, N}, a.options().dtype(at::kBFloat16));
  if (T == 0 || E == 0) return out;

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
  p.T = T;
  p.N = N;
  p.K = K;
  p.E = int(E);
  p.device = a.device().index();
  p.sm_count = sm_count(p.device);

  // Few rows per expert (small T*topk/E) waste most of a 128-row tile: ping-pong 64-row tiles there.
  // The split is on shapes only (host-known), never on offs values.
  using WsFn = size_t (*)(const GroupedGemmParams&);
  using RunFn = const char* (*)(const GroupedGemmParams&, void*, size_t, cudaStream_t);
  WsFn ws_fn;
  RunFn run_fn;
  if (fp8) {
    ws_fn = grouped_gemm_fp8_blockwise_workspace;
    run_fn = grouped_gemm_fp8_blockwise;
  } else if (T < 96 * E) {
    ws_fn = grouped_gemm_bf16_pingpong_workspace;
    run_fn = grouped_gemm_bf16_pingpong;
  } else {
    ws_fn = grouped_gemm_bf16_coop_workspace;
    run_fn = grouped_gemm_bf16_coop;
  }
  const size_t bytes = ws_fn(p);
  auto ws = at::empty({int64_t(bytes)}, a.options().dtype(at::kByte));
  const char* err = run_fn(p, ws.data_ptr(), bytes, c10::cuda::getCurrentCUDAStream(p.device).stream());
  TORCH_CHECK(err == nullptr, err);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(dwdp, CUDA, m) { m.impl("grouped_gemm", &grouped_gemm_cuda); }

}  // namespace dwdp
