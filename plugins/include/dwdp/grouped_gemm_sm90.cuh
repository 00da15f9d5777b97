// CUTLASS sm90 ptr-array grouped GEMM over experts whose weights live in several buffers (no torch headers).
//
// Legend: see grouped_gemm.h (T, E, K, N, KB, NB). Each variant .cu instantiates GroupedRunner with one CUTLASS
// configuration. Per call, one tiny kernel (one thread per expert) turns offs/bidx/row and the buffers' base
// pointers into CUTLASS's per-group problem shapes, pointer arrays, strides (and FP8 scale pointers/layouts)
// inside the caller's workspace; the GEMM then reads them on the device. Host problem shapes are nullptr, so
// nothing here waits on the GPU and the whole thing is CUDA-graph capturable.
#pragma once

#include <cstdio>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "dwdp/grouped_gemm.h"

namespace dwdp {
namespace sm90 {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M, N, K) per group
using LayoutA = cutlass::layout::RowMajor;     // a_TK: K contiguous
using LayoutB = cutlass::layout::ColumnMajor;  // W [N, K] row-major == B (K x N) column-major
using LayoutD = cutlass::layout::RowMajor;     // out_TN

// DeepSeek-style block scales: activations 1x128 along K, weights 128x128; both stored K-major
// (a_scale [T, KB], weight scales [NB, KB] per expert), which is what the op contract hands us.
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// A CUTLASS grouped GEMM type from (element, tile, cluster, schedules). kBlockwise selects the FP8 mainloop
// whose B/A operands carry (pointer, scale-layout) pairs.
template <class ElementAB, class ElementD, class TileShape, class ClusterShape, class KernelSchedule,
          class EpilogueSchedule, bool kBlockwise>
struct GemmConfig {
  static constexpr int kAlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD*, kAlignD,  // no C operand: out = 1 * acc
      ElementD, LayoutD*, kAlignD, EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;
  using StrideAPair = cute::conditional_t<kBlockwise, cute::tuple<LayoutA*, LayoutSFA*>, LayoutA*>;
  using StrideBPair = cute::conditional_t<kBlockwise, cute::tuple<LayoutB*, LayoutSFB*>, LayoutB*>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, StrideAPair, kAlignAB, ElementAB, StrideBPair,
      kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using ElementA = ElementAB;
  using ElementOut = ElementD;
  static constexpr bool blockwise = kBlockwise;
};

inline size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

// Where each per-group argument array sits inside the workspace.
template <class Cfg>
struct WorkspaceLayout {
  using K_ = typename Cfg::Kernel;
  using StrideA = typename K_::InternalStrideA;
  using StrideB = typename K_::InternalStrideB;
  using StrideD = typename K_::InternalStrideD;
  using Shape = typename ProblemShape::UnderlyingProblemShape;
  size_t shapes, pa, pb, pd, sa, sb, sd, psfa, psfb, lsfa, lsfb, cutlass_ws, total;
  explicit WorkspaceLayout(int E, size_t cutlass_bytes) {
    size_t o = 0;
    auto take = [&](size_t bytes) { size_t at = o; o += align_up(bytes); return at; };
    shapes = take(sizeof(Shape) * E);
    pa = take(sizeof(void*) * E);
    pb = take(sizeof(void*) * E);
    pd = take(sizeof(void*) * E);
    sa = take(sizeof(StrideA) * E);
    sb = take(sizeof(StrideB) * E);
    sd = take(sizeof(StrideD) * E);
    psfa = take(Cfg::blockwise ? sizeof(void*) * E : 0);
    psfb = take(Cfg::blockwise ? sizeof(void*) * E : 0);
    lsfa = take(Cfg::blockwise ? sizeof(LayoutSFA) * E : 0);
    lsfb = take(Cfg::blockwise ? sizeof(LayoutSFB) * E : 0);
    cutlass_ws = take(cutlass_bytes);
    total = o;
  }
};

// One thread per expert: problem shape, A/B/D pointers, strides (and FP8 scale pointers/layouts) of group e.
template <class Cfg>
__global__ void build_group_args(GroupedGemmParams p, char* ws, WorkspaceLayout<Cfg> L) {
  using WL = WorkspaceLayout<Cfg>;
  using EA = typename Cfg::ElementA;
  using ED = typename Cfg::ElementOut;
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= p.E) return;
  int start = e == 0 ? 0 : p.offs[e - 1];
  int end = p.offs[e];
  int b = p.bidx[e];
  int r = p.row[e];
  if (start < 0 || end < start || end > p.T || b < 0 || b >= p.num_buffers || r < 0 || r >= p.buffer_rows[b]) {
    printf("dwdp::grouped_gemm: bad expert %d: rows [%d, %d) of T=%lld, buffer %d of %d, row %d\n", e, start, end,
           (long long)p.T, b, p.num_buffers, r);
    __trap();
  }
  int M = end - start, N = int(p.N), K = int(p.K);
  reinterpret_cast<typename WL::Shape*>(ws + L.shapes)[e] = typename WL::Shape{M, N, K};
  reinterpret_cast<const EA**>(ws + L.pa)[e] = static_cast<const EA*>(p.a) + int64_t(start) * K;
  reinterpret_cast<const EA**>(ws + L.pb)[e] = static_cast<const EA*>(p.buffers[b]) + int64_t(r) * N * K;
  reinterpret_cast<ED**>(ws + L.pd)[e] = static_cast<ED*>(p.out) + int64_t(start) * N;
  reinterpret_cast<typename WL::StrideA*>(ws + L.sa)[e] = cutlass::make_cute_packed_stride(typename WL::StrideA{}, {M, K, 1});
  reinterpret_cast<typename WL::StrideB*>(ws + L.sb)[e] = cutlass::make_cute_packed_stride(typename WL::StrideB{}, {N, K, 1});
  reinterpret_cast<typename WL::StrideD*>(ws + L.sd)[e] = cutlass::make_cute_packed_stride(typename WL::StrideD{}, {M, N, 1});
  if constexpr (Cfg::blockwise) {
    int KB = (K + 127) / 128, NB = (N + 127) / 128;
    reinterpret_cast<const float**>(ws + L.psfa)[e] = p.a_scale + int64_t(start) * KB;
    reinterpret_cast<const float**>(ws + L.psfb)[e] = p.buffer_scales[b] + int64_t(r) * NB * KB;
    reinterpret_cast<LayoutSFA*>(ws + L.lsfa)[e] = ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(M, N, K, 1));
    reinterpret_cast<LayoutSFB*>(ws + L.lsfb)[e] = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(M, N, K, 1));
  }
}

