// The production choice among the FP8 grouped GEMM variants (grouped_gemm.h DWDP_FP8_VARIANTS), on host-known
// shapes only (rows T, experts E, N, K), never on offs values, so the choice never waits on the GPU.
// Before the tuning run of 2026-12-03: the single configuration of sessions 1-6 everywhere.
#pragma once
#include <cstdint>

namespace dwdp {

struct Fp8Choice {
  const char* variant;
  int raster;   // GroupedGemmParams::raster
  int swizzle;  // GroupedGemmParams::swizzle
};

// Used when the chosen variant is not in the build (left out after a compile failure).
constexpr const char* kFp8FallbackVariant = "coop_128x128_c1x2";

inline Fp8Choice fp8_default_choice(int64_t T, int64_t E, int64_t N, int64_t K) {
  (void)T, (void)E, (void)N, (void)K;
  return {"coop_128x128_c1x2", 0, 0};
}

}  // namespace dwdp
