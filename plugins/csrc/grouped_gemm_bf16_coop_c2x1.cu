// BF16 grouped GEMM, cooperative schedule, 128x256x64 tiles, 2x1 cluster along M (B tile multicast): the two CTAs of
// a cluster take consecutive 128-row tiles of one expert and read its weight tile from HBM once between them. The
// variant for groups of >= ~2 tiles of rows (torch._grouped_mm's sm_90 configuration for large problems,
// aten/src/ATen/native/cuda/GroupMM.cu bf16bf16_grouped_gemm_impl_sm90_sm100: ClusterShape 2x1x1).
// Left out of a build that fails to compile it (ops/build.py DWDP_OPS_EXCLUDE): the glue then runs grouped_gemm_bf16_coop.
#include "dwdp/grouped_gemm_sm90.cuh"

namespace dwdp {
using namespace cute;
using CfgBf16CoopC2x1 = sm90::GemmConfig<cutlass::bfloat16_t, cutlass::bfloat16_t, Shape<_128, _256, _64>,
                                         Shape<_2, _1, _1>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                         cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, false>;

size_t grouped_gemm_bf16_coop_c2x1_workspace(const GroupedGemmParams& p) {
  return sm90::GroupedRunner<CfgBf16CoopC2x1>::workspace_bytes(p);
}
const char* grouped_gemm_bf16_coop_c2x1(const GroupedGemmParams& p, void* ws, size_t bytes, cudaStream_t stream) {
  return sm90::GroupedRunner<CfgBf16CoopC2x1>::run(p, ws, bytes, stream);
}
}  // namespace dwdp