template <class Cfg>
struct GroupedRunner {
  using Gemm = typename Cfg::Gemm;
  using WL = WorkspaceLayout<Cfg>;
  using EA = typename Cfg::ElementA;
  using ED = typename Cfg::ElementOut;

  static typename Gemm::Arguments arguments(const GroupedGemmParams& p, char* ws, const WL& L) {
    cutlass::KernelHardwareInfo hw;
    hw.device_id = p.device;
    hw.sm_count = p.sm_count;
    auto at = [&](size_t off) { return ws == nullptr ? nullptr : ws + off; };
    using Shape = typename WL::Shape;
    typename Gemm::Arguments args;
    if constexpr (Cfg::blockwise) {
      args = typename Gemm::Arguments{
          cutlass::gemm::GemmUniversalMode::kGrouped,
          {p.E, reinterpret_cast<Shape*>(at(L.shapes)), nullptr},
          {reinterpret_cast<const EA**>(at(L.pa)), reinterpret_cast<typename WL::StrideA*>(at(L.sa)),
           reinterpret_cast<const EA**>(at(L.pb)), reinterpret_cast<typename WL::StrideB*>(at(L.sb)),
           reinterpret_cast<const float**>(at(L.psfa)), reinterpret_cast<LayoutSFA*>(at(L.lsfa)),
           reinterpret_cast<const float**>(at(L.psfb)), reinterpret_cast<LayoutSFB*>(at(L.lsfb))},
          {{}, nullptr, nullptr, reinterpret_cast<ED**>(at(L.pd)), reinterpret_cast<typename WL::StrideD*>(at(L.sd))},
          hw};
    } else {
      args = typename Gemm::Arguments{
          cutlass::gemm::GemmUniversalMode::kGrouped,
          {p.E, reinterpret_cast<Shape*>(at(L.shapes)), nullptr},
          {reinterpret_cast<const EA**>(at(L.pa)), reinterpret_cast<typename WL::StrideA*>(at(L.sa)),
           reinterpret_cast<const EA**>(at(L.pb)), reinterpret_cast<typename WL::StrideB*>(at(L.sb))},
          {{}, nullptr, nullptr, reinterpret_cast<ED**>(at(L.pd)), reinterpret_cast<typename WL::StrideD*>(at(L.sd))},
          hw};
    }
    auto& f = args.epilogue.thread;
    f.alpha = 1.0f;
    f.beta = 0.0f;
    // persistent tile scheduler knobs (0 = CUTLASS's default: raster along M, no swizzle)
    using Raster = decltype(args.scheduler.raster_order);
    if (p.raster == 1) args.scheduler.raster_order = Raster::AlongM;
    if (p.raster == 2) args.scheduler.raster_order = Raster::AlongN;
    if (p.swizzle > 0) args.scheduler.max_swizzle_size = p.swizzle;
    return args;
  }

