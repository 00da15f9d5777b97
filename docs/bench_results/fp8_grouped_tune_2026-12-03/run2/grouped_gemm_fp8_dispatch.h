// The production choice among the FP8 grouped GEMM variants (grouped_gemm.h DWDP_FP8_VARIANTS), on host-known
// shapes only (rows T, experts E, N, K), never on offs values, so the choice never waits on the GPU.
// Written by scripts/fp8_dispatch_select.py from the tuning run of bench_fp8_grouped.py on NVIDIA H200; the rule is in that file's docstring.
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
  const bool few_rows = T < 256 * E;
  (void)few_rows;
  if (N == 4096 && K == 7168) return {"coop_128x128_c1x2", 0, 0};
  if (N == 7168 && K == 2048) return {"coop_128x128_c1x2", 0, 0};
  return {"coop_128x128_c1x2", 0, 0};
}

}  // namespace dwdp
