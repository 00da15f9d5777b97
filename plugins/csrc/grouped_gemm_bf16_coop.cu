// BF16 grouped GEMM, cooperative schedule, 128x256x64 tiles, 1x2 cluster along N (A tile multicast):
// the throughput variant for groups of >= ~128 rows.
#include "dwdp/grouped_gemm_sm90.cuh"

namespace dwdp {
using namespace cute;
using CfgBf16Coop = sm90::GemmConfig<cutlass::bfloat16_t, cutlass::bfloat16_t, Shape<_128, _256, _64>, Shape<_1, _2, _1>,
                                     cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                     cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, false>;

size_t grouped_gemm_bf16_coop_workspace(const GroupedGemmParams& p) {
  return sm90::GroupedRunner<CfgBf16Coop>::workspace_bytes(p);
}
const char* grouped_gemm_bf16_coop(const GroupedGemmParams& p, void* ws, size_t bytes, cudaStream_t stream) {
  return sm90::GroupedRunner<CfgBf16Coop>::run(p, ws, bytes, stream);
}
}  // namespace dwdp
