"""Per-rank workload sampling and the cost of synchronisation under imbalance (pure, numpy).

DEP runs every MoE layer in lock-step: each rank does its own share (attention, dense parts), then
waits at the dispatch for the slowest rank, then all spend the same balanced expert + all-to-all time.
DWDP ranks never wait for each other: each runs at its own rate, so group throughput is the *sum of
per-rank rates*, while DEP's is the group's tokens over the slowest rank's time.

Legend: S samples (iterations), R ranks, K request slots per rank; isl_SRK is 0 in unused slots.
Times are per layer in microseconds; tokens per rank per iteration.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Requests each rank packs into one iteration (context phase), like the bench's WorkloadConfig."""

    isl: int  # mean input sequence length
    isl_dist: Literal["fixed", "uniform_ratio", "normal"] = "fixed"
    isl_ratio: float = 0.8  # uniform_ratio: ISL uniform in [isl_ratio*isl, isl]
    isl_cv: float = 0.0  # normal: coefficient of variation of ISL
    imbalance_cv: float = 0.0  # across-rank CV of each rank's mean ISL
    batch: int | None = 1  # requests per rank per iteration (ignored when mnt is set)
    mnt: int | None = None  # max tokens per rank per iteration: whole requests packed up to it
    samples: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [("isl", self.isl >= 1, "an integer >= 1"),
                  ("isl_dist", self.isl_dist in ("fixed", "uniform_ratio", "normal"), "fixed, uniform_ratio or normal"),
                  ("isl_ratio", 0 < self.isl_ratio <= 1, "a number in (0, 1]"),
                  ("isl_cv", self.isl_cv >= 0, "a number >= 0"),
                  ("imbalance_cv", 0 <= self.imbalance_cv < 1, "a number in [0, 1)"),
                  ("batch", self.batch is None or self.batch >= 1, "an integer >= 1"),
                  ("mnt", self.mnt is None or self.mnt >= 1, "an integer >= 1"),
                  ("samples", self.samples >= 1, "an integer >= 1")]
        for key, ok, expected in checks:
            if not ok:
                raise ValueError(f"workload {key}: expected {expected}, got {getattr(self, key)!r}")
        if self.batch is None and self.mnt is None:
            raise ValueError("workload: give batch (requests per rank) or mnt (max tokens per rank)")

    @property
    def deterministic(self) -> bool:
        return self.imbalance_cv == 0 and self.isl_dist == "fixed"


def _draw(wl: Workload, rng: np.random.Generator, mean_SR: np.ndarray, K: int) -> np.ndarray:
    shape = mean_SR.shape + (K,)
    if wl.isl_dist == "fixed":
        isl = np.broadcast_to(mean_SR[..., None], shape).copy()
    elif wl.isl_dist == "uniform_ratio":
        isl = mean_SR[..., None] * rng.uniform(wl.isl_ratio, 1.0, shape)
    else:
        isl = mean_SR[..., None] * np.maximum(0.05, 1 + wl.isl_cv * rng.standard_normal(shape))
    return np.maximum(1.0, np.rint(isl))


def requests_per_iteration(mnt: int, isl: float, isl_dist: str, isl_ratio: float) -> int:
    """Request slots sample_requests starts a rank's iteration with (it doubles them while a rank runs out before
    reaching mnt): about twice what mnt holds at the shortest ISL the distribution draws, + 2."""
    lo = {"fixed": 1.0, "uniform_ratio": isl_ratio, "normal": 0.5}[isl_dist]
    return math.ceil(2 * mnt / (lo * isl)) + 2


