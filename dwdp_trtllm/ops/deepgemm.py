"""DeepGEMM (deepseek-ai/DeepGEMM) as an optional FP8 block-scale grouped GEMM on Hopper: the layout it needs and a
thin wrapper around `deep_gemm.m_grouped_fp8_gemm_nt_contiguous`.

DeepGEMM groups along M only, over ONE [E, N, K] weight tensor (it cannot read per-expert pointers, so it pairs with
the VMM composite view or DEP's single buffer, not with the multi_buffer [local | slot] split), and every expert's
rows must start at a multiple of `ALIGN_M` (its block M; `deep_gemm.get_mk_alignment_for_contiguous_layout()`, 128
on sm_90). Our op's input is the expert-sorted, unpadded [R, K] with cumulative row ends `offs`; `padded_layout`
maps it to DeepGEMM's padded rows, `pad_rows` / `unpad_rows` move the rows. Two ways to say which rows belong to
which expert, both DeepGEMM's:
  m_indices  [M] int32: the expert of each padded row, -1 on padding rows (the original contiguous layout)
  psum       [E] int32: padded end of each expert's rows; expert e starts at align(psum[e-1], ALIGN_M)
Scales (sm_90 recipe): activations 1x128 as FP32 [R, K/128], transposed by DeepGEMM into its MN-major TMA-aligned
layout (`deep_gemm.get_mn_major_tma_aligned_tensor`; a call given that layout uses it as is); weights 128x128 as
FP32 [E, N/128, K/128] contiguous, used as is.

`deep_gemm` is imported lazily, only by `grouped_gemm_fp8` / `module()`: nothing here needs it on CPU or in CI, and a
missing install is one clear DeepGEMMUnavailable naming what to do (scripts/gpu/deepgemm_build.sh builds it from
source on a CUDA machine). Legend: R rows (sum of counts), M padded rows, E experts, N out, K in.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

ALIGN_M = 128  # DeepGEMM's M alignment for the contiguous layout on sm_90 (kLegacyMKAlignmentForContiguousLayout)


class DeepGEMMUnavailable(RuntimeError):
    """deep_gemm cannot be imported (not built / not on sys.path / no CUDA)."""


@dataclass(frozen=True)
class PaddedLayout:
    """Where DeepGEMM's padded rows come from. dest_R[r] = padded row of source row r; rows_padded = M."""
    dest_R: torch.Tensor        # [R] int64
    expert_R: torch.Tensor      # [R] int32, the expert of each source row
    m_indices_M: torch.Tensor   # [M] int32, expert of each padded row, -1 on padding
    psum_E: torch.Tensor        # [E] int32, padded end row of each expert
    rows_padded: int


def padded_rows_bound(rows: int, experts: int, align: int = ALIGN_M) -> int:
    """An upper bound of the padded row count that needs no device-to-host sync: every non-empty expert (at most
    min(experts, rows) of them; an empty one pads to 0 rows) wastes < align rows."""
    return rows + min(experts, rows) * (align - 1)