  static WL layout(const GroupedGemmParams& p) {
    WL probe(p.E, 0);
    auto args = arguments(p, nullptr, probe);
    return WL(p.E, Gemm::get_workspace_size(args));
  }

  static size_t workspace_bytes(const GroupedGemmParams& p) { return layout(p).total; }

  static const char* run(const GroupedGemmParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (p.E == 0 || p.T == 0) return nullptr;
    WL L = layout(p);
    if (workspace_bytes < L.total) return "dwdp::grouped_gemm: workspace too small";
    char* ws = static_cast<char*>(workspace);
    int threads = 128;
    build_group_args<Cfg><<<(p.E + threads - 1) / threads, threads, 0, stream>>>(p, ws, L);
    if (cudaGetLastError() != cudaSuccess) return "dwdp::grouped_gemm: launching the argument builder failed";
    auto args = arguments(p, ws, L);
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return "dwdp::grouped_gemm: CUTLASS can_implement rejected the problem";
    if (gemm.initialize(args, ws + L.cutlass_ws, stream) != cutlass::Status::kSuccess)
      return "dwdp::grouped_gemm: CUTLASS initialize failed";
    if (gemm.run(stream) != cutlass::Status::kSuccess) return "dwdp::grouped_gemm: CUTLASS kernel launch failed";
    if (cudaGetLastError() != cudaSuccess) return "dwdp::grouped_gemm: CUDA error after the GEMM launch";
    return nullptr;
  }
};

}  // namespace sm90
}  // namespace dwdp

// One FP8 variant's two entry points (declared in grouped_gemm.h's DWDP_FP8_VARIANTS list) from a GemmConfig.
#define DWDP_DEFINE_FP8_VARIANT(tag, Cfg)                                                                          \
  namespace dwdp {                                                                                                 \
  size_t grouped_gemm_fp8_##tag##_workspace(const GroupedGemmParams& p) {                                          \
    return sm90::GroupedRunner<Cfg>::workspace_bytes(p);                                                           \
  }                                                                                                                \
  const char* grouped_gemm_fp8_##tag(const GroupedGemmParams& p, void* ws, size_t bytes, cudaStream_t stream) {    \
    return sm90::GroupedRunner<Cfg>::run(p, ws, bytes, stream);                                                    \
  }                                                                                                                \
  }
