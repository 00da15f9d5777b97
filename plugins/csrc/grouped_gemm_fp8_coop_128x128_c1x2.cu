// FP8 e4m3 grouped GEMM with DeepSeek block scales (activations 1x128, weights 128x128), bf16 out, CUTLASS's
// cooperative FP8 blockwise-scaled mainloop (scales applied to the fp32 accumulators per K block).
// Variant coop_128x128_c1x2: tile 128x128x128, cluster 1x2: the first FP8 configuration and the fallback (A multicast across the N pair).
#include "dwdp/grouped_gemm_sm90.cuh"

using DwdpFp8_coop_128x128_c1x2 = dwdp::sm90::GemmConfig<
    cutlass::float_e4m3_t, cutlass::bfloat16_t, cute::Shape<cute::_128, cute::_128, cute::_128>,
    cute::Shape<cute::_1, cute::_2, cute::_1>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8BlockScaledAccum,
    cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, true>;
DWDP_DEFINE_FP8_VARIANT(coop_128x128_c1x2, DwdpFp8_coop_128x128_c1x2)
