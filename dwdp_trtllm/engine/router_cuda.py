"""DeepSeek-V3's grouped sigmoid top-k selection on CUDA: one hand-written Triton kernel.

Why: the eager chain (router.select_grouped_sigmoid: bias add, a top-2 per group, the sum, a top-k over groups,
a scatter into a group mask, the expand, masked_fill, the top-k over experts, the gather of the weights, the
normalisation and the scale) is about a dozen kernels over [T, E] float32 per MoE layer; on the H200 at 16K
tokens the top-k and sort kernels alone took about 0.7 ms per MoE layer (profile of 2026-12-03,
docs/history/benchmarks-2026-12.md section 7b). Here one program owns BLOCK_T tokens and does the whole selection in registers.

Semantics (the reference beside it is router.select_grouped_sigmoid, which the tests compare against):
- choice = scores + bias (float32, the same IEEE adds as eager);
- a group's score is the sum of its two largest choices (one add of two values: order-free, so bit-equal);
- the topk_group groups with the largest scores are kept; within them the top_k largest choices are taken
  one at a time by argmax (descending, ties to the lower index, as torch.topk(sorted=True) orders them up to
  ties);
- weights are the unbiased scores of the chosen experts, summed in k order for the normalisation
  (w / (sum + 1e-20), then times routed_scaling_factor): equal to eager up to the order of that 8-term sum.
The sigmoid stays a torch op (select_grouped_sigmoid computes `scores`), so the scores are eager's bits.

Contract: grouped_topk_cuda(scores_TE float32, bias_E float32 | None, n_group, topk_group, top_k, normalise,
scale) -> (ids_TK int64, weights_TK float32). E a power of two, E / n_group a power of two (checked by
`supported`), scores contiguous on one CUDA device. No host sync.
"""
from __future__ import annotations

import functools

import torch


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["T", "scale"])  # T varies per iteration: no variant compiled mid-run
    def grouped_topk_kernel(scores_ptr, bias_ptr, ids_ptr, w_ptr, T, scale,
                            E: tl.constexpr, G: tl.constexpr, TOPK_GROUP: tl.constexpr, K: tl.constexpr,
                            KP: tl.constexpr, HAS_BIAS: tl.constexpr, NORMALISE: tl.constexpr, BLOCK_T: tl.constexpr):
        PG: tl.constexpr = E // G
        t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        tmask = t < T
        e = tl.arange(0, E)
        rows = t.to(tl.int64)[:, None] * E + e[None, :]
        scores = tl.load(scores_ptr + rows, mask=tmask[:, None], other=0.0)
        choice = scores
        if HAS_BIAS:
            choice = scores + tl.load(bias_ptr + e)[None, :]
        # group score: the sum of the group's two largest choices
        grouped = tl.reshape(choice, (BLOCK_T, G, PG))
        j = tl.arange(0, PG)[None, None, :]
        first = tl.argmax(grouped, axis=2)
        top1 = tl.max(grouped, axis=2)
        top2 = tl.max(tl.where(j == first[:, :, None], float("-inf"), grouped), axis=2)
        group_score = top1 + top2 if PG > 1 else top1
        # keep the topk_group best groups
        g = tl.arange(0, G)[None, :]
        keep = tl.zeros((BLOCK_T, G), dtype=tl.int32)
        for _ in tl.static_range(TOPK_GROUP):
            best = tl.argmax(group_score, axis=1)
            hit = g == best[:, None]
            keep = tl.where(hit, 1, keep)
            group_score = tl.where(hit, float("-inf"), group_score)
        keep_e = tl.reshape(tl.broadcast_to(keep[:, :, None], (BLOCK_T, G, PG)), (BLOCK_T, E))
        masked = tl.where(keep_e != 0, choice, float("-inf"))
        # top_k experts among the kept groups, largest first; weights are the unbiased scores
        kk = tl.arange(0, KP)[None, :]
        ids = tl.zeros((BLOCK_T, KP), dtype=tl.int64)
        w = tl.zeros((BLOCK_T, KP), dtype=tl.float32)
        total = tl.zeros((BLOCK_T,), dtype=tl.float32)
        for k in tl.static_range(K):
            best = tl.argmax(masked, axis=1)
            hit = e[None, :] == best[:, None]
            val = tl.sum(tl.where(hit, scores, 0.0), axis=1)
            masked = tl.where(hit, float("-inf"), masked)
            ids = tl.where(kk == k, best.to(tl.int64)[:, None], ids)
            w = tl.where(kk == k, val[:, None], w)
            total += val
        if NORMALISE:
            w = w / (total[:, None] + 1e-20)
        w = w * scale
        out = t.to(tl.int64)[:, None] * K + kk
        omask = tmask[:, None] & (kk < K)
        tl.store(ids_ptr + out, ids, mask=omask)
        tl.store(w_ptr + out, w, mask=omask)

    return grouped_topk_kernel


#: tokens per program: a [16, 256] float32 tile is 16 KiB of registers across 4 warps
BLOCK_T = 16


def _pow2(n: int) -> bool:
    return n > 0 and not n & (n - 1)


def supported(E: int, n_group: int, topk_group: int, top_k: int) -> bool:
    """Shapes the kernel handles: E and E / n_group powers of two, E <= 1024, the selections within range."""
    return (_pow2(E) and E <= 1024 and n_group > 0 and E % n_group == 0 and _pow2(E // n_group)
            and 0 < topk_group <= n_group and 0 < top_k <= topk_group * (E // n_group))


def grouped_topk_cuda(scores_TE: torch.Tensor, bias_E: torch.Tensor | None, n_group: int, topk_group: int,
                      top_k: int, normalise: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    T, E = scores_TE.shape
    if not supported(E, n_group, topk_group, top_k):
        raise ValueError(f"grouped_topk_cuda: unsupported E={E} n_group={n_group} topk_group={topk_group} top_k={top_k}")
    scores_TE = scores_TE.float().contiguous()
    ids_TK = torch.empty(T, top_k, device=scores_TE.device, dtype=torch.int64)
    w_TK = torch.empty(T, top_k, device=scores_TE.device, dtype=torch.float32)
    if T == 0:
        return ids_TK, w_TK
    import triton

    bias = scores_TE if bias_E is None else bias_E.float().contiguous()  # unread without a bias
    _kernel()[(-(-T // BLOCK_T),)](scores_TE, bias, ids_TK, w_TK, T, float(scale), E=E, G=n_group,
                                   TOPK_GROUP=topk_group, K=top_k, KP=triton.next_power_of_2(top_k),
                                   HAS_BIAS=bias_E is not None, NORMALISE=bool(normalise), BLOCK_T=BLOCK_T,
                                   num_warps=4)
    return ids_TK, w_TK