def sample_requests(wl: Workload, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(isl_SRK, tokens_SRK): each rank's requests in one iteration, per sample (seeded; 0 = empty slot).

    With mnt, whole requests are packed while the running sum stays <= mnt (the first always goes in);
    a request longer than mnt contributes mnt tokens (one chunk of a chunked prefill), its isl is kept so
    that its cost can be prorated (per_rank_load).
    """
    S = 1 if wl.deterministic else wl.samples
    if wl.mnt is None:
        rng = np.random.default_rng(wl.seed)
        mean_SR = wl.isl * np.maximum(0.05, 1 + wl.imbalance_cv * rng.standard_normal((S, ranks)))
        isl = _draw(wl, rng, mean_SR, wl.batch)
        return isl, isl.copy()
    K = requests_per_iteration(wl.mnt, wl.isl, wl.isl_dist, wl.isl_ratio)
    while True:  # enough slots that no rank runs out of requests before reaching mnt
        rng = np.random.default_rng(wl.seed)
        mean_SR = wl.isl * np.maximum(0.05, 1 + wl.imbalance_cv * rng.standard_normal((S, ranks)))
        isl = _draw(wl, rng, mean_SR, K)
        tok = np.minimum(isl, wl.mnt)
        keep = np.cumsum(tok, axis=-1) <= wl.mnt
        keep[..., 0] = True
        if not keep[..., -1].any() or K >= 1 << 16:
            return np.where(keep, isl, 0.0), np.where(keep, tok, 0.0)
        K *= 2


def per_rank_load(isl_SRK: np.ndarray, tokens_SRK: np.ndarray, per_request_fn) -> tuple[np.ndarray, np.ndarray]:
    """(tokens_SR, cost_SR): tokens per rank, and the sum over its requests of per_request_fn(isl)
    prorated by tokens/isl (a chunk of a long request carries its share of the request's cost)."""
    safe = np.maximum(isl_SRK, 1.0)
    cost = np.where(isl_SRK > 0, per_request_fn(safe) * (tokens_SRK / safe), 0.0)
    return tokens_SRK.sum(-1), cost.sum(-1)


@dataclass(frozen=True, slots=True)
class ImbalanceResult:
    """Per-layer times normalised to one mean iteration of the group: speedup = t_dep / t_dwdp."""

    t_dep_us: float  # mean group tokens / DEP throughput
    t_dwdp_us: float  # mean group tokens / DWDP throughput (sum of per-rank rates)
    sync_overhead: float  # fraction of DEP rank-time spent waiting for the slowest rank
    t_sync_us: float  # mean time a DEP rank waits per layer

    @property
    def speedup(self) -> float:
        return self.t_dep_us / self.t_dwdp_us


def tokens_per_s_per_gpu(tokens_per_rank, iteration_us):
    """Tokens/s per GPU: the tokens one rank processes per iteration over the iteration's time in us (the group's mean
    tokens per rank over `compare`'s normalised iteration time). The one place this number is computed: `dwdp plan`'s
    tps_per_gpu_* and validate-plan's predicted tps_per_gpu call it."""
    return tokens_per_rank / iteration_us * 1e6


def compare(tokens_SR, dep_own_us_SR, dwdp_us_SR, dep_shared_us_S=0.0) -> ImbalanceResult:
    """DEP: layer = max over ranks of own work + shared lock-step part. DWDP: each rank its own time.

    tokens_SR: tokens per rank per iteration; dep_own_us_SR: each rank's DEP work before the sync;
    dep_shared_us_S: the per-sample part all DEP ranks spend together (balanced experts + all-to-all);
    dwdp_us_SR: each rank's DWDP layer time.
    """
    tokens_SR = np.asarray(tokens_SR, float)
    own = np.asarray(dep_own_us_SR, float)
    dwdp = np.asarray(dwdp_us_SR, float)
    S, R = tokens_SR.shape
    t_dep_S = own.max(-1) + np.broadcast_to(np.asarray(dep_shared_us_S, float), (S,))
    mean_group_tokens = tokens_SR.sum() / S
    thr_dep = tokens_SR.sum() / t_dep_S.sum()
    thr_dwdp = (tokens_SR.sum(0) / dwdp.sum(0)).sum()  # each rank free-runs its own iterations
    wait_SR = own.max(-1, keepdims=True) - own
    return ImbalanceResult(t_dep_us=mean_group_tokens / thr_dep, t_dwdp_us=mean_group_tokens / thr_dwdp,
                           sync_overhead=float(wait_SR.sum() / (R * t_dep_S.sum())),
                           t_sync_us=float(wait_SR.mean()))


# ---- routing skew (expert-popularity imbalance; dwdp_trtllm/spec/routing_skew.py is the workload side) ----

#: rows per grouped-GEMM tile in the DWDP skew model: with 64 the tile-padding model gives aiconfigurator's EP1
#: fp8_block power_law/balanced ratios at DeepSeek shapes within 0.05 at 4K-16K tokens (1.29 / 1.15 / 1.08 vs
#: 1.29 / 1.15 / 1.03; shared/reference/aiconfigurator-crosscheck.md section 3); at 2K it overstates (1.54 vs 1.29)
SKEW_TILE_ROWS = 64


@dataclass(frozen=True, slots=True)
class SkewTerm:
    """What routing skew does to one MoE layer, as factors over the balanced-routing times (1.0 = no effect).

    For the planner (perf/planner.routing_skew): multiply
    - DEP's balanced routed-expert time by dep_expert_factor (the slowest EP rank sets every lock-step layer;
      the mean over MoE layers of that layer's slowest-rank tiles over the balanced per-rank tiles),
    - DEP's all-to-all time by dep_a2a_factor (the slowest rank's dispatch/combine volume: tokens it receives,
      deduplicated per rank as DeepEP / TensorRT-LLM's all-to-all do; an all-gather + reduce-scatter path moves
      every token regardless: use 1.0 there),
    - DWDP's routed-expert time by dwdp_gemm_factor (one rank computes every expert for its own tokens: the work is
      unchanged, only the grouped GEMM's tile padding over uneven groups grows).
    The *_max fields are the worst layer. Inputs: the skew spec (its source is the user's workload), tokens per
    rank per iteration, the model's experts / top-k, the EP size; model: tile padding at SKEW_TILE_ROWS rows.
    """

    label: str
    dep_expert_factor: float
    dep_expert_factor_max: float
    dep_a2a_factor: float
    dwdp_gemm_factor: float
    dwdp_gemm_factor_max: float


def _tiles(rows: np.ndarray, tile: int) -> float:
    return float(np.ceil(rows / tile).sum())


def skew_term(spec, *, num_moe_layers: int, num_experts: int, top_k: int, ep_size: int, tokens_per_rank: int,
              tile_rows: int = SKEW_TILE_ROWS, placement=None) -> SkewTerm:
    """The SkewTerm of routing_skew spec `spec` (a RoutingSkewConfig) for DEP at ep_size and DWDP, at
    tokens_per_rank tokens per rank per iteration (DEP's experts see ep_size x that many tokens' rows).

    placement: DEP's experts per EP rank (default: contiguous blocks, the engine's and TensorRT-LLM's layout)."""
    from ..spec import routing_skew as rs
    if tokens_per_rank < 1 or num_moe_layers < 1:
        raise ValueError(f"tokens_per_rank ({tokens_per_rank}) and num_moe_layers ({num_moe_layers}) must be >= 1")
    pl = placement if placement is not None else rs.contiguous_placement(num_experts, ep_size)
    table = rs.popularity_table(spec, num_moe_layers, num_experts, top_k)
    uniform = np.full(num_experts, 1.0 / num_experts)
    rows_dwdp = tokens_per_rank * top_k
    rows_dep = rows_dwdp * ep_size

    # the order in which rows left over from the proportional split go to experts of equal share: round-robin over
    # the EP ranks (each rank's first expert, then each rank's second, ...). split_counts breaks ties to the lower
    # index, which with contiguous blocks put all of a balanced split's leftover rows on the first ranks: at 1 token
    # per rank (64 rows over 256 experts) ranks 0 and 1 got 32 each, so balanced routing read 4x the tiles per rank
    # it has and every skew looked cheaper than balanced (a factor of 0.23 at power_law 1.2). Ties only: where the
    # shares differ, or the split is exact, the counts are split_counts' own.
    slot: dict[int, tuple[int, int]] = {}  # expert -> (its place in its first rank's list, that rank)
    for r, ex in enumerate(pl):
        for j, e in enumerate(ex):
            slot.setdefault(e, (j, r))
    spread = np.array(sorted(range(num_experts), key=lambda e: slot.get(e, (num_experts, e))))

    def dep_tiles_max(p: np.ndarray) -> float:
        per_expert = np.empty(num_experts, dtype=np.int64)
        per_expert[spread] = rs.split_counts(np.asarray(p)[spread], rows_dep)
        return max(_tiles(per_expert[list(ex)], tile_rows) for ex in pl)

    def a2a_max(p: np.ndarray) -> float:  # expected share of tokens a rank receives, deduplicated per rank
        share_R = rs.rank_shares(p, pl)
        return float((1.0 - (1.0 - share_R) ** top_k).max())

    dep_bal, a2a_bal = dep_tiles_max(uniform), a2a_max(uniform)
    dwdp_bal = _tiles(rs.split_counts(uniform, rows_dwdp), tile_rows)
    dep = np.array([dep_tiles_max(p) / dep_bal for p in table])
    a2a = np.array([a2a_max(p) / a2a_bal for p in table])
    dwdp = np.array([_tiles(rs.split_counts(p, rows_dwdp), tile_rows) / dwdp_bal for p in table])
    return SkewTerm(label=spec.label(), dep_expert_factor=float(dep.mean()), dep_expert_factor_max=float(dep.max()),
                    dep_a2a_factor=float(a2a.mean()), dwdp_gemm_factor=float(dwdp.mean()),
                    dwdp_gemm_factor_max=float(dwdp.max()))
