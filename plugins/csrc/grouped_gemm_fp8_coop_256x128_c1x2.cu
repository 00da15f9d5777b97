// FP8 e4m3 grouped GEMM with DeepSeek block scales (activations 1x128, weights 128x128), bf16 out, CUTLASS's
// cooperative FP8 blockwise-scaled mainloop (scales applied to the fp32 accumulators per K block).
// Variant coop_256x128_c1x2: tile 256x128x128, cluster 1x2; tall M: each warp group 128 rows, so twice the MMAs per
// accumulator promotion and B read once per 256 rows, at 2 x 128 fp32 accumulators per consumer thread.
// (128x256 does not compile with CUTLASS 4.2's blockwise mainloop: its M>1, N>1 scale path fails a static_assert.)
#include "dwdp/grouped_gemm_sm90.cuh"

using DwdpFp8_coop_256x128_c1x2 = dwdp::sm90::GemmConfig<
    cutlass::float_e4m3_t, cutlass::bfloat16_t, cute::Shape<cute::_256, cute::_128, cute::_128>,
    cute::Shape<cute::_1, cute::_2, cute::_1>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8BlockScaledAccum,
    cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, true>;
DWDP_DEFINE_FP8_VARIANT(coop_256x128_c1x2, DwdpFp8_coop_256x128_c1x2)
