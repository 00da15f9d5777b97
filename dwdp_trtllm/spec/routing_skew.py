"""Routing skew: a workload dimension for per-layer expert popularity, and the expert-load statistics it implies.

Pure numpy (core: imports neither engine/ nor integration/). Used by the engine's router (engine/router.py),
`dwdp bench`'s expert-load report (bench/metrics.py) and the planner's skew term (perf/imbalance.py).

Popularity. popularity_E of one MoE layer is each expert's share of the layer's token-expert assignments
(sums to 1). A token picks top_k *distinct* experts, so no share can exceed 1/top_k; every source below is capped
there (water-filling: the excess goes to the uncapped experts in proportion to their share).

Sources (RoutingSkewConfig.kind):
- none: uniform 1/E (the router is not touched at all: outputs bit-exact with the unskewed engine).
- power_law: aiconfigurator's collector shape, the reference of its `power_law_1.01` / `power_law_1.2` MoE rows
  (NVIDIA/aiconfigurator collector/common_test_cases.py `_generate_power_law_distribution`, read 2026-12-03): each
  expert's load is an independent draw of a continuous power law p(x) ~ x^-alpha on [1, 0.8 * tokens] (inverse
  CDF), normalised to a share. `tokens` is the batch that shape is drawn for (the collector uses the op's own
  num_tokens; 16384, its largest row, by default). Expert order is the draw order (random).
- zipf: rank-frequency law share(i-th most popular) ~ i^-alpha, assigned to experts by a seeded permutation.
- file: measured counts (see load_counts_file).
Each MoE layer draws from its own generator, numpy default_rng([seed, moe_layer]): deterministic, and layer l's
vector does not depend on how many layers a model has.

File format: SGLang's expert-distribution recorder dump in `stat` mode (`--expert-distribution-recorder-mode stat`,
POST /start_expert_distribution_record, run traffic, POST /dump_expert_distribution_record; sgl-project/sglang
python/sglang/srt/eplb/expert_distribution.py `_StatAccumulator.dump`, commit dd780ab9, read 2026-12-03). It is a
torch.save'd dict whose key `logical_count` is an integer tensor [steps, num_layers, num_logical_experts] (older
releases: [num_layers, num_logical_experts]) of tokens routed to each logical expert, summed over EP ranks. Why this
one: it is a single file from one HTTP call, counts are per *logical* expert (EPLB replicas already folded back),
and it reads with torch.load(weights_only=True), no pickle code and no new dependency. TensorRT-LLM's statistics
(EXPERT_STATISTIC_PATH / EXPERT_STATISTIC_ITER_RANGE) are a directory of per-rank safetensors files keyed per
iteration and layer whose layout changed between releases; convert them to the JSON form below. Also read: a
.json file {"logical_count": [[...per expert...] per layer]} (same meaning, 2-D or 3-D). Dense layers have all-zero
rows (SGLang counts every model layer); MoE layers take the file's non-zero rows in order, cycling when the model
has more MoE layers than the file (a bench model with fewer layers than the served one).

Legend: E experts, R EP ranks, L MoE layers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from .schema import ConfigError, doc

SkewKind = Literal["none", "power_law", "zipf", "file"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingSkewConfig:
    """Per-layer expert popularity the engine's router steers to (workload.routing_skew)."""

    kind: SkewKind = doc("none: the model's own routing (untouched); power_law: aiconfigurator's power_law_<alpha> "
                         "shape (expert loads drawn from x^-alpha on [1, 0.8*tokens]); zipf: i-th most popular "
                         "expert's share ~ i^-alpha; file: per-layer expert token counts from `path` (SGLang "
                         "expert-distribution recorder `stat` dump, .pt, or .json with key logical_count).", "none")
    alpha: float = doc("Exponent of power_law / zipf, in [0, 4] (aiconfigurator's rows: 1.01 and 1.2; zipf 0 = "
                       "uniform).", 1.01)
    seed: int = doc("Seed of the per-layer draws (layer l uses default_rng([seed, l])), in [0, 2**63).", 0)
    tokens: int = doc("power_law: tokens the loads are drawn for (upper end 0.8*tokens, as aiconfigurator's "
                      "collector), in [1, 2**24].", 16384)
    path: str = doc("file: per-layer expert token counts, relative to the working directory. Format: SGLang's "
                    "expert-distribution recorder dump in `stat` mode (.pt; key logical_count, [steps,] layers x "
                    "experts), or .json {\"logical_count\": [[count per expert] per layer]}. SGLang's, because one "
                    "HTTP call (/dump_expert_distribution_record) writes it, its counts are per logical expert (EPLB "
                    "replicas folded back) and it loads with torch.load(weights_only=True); TensorRT-LLM's "
                    "EXPERT_STATISTIC_PATH dump (per-rank safetensors per iteration) converts to the .json form. "
                    "All-zero (dense) layers are skipped; MoE layers take the file's rows in order, cycling.", "")

    def __post_init__(self) -> None:
        checks = [("kind", self.kind in ("none", "power_law", "zipf", "file"), "one of none, power_law, zipf, file"),
                  ("alpha", 0 <= self.alpha <= 4, "a number in [0, 4]"),
                  ("seed", 0 <= self.seed < 2 ** 63, "an integer in [0, 2**63)"),
                  ("tokens", 1 <= self.tokens <= 1 << 24, "an integer in [1, 2**24]"),
                  ("path", (self.kind == "file") == bool(self.path),
                   "a counts file path when kind is file (and only then)")]
        for key, ok, expected in checks:
            if not ok:
                raise ConfigError(None, key, f"expected {expected}, got {getattr(self, key)!r}")

    @property
    def off(self) -> bool:
        return self.kind == "none"

    def label(self) -> str:
        """Short name for reports: none, power_law_1.01 (seed 0), zipf_1.2 (seed 3), file:<name>."""
        if self.kind == "none":
            return "none"
        if self.kind == "file":
            return f"file:{Path(self.path).name}"
        return f"{self.kind}_{self.alpha:g} (seed {self.seed})"


