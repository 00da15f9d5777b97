// Raw-pointer interface of the dwdp multi-buffer grouped GEMM kernels (no torch headers).
//
// Legend: T tokens (rows of A, sorted by expert), E experts, K in-features, N out-features,
// KB = ceil(K/128), NB = ceil(N/128) (FP8 block-scale counts), B weight buffers.
//
// Contract (all pointers are device pointers on one GPU, all work is enqueued on `stream`, no host sync):
//   a_TK       [T, K] row-major, bf16 or fp8 e4m3
//   offs_E     int32 cumulative END offsets: group e is rows [offs[e-1], offs[e]) (offs[-1] = 0)
//   bidx_E     int32 buffer index of expert e, row_E int32 row of expert e inside that buffer
//   buffers[b] [rows_b, N, K] row-major (nn.Linear out x in), same dtype as a
//   a_scale_TKb fp32 [T, KB] (1x128 groups), buffer_scales[b] fp32 [rows_b, NB, KB] (128x128 blocks); FP8 only
//   out_TN     [T, N] row-major bf16
// An expert index or row out of range, or offsets that decrease or pass T, trap on the device (like torch's
// device-side index asserts): the result is never silently wrong.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

namespace dwdp {

// Buffer base pointers travel by value in the kernel parameters; more buffers than this are rejected by the glue.
constexpr int kMaxBuffers = 16;

struct GroupedGemmParams {
  const void* a = nullptr;
  const int32_t* offs = nullptr;
  const int32_t* bidx = nullptr;
  const int32_t* row = nullptr;
  const void* buffers[kMaxBuffers] = {};
  const float* buffer_scales[kMaxBuffers] = {};
  int64_t buffer_rows[kMaxBuffers] = {};
  int num_buffers = 0;
  const float* a_scale = nullptr;
  void* out = nullptr;
  int64_t T = 0, N = 0, K = 0;
  int E = 0;
  int device = 0;
  int sm_count = 0;
  int raster = 0;   // persistent tile scheduler: 0 CUTLASS default (along M), 1 along M, 2 along N
  int swizzle = 0;  // scheduler max_swizzle_size; 0 = CUTLASS default (1)
};

// Bytes of device workspace (argument arrays + CUTLASS workspace) the kernel variant needs for `p`.
size_t grouped_gemm_bf16_coop_workspace(const GroupedGemmParams& p);
size_t grouped_gemm_bf16_pingpong_workspace(const GroupedGemmParams& p);
size_t grouped_gemm_bf16_coop_c2x1_workspace(const GroupedGemmParams& p);

// Enqueue the GEMM; returns nullptr on success or a static message naming what failed.
const char* grouped_gemm_bf16_coop(const GroupedGemmParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
const char* grouped_gemm_bf16_pingpong(const GroupedGemmParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
// 2x1 cluster (B multicast across an expert's consecutive row tiles); may be left out of a build (weak in the glue)
const char* grouped_gemm_bf16_coop_c2x1(const GroupedGemmParams& p, void* workspace, size_t workspace_bytes,
                                        cudaStream_t stream);

// FP8 blockwise variants (one .cu each, plugins/csrc/grouped_gemm_fp8_<tag>.cu): X(tag).
// coop = cooperative (two consumer warp groups on one tile), pp = ping-pong (one tile per warp group);
// MxN tile (K 128); cM x N cluster (TMA multicast of B across the M pair, of A across the N pair).
// grouped_gemm_cuda.cpp dispatches among them (grouped_gemm_fp8_dispatch.h). Tried and dropped on 2026-12-03
// (docs/BENCHMARKS.md section 11): cooperative 256x128 (spills: 0.4-0.5x), 128x256 (CUTLASS 4.2's blockwise
// mainloop fails a static_assert for M>1, N>1 scale tiles), M-major activation scales (no gain, wrong layout).
#define DWDP_FP8_VARIANTS(X) \
  X(coop_128x128_c1x2)       \
  X(coop_128x128_c1x1)       \
  X(coop_128x128_c2x1)       \
  X(coop_128x128_c2x2)       \
  X(pp_64x128_c1x2)          \
  X(pp_64x128_c2x1)

#define DWDP_DECLARE_FP8_VARIANT(tag)                                                                      \
  size_t grouped_gemm_fp8_##tag##_workspace(const GroupedGemmParams& p);                                 \
  const char* grouped_gemm_fp8_##tag(const GroupedGemmParams& p, void* workspace, size_t workspace_bytes, \
                                     cudaStream_t stream);
DWDP_FP8_VARIANTS(DWDP_DECLARE_FP8_VARIANT)

}  // namespace dwdp
