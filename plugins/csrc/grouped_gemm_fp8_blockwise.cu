// FP8 e4m3 grouped GEMM with DeepSeek block scales (activations 1x128, weights 128x128), bf16 out:
// CUTLASS's cooperative FP8 blockwise-scaled mainloop (scales applied to the fp32 accumulators per K block).
#include "dwdp/grouped_gemm_sm90.cuh"

namespace dwdp {
using namespace cute;
using CfgFp8Blockwise = sm90::GemmConfig<cutlass::float_e4m3_t, cutlass::bfloat16_t, Shape<_128, _128, _128>,
                                         Shape<_1, _2, _1>,
                                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8BlockScaledAccum,
                                         cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, true>;

size_t grouped_gemm_fp8_blockwise_workspace(const GroupedGemmParams& p) {
  return sm90::GroupedRunner<CfgFp8Blockwise>::workspace_bytes(p);
}
const char* grouped_gemm_fp8_blockwise(const GroupedGemmParams& p, void* ws, size_t bytes, cudaStream_t stream) {
  return sm90::GroupedRunner<CfgFp8Blockwise>::run(p, ws, bytes, stream);
}
}  // namespace dwdp