def cap_shares(share_E: np.ndarray, cap: float) -> np.ndarray:
    """share_E normalised to sum 1 with no entry above cap (water-filling; needs cap * E >= 1)."""
    p = np.asarray(share_E, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or (p < 0).any() or not np.isfinite(p).all() or p.sum() <= 0:
        raise ValueError(f"shares must be a non-empty vector of finite values >= 0 with a positive sum, got {p!r}")
    if cap * p.size < 1 - 1e-12:
        raise ValueError(f"cap {cap} * {p.size} experts < 1: no distribution fits")
    p = p / p.sum()
    for _ in range(p.size):
        over = p > cap
        if not over.any():
            break
        excess = float((p[over] - cap).sum())
        p[over] = cap
        free = ~over & (p < cap)
        if not free.any():
            break
        base = p[free].sum()
        p[free] += excess * (p[free] / base if base > 0 else 1.0 / free.sum())
    return np.minimum(p, cap) / np.minimum(p, cap).sum()


def _power_law_draw(rng: np.random.Generator, n: int, alpha: float, tokens: int) -> np.ndarray:
    lo, hi = 1.0, max(1.0, 0.8 * tokens)
    u = rng.random(n)
    if hi <= lo:
        return np.ones(n)
    if abs(alpha - 1.0) < 1e-9:  # the inverse CDF's limit: log-uniform
        return lo * (hi / lo) ** u
    a = 1.0 - alpha
    return ((hi ** a - lo ** a) * u + lo ** a) ** (1.0 / a)


def layer_rng(seed: int, moe_layer: int) -> np.random.Generator:
    return np.random.default_rng([seed, moe_layer])


def popularity(spec: RoutingSkewConfig, moe_layer: int, num_experts: int, top_k: int,
               counts_LE: np.ndarray | None = None) -> np.ndarray:
    """popularity_E of MoE layer `moe_layer` (0-based among MoE layers): shares summing to 1, each <= 1/top_k.

    kind file needs counts_LE (load_counts_file's MoE rows); row moe_layer % L is used."""
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k {top_k} must be in [1, num_experts={num_experts}]")
    if spec.kind == "none":
        return np.full(num_experts, 1.0 / num_experts)
    if spec.kind == "file":
        if counts_LE is None:
            raise ValueError("routing_skew kind file: pass the counts (load_counts_file)")
        if counts_LE.shape[1] != num_experts:
            raise ValueError(f"routing_skew.path {spec.path}: {counts_LE.shape[1]} experts per layer, the model has "
                             f"{num_experts}")
        raw = counts_LE[moe_layer % counts_LE.shape[0]]
    else:
        rng = layer_rng(spec.seed, moe_layer)
        if spec.kind == "power_law":
            raw = _power_law_draw(rng, num_experts, spec.alpha, spec.tokens)
        else:
            raw = np.empty(num_experts)
            raw[rng.permutation(num_experts)] = np.arange(1, num_experts + 1, dtype=np.float64) ** -spec.alpha
    return cap_shares(raw, 1.0 / top_k)


def popularity_table(spec: RoutingSkewConfig, num_moe_layers: int, num_experts: int, top_k: int,
                     counts_LE: np.ndarray | None = None) -> np.ndarray:
    """popularity_LE for every MoE layer. Kind file: counts_LE, the file's counts a caller read once
    (load_counts_file); without them spec.path is read here."""
    counts = counts_LE if counts_LE is not None or spec.kind != "file" else load_counts_file(spec.path, num_experts)
    return np.stack([popularity(spec, l, num_experts, top_k, counts) for l in range(num_moe_layers)])


def load_counts_file(path: str, num_experts: int | None = None, *, key: str = "routing_skew.path") -> np.ndarray:
    """counts_LE (float64) of the MoE layers in an expert-distribution file (module doc: format).

    Raises ConfigError naming `key`, the counts file and what was expected (the config file, if any, is the
    caller's: from_dict adds it)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(None, key, f"expected an existing counts file, got {path!r}")
    try:
        if p.suffix == ".json":
            data = json.loads(p.read_text())
        else:
            import torch
            data = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any parse failure is a bad input file
        raise ConfigError(None, key, f"{p}: expected a SGLang expert-distribution dump (.pt) or JSON, could not read it: "
                                       f"{type(e).__name__}: {e}") from None
    if not isinstance(data, dict) or "logical_count" not in data:
        raise ConfigError(None, key, f"{p}: expected a mapping with key 'logical_count' ([steps,] layers, experts)")
    raw = data["logical_count"]
    arr = np.asarray(raw.numpy() if hasattr(raw, "numpy") else raw, dtype=np.float64)
    if arr.ndim == 3:
        arr = arr.sum(0)
    if arr.ndim != 2 or arr.shape[1] < 1 or not np.isfinite(arr).all() or (arr < 0).any():
        raise ConfigError(None, key, f"{p}: logical_count: expected counts >= 0 of shape [layers, experts] or [steps, "
                                       f"layers, experts], got shape {arr.shape}")
    if num_experts is not None and arr.shape[1] != num_experts:
        raise ConfigError(None, key, f"{p}: logical_count has {arr.shape[1]} experts per layer, the model {num_experts}")
    moe = arr[arr.sum(1) > 0]
    if moe.shape[0] == 0:
        raise ConfigError(None, key, f"{p}: logical_count: every layer's counts are zero (no MoE traffic recorded)")
    return moe


def contiguous_placement(num_experts: int, ep_size: int) -> list[list[int]]:
    """DEP's layout: rank r holds experts [E*r//R, E*(r+1)//R) (engine/dep.py expert_range, near-equal blocks)."""
    if not 1 <= ep_size <= num_experts:
        raise ValueError(f"ep_size {ep_size} must be in [1, num_experts={num_experts}]")
    return [list(range(num_experts * r // ep_size, num_experts * (r + 1) // ep_size)) for r in range(ep_size)]


def rank_shares(popularity_E: np.ndarray, placement: Sequence[Sequence[int]]) -> np.ndarray:
    """share_R: each rank's share of the layer's expert work; an expert held by several ranks splits evenly."""
    p = np.asarray(popularity_E, dtype=np.float64)
    holders = np.zeros(p.size)
    for experts in placement:
        holders[list(experts)] += 1
    if (holders == 0).any():
        raise ValueError(f"placement leaves experts {np.flatnonzero(holders == 0).tolist()} on no rank")
    return np.array([float((p[list(ex)] / holders[list(ex)]).sum()) for ex in placement])


def max_over_mean(load_R: np.ndarray) -> float:
    """The straggler factor of one layer: the busiest rank's load over the mean rank load (1.0 = balanced)."""
    x = np.asarray(load_R, dtype=np.float64)
    m = float(x.mean())
    return float(x.max()) / m if m > 0 else 1.0


def expected_max_over_mean(popularity_E: np.ndarray, ep_size: int,
                           placement: Sequence[Sequence[int]] | None = None) -> float:
    """Expected busiest-rank / mean expert load of one layer at EP size ep_size (many-token limit: sampling noise of
    a finite batch adds to it; bench/metrics measures that). placement defaults to DEP's contiguous blocks."""
    pl = placement if placement is not None else contiguous_placement(len(popularity_E), ep_size)
    return max_over_mean(rank_shares(popularity_E, pl))


def split_counts(shares: np.ndarray, total: int) -> np.ndarray:
    """Integers summing to total in proportion to shares (largest remainder; ties to the lower index)."""
    s = np.asarray(shares, dtype=np.float64)
    exact = s / s.sum() * total
    base = np.floor(exact).astype(np.int64)
    rest = int(total - base.sum())
    if rest > 0:
        order = np.argsort(-(exact - base), kind="stable")
        base[order[:rest]] += 1
    return base


def rank_token_split(popularity_E: np.ndarray, tokens: int, top_k: int, ep_size: int,
                     placement: Sequence[Sequence[int]] | None = None) -> np.ndarray:
    """tokens_R: token-expert rows each EP rank computes for `tokens` tokens (sums to tokens * top_k)."""
    pl = placement if placement is not None else contiguous_placement(len(popularity_E), ep_size)
    return split_counts(rank_shares(popularity_E, pl), tokens * top_k)


def counts_per_rank(counts_E: np.ndarray, placement: Sequence[Sequence[int]]) -> np.ndarray:
    """Measured rows per rank from measured per-expert counts (replicated experts split evenly)."""
    return rank_shares(np.asarray(counts_E, dtype=np.float64), placement)


def dep_expert_skew(spec: RoutingSkewConfig, num_moe_layers: int, num_experts: int, top_k: int, ep_size: int,
                    placement: Sequence[Sequence[int]] | None = None) -> np.ndarray:
    """max/mean per MoE layer (shape [L]) of the expected EP-rank expert load: DEP's straggler factor per layer."""
    table = popularity_table(spec, num_moe_layers, num_experts, top_k)
    return np.array([expected_max_over_mean(p, ep_size, placement) for p in table])
