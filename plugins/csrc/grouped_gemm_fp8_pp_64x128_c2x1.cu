// FP8 e4m3 grouped GEMM with DeepSeek block scales (activations 1x128, weights 128x128), bf16 out, CUTLASS's
// ping-pong FP8 blockwise-scaled mainloop (scales applied to the fp32 accumulators per K block).
// Variant pp_64x128_c2x1: tile 64x128x128, cluster 2x1; ping-pong, B multicast across the M pair.
#include "dwdp/grouped_gemm_sm90.cuh"

using DwdpFp8_pp_64x128_c2x1 = dwdp::sm90::GemmConfig<
    cutlass::float_e4m3_t, cutlass::bfloat16_t, cute::Shape<cute::_64, cute::_128, cute::_128>,
    cute::Shape<cute::_2, cute::_1, cute::_1>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8BlockScaledAccum,
    cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong, true>;
DWDP_DEFINE_FP8_VARIANT(pp_64x128_c2x1, DwdpFp8_pp_64x128_c2x1)