def padded_height(rows: int, experts: int, align: int = ALIGN_M) -> int:
    """The padded tensor height the routed-expert op allocates (no host sync): padded_rows_bound rounded up to a
    multiple of align, so MN-major [M, K/128] FP32 scales are TMA-aligned as they stand (M % 4 == 0) and DeepGEMM
    reads them without its transpose (get_mn_major_tma_aligned_tensor returns such a tensor as is)."""
    return -(-padded_rows_bound(rows, experts, align) // align) * align


def padded_layout(offs_E: torch.Tensor, rows: int | None = None, rows_padded: int | None = None,
                  align: int = ALIGN_M) -> PaddedLayout:
    """DeepGEMM's padded row layout of the expert-sorted rows whose cumulative ends are offs_E (on offs_E's device).

    rows: offs_E[-1] if the caller knows it; rows_padded: the tensor height to lay out, None = the exact height. With
    both given nothing waits for the device (the hot path: pass padded_rows_bound); a height larger than needed
    leaves trailing rows marked -1 that DeepGEMM skips. Without them the values are read back (a host sync) and a
    too-small rows_padded raises ValueError.
    """
    if offs_E.dim() != 1 or offs_E.numel() == 0:
        raise ValueError(f"padded_layout: offs_E must be a non-empty 1-D tensor of cumulative row ends, got {tuple(offs_E.shape)}")
    dev = offs_E.device
    ends_E = offs_E.to(torch.int64)
    counts_E = torch.diff(ends_E, prepend=ends_E.new_zeros(1))
    aligned_E = (counts_E + align - 1) // align * align
    pstart_E = torch.cumsum(aligned_E, 0) - aligned_E
    checked = rows is None or rows_padded is None  # values read back anyway: check the height too
    if rows is None:
        rows = int(ends_E[-1])
    if checked:
        exact = int(aligned_E.sum())
        rows_padded = exact if rows_padded is None else rows_padded
        if rows_padded < exact:
            raise ValueError(f"padded_layout: rows_padded={rows_padded} < {exact} padded rows these offsets need")
    r_R = torch.arange(rows, device=dev, dtype=torch.int64)
    expert_R = torch.searchsorted(ends_E, r_R, right=True)
    dest_R = pstart_E[expert_R] + r_R - (ends_E - counts_E)[expert_R]
    m_indices_M = torch.full((rows_padded,), -1, dtype=torch.int32, device=dev)
    m_indices_M.index_copy_(0, dest_R, expert_R.to(torch.int32))
    return PaddedLayout(dest_R=dest_R, expert_R=expert_R.to(torch.int32), m_indices_M=m_indices_M,
                        psum_E=(pstart_E + counts_E).to(torch.int32), rows_padded=rows_padded)


def _as_words(t: torch.Tensor) -> torch.Tensor:
    """Rows of a contiguous 2-D tensor as the widest integers that tile a row (int64 when its bytes allow): the row
    copies move 8 bytes per element instead of one (index_copy_ has no float8 kernel, and byte-wide copies of FP8
    rows ran at ~0.7 TB/s on the H200, docs/history/benchmarks-2026-12.md section 13)."""
    if t.dim() != 2 or not t.is_contiguous():
        return t.view(torch.uint8) if t.dtype.itemsize == 1 and t.is_floating_point() else t
    row_bytes = t.shape[1] * t.dtype.itemsize
    for dt in (torch.int64, torch.int32, torch.int16, torch.uint8):
        if row_bytes % dt.itemsize == 0:
            return t.view(torch.uint8).view(dt) if t.dtype.itemsize == 1 else t.view(dt)
    return t  # not reached: uint8 tiles every row


def pad_rows(x_R: torch.Tensor, layout: PaddedLayout, out_M: torch.Tensor | None = None) -> torch.Tensor:
    """x_R's rows at their padded positions; padding rows are zero in a fresh buffer (out_M keeps whatever it held)."""
    if out_M is None:
        out_M = torch.zeros((layout.rows_padded, *x_R.shape[1:]), dtype=x_R.dtype, device=x_R.device)
    _as_words(out_M).index_copy_(0, layout.dest_R, _as_words(x_R.contiguous()))
    return out_M


def unpad_rows(y_M: torch.Tensor, layout: PaddedLayout) -> torch.Tensor:
    """The source rows of a padded result, in the original (expert-sorted) order."""
    if y_M.dim() == 2 and y_M.is_contiguous():
        return _as_words(y_M).index_select(0, layout.dest_R).view(y_M.dtype)
    return y_M.index_select(0, layout.dest_R)


def padded_source_rows(rows_A: torch.Tensor, layout: PaddedLayout) -> torch.Tensor:
    """The gather index that builds the padded layout in ONE pass: x_TH.index_select(0, result) equals
    pad_rows(x_TH.index_select(0, rows_A), layout) on every real row (padding rows read row 0 instead of zeros;
    their outputs are never read). rows_A = the token row of each expert-sorted pair (the engine's gather index).
    With it the routed-expert op's gather writes DeepGEMM's layout directly and no separate pad pass exists; the
    combine then reads padded row layout.dest_R[a] for sorted pair a."""
    src_M = torch.zeros(layout.rows_padded, dtype=rows_A.dtype, device=rows_A.device)
    src_M.index_copy_(0, layout.dest_R, rows_A)
    return src_M


def module():
    """The deep_gemm module (imported on first use). DWDP_DEEPGEMM_DIR names a built source tree to put on sys.path."""
    from .. import env  # noqa: PLC0415 - every environment variable is read there
    root = env.deepgemm_dir()
    if not root:  # `dwdp build-ops --deepgemm` builds the pinned DeepGEMM into the ops cache
        from .deepgemm_build import build_dir, built  # noqa: PLC0415
        root = str(build_dir()) if built() else None
    if root and root not in sys.path:
        sys.path.insert(0, root)
    if "deep_gemm" not in sys.modules and sys.platform.startswith("linux"):
        # On the H200 image (gcc 13, CUDA 13.0, torch 2.11) deep_gemm._C segfaulted in its first std::regex
        # (IncludeParser, at the first JIT call): the locale facet it fetched was another class's (a codecvt's
        # do_unshift ran for collate::transform): its facet id resolved to a copy other than libstdc++'s own (which
        # library exports it was not established; _C links cudart and nvrtc ahead of libstdc++). libstdc++ made
        # global first puts its own symbols ahead of every such copy: with it the same _C ran every test and the
        # benchmark (docs/history/benchmarks-2026-12.md section 13).
        import ctypes  # noqa: PLC0415
        try:
            ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass
    try:
        import deep_gemm  # noqa: PLC0415 - optional dependency, never needed on CPU
    except Exception as e:  # ImportError, or its _C failing to load / to init CUDA
        raise DeepGEMMUnavailable(
            f"DeepGEMM is not available ({type(e).__name__}: {e}); build the pinned version on a CUDA machine with "
            "`dwdp build-ops --deepgemm` (or scripts/gpu/deepgemm_build.sh and DWDP_DEEPGEMM_DIR)") from e
    return deep_gemm


_AVAILABLE: dict[tuple, bool] = {}


def available() -> bool:
    """module() loads (asked once per DWDP_DEEPGEMM_DIR value: the routed-expert op asks on every call)."""
    from .. import env  # noqa: PLC0415
    key = (env.deepgemm_dir(), "deep_gemm" in sys.modules, id(sys.modules.get("deep_gemm")))
    if key not in _AVAILABLE:
        try:
            module()
            _AVAILABLE[key] = True
        except DeepGEMMUnavailable:
            _AVAILABLE[key] = False
    return _AVAILABLE[key]


def transform_activation_scales(a_scale_Rk: torch.Tensor) -> torch.Tensor:
    """1x128 activation scales [rows, K/128] FP32 in DeepGEMM's sm_90 layout (MN-major, TMA-aligned)."""
    return module().get_mn_major_tma_aligned_tensor(a_scale_Rk.float())


def grouped_gemm_fp8_padded(a_MK: torch.Tensor, a_scale_t: torch.Tensor, w_ENK: torch.Tensor, w_scale_ENK: torch.Tensor,
                            layout: PaddedLayout, out_MN: torch.Tensor | None = None, use_psum: bool = True) -> torch.Tensor:
    """out_MN[rows of e] = (a * sa)[rows of e] @ (w[e] * sw[e])^T in BF16 on the padded rows (padding rows: garbage).

    a_MK float8_e4m3fn, K-major; a_scale_t from transform_activation_scales (of the padded scales); w_ENK
    float8_e4m3fn contiguous; w_scale_ENK FP32 [E, N/128, K/128]."""
    dg = module()
    if out_MN is None:
        out_MN = torch.empty((a_MK.shape[0], w_ENK.shape[1]), dtype=torch.bfloat16, device=a_MK.device)
    if use_psum:
        dg.m_grouped_fp8_gemm_nt_contiguous((a_MK, a_scale_t), (w_ENK, w_scale_ENK), out_MN, layout.psum_E,
                                            use_psum_layout=True)
    else:
        dg.m_grouped_fp8_gemm_nt_contiguous((a_MK, a_scale_t), (w_ENK, w_scale_ENK), out_MN, layout.m_indices_M)
    return out_MN


def grouped_gemm_fp8(a_RK: torch.Tensor, offs_E: torch.Tensor, w_ENK: torch.Tensor, a_scale_Rk: torch.Tensor,
                     w_scale_ENK: torch.Tensor, use_psum: bool = True) -> torch.Tensor:
    """Our op's contract on one [E, N, K] buffer (expert-sorted unpadded rows in, [R, N] BF16 out) through DeepGEMM:
    pad the rows and scales, transform the scales, the grouped GEMM, unpad. The layout steps cost time that a
    producer writing the padded layout directly would not spend (docs/history/benchmarks-2026-12.md section 13 times them)."""
    if a_RK.dtype != torch.float8_e4m3fn or w_ENK.dtype != torch.float8_e4m3fn:
        raise ValueError(f"grouped_gemm_fp8: a and w must be float8_e4m3fn, got {a_RK.dtype} and {w_ENK.dtype}")
    lay = padded_layout(offs_E)
    a_MK = pad_rows(a_RK, lay)
    sa_t = transform_activation_scales(pad_rows(a_scale_Rk, lay))
    return unpad_rows(grouped_gemm_fp8_padded(a_MK, sa_t, w_ENK, w_scale_ENK, lay, use_psum=use_psum), lay)
