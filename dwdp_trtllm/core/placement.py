"""Expert placement over a DWDP group: who holds which experts, who fetches what from whom (pure).

No torch.distributed, no CUDA: `(config, num_experts) -> ExpertPlacement`, a frozen value that every
rank computes identically (no gather needed, like SGLang's compute_peer_ranges).

Two placements:
- upstream: dwdp_rank r holds [r*stride, r*stride + size) (TensorRT-LLM's num_prefetch_experts /
  num_experts_per_worker; overlap when size > stride).
- derived: any G; experts split into G near-equal contiguous blocks, each rank additionally holds the
  next `redundant_experts` experts (wrapping), so replicated experts can be served by several owners.

Source choice for a fetched expert (per destination): lowest_rank (upstream) or balanced, which
starts from lowest_rank and re-routes (destination, expert) pulls along cost-reducing paths until the
largest per-source load is minimal, so balanced is never worse than lowest_rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..spec.config import DwdpConfig


@dataclass(frozen=True)
class ExpertPlacement:
    """Placement of `num_experts` routed experts over `dwdp_size` ranks (identical for every MoE layer).

    local_experts[r]: sorted expert ids held by dwdp_rank r.
    sources[r]: for each expert r fetches (sorted by expert id), the dwdp_rank it pulls it from.
    """

    num_experts: int
    dwdp_size: int
    local_experts: tuple[tuple[int, ...], ...]
    sources: tuple[tuple[tuple[int, int], ...], ...]  # per rank: ((expert, source_rank), ...)
    policy: str

    @cached_property
    def owners(self) -> tuple[tuple[int, ...], ...]:
        """owners[e]: sorted dwdp_ranks that hold expert e."""
        return tuple(map(tuple, _owners(list(self.local_experts), self.num_experts)))

    def fetch_experts(self, rank: int) -> tuple[int, ...]:
        """Experts rank `rank` must pull for every MoE layer, sorted."""
        return tuple(e for e, _ in self.sources[rank])

    def source_load(self) -> list[int]:
        """Experts each rank serves to all destinations of the group (one layer)."""
        load = [0] * self.dwdp_size
        for per_rank in self.sources:
            for _, s in per_rank:
                load[s] += 1
        return load

    def max_source_load(self) -> int:
        return max(self.source_load(), default=0)

    def expert_location(self, rank: int) -> tuple[tuple[int, int], ...]:
        """For each expert e: (0, index in local_experts[rank]) or (1, index in the prefetch slot)."""
        local = {e: i for i, e in enumerate(self.local_experts[rank])}
        fetched = {e: i for i, e in enumerate(self.fetch_experts(rank))}
        return tuple((0, local[e]) if e in local else (1, fetched[e]) for e in range(self.num_experts))


def _upstream_ranges(num_experts: int, cfg: DwdpConfig) -> list[tuple[int, ...]]:
    size, stride = cfg.num_experts_per_worker, cfg.num_prefetch_experts
    return [tuple(range(r * stride, min(r * stride + size, num_experts))) for r in range(cfg.dwdp_size)]


def _derived_ranges(num_experts: int, group: int, redundant: int) -> list[tuple[int, ...]]:
    base, rem = divmod(num_experts, group)
    out, start = [], 0
    for r in range(group):
        n = base + (1 if r < rem else 0)
        held = {(start + i) % num_experts for i in range(min(n + redundant, num_experts))}
        out.append(tuple(sorted(held)))
        start += n
    return out


def _owners(local: list[tuple[int, ...]], num_experts: int) -> list[list[int]]:
    owners: list[list[int]] = [[] for _ in range(num_experts)]
    for r, experts in enumerate(local):
        for e in experts:
            owners[e].append(r)
    return owners


def _lowest_rank_sources(local: list[tuple[int, ...]], num_experts: int) -> list[dict[int, int]]:
    owners = _owners(local, num_experts)
    return [{e: owners[e][0] for e in range(num_experts) if e not in held_set}
            for held_set in map(set, local)]


def _balance(sources: list[dict[int, int]], local: list[tuple[int, ...]], num_experts: int) -> list[dict[int, int]]:
    """Minimise the largest per-source load by shifting pulls along cost-reducing paths.

    A pull (dst, e) served by s may move to any other owner of e except dst. A path s0 -> s1 -> ... -> sk
    of such moves lowers load[s0] by one and raises load[sk] by one. While the most-loaded source s0
    (lowest rank on ties) has a path to some sk with load[sk] <= load[s0] - 2, apply it. When it has
    none, every source reachable from s0 carries >= max - 1 and the pulls they serve cannot leave that
    set, so no assignment has a smaller max: the result is optimal, never worse than lowest_rank, and
    deterministic (every rank computes the same).
    """
    group = len(local)
    owners = _owners(local, num_experts)
    # pulls currently served by each source, insertion-ordered (dict as ordered set) for determinism
    by_src: list[dict[tuple[int, int], None]] = [{} for _ in range(group)]
    for dst, per in enumerate(sources):
        for e, s in per.items():
            by_src[s][(dst, e)] = None

    def find_path(start: int) -> list[tuple[int, int, int, int]] | None:
        """BFS from `start`: moves (dst, expert, old_source, new_source), ending at a source with load <= start's - 2."""
        prev: dict[int, tuple[int, int, int] | None] = {start: None}
        frontier = [start]
        while frontier:
            nxt = []
            for s in frontier:
                for dst, e in by_src[s]:
                    for o in owners[e]:
                        if o == dst or o in prev:
                            continue
                        prev[o] = (dst, e, s)
                        if len(by_src[o]) <= len(by_src[start]) - 2:
                            path, node = [], o
                            while prev[node] is not None:
                                d, ex, frm = prev[node]  # type: ignore[misc]
                                path.append((d, ex, frm, node))
                                node = frm
                            return path
                        nxt.append(o)
                    if len(prev) == group:  # every source reached, none light enough
                        return None
            frontier = nxt
        return None

    while True:
        hot = min(range(group), key=lambda r: (-len(by_src[r]), r))
        path = find_path(hot)
        if path is None:  # the sources reachable from `hot` are all >= max - 1: the max is optimal
            break
        for dst, e, old, new in path:
            sources[dst][e] = new
            del by_src[old][(dst, e)]
            by_src[new][(dst, e)] = None
    return sources


def make_placement(cfg: DwdpConfig, num_experts: int) -> ExpertPlacement:
    """Placement for a validated config (call cfg.validate_for(num_experts) first for user input)."""
    if num_experts < 1:
        raise ValueError(f"num_experts must be >= 1, got {num_experts}")
    if cfg.upstream_placement:
        local = _upstream_ranges(num_experts, cfg)
    else:
        local = _derived_ranges(num_experts, cfg.dwdp_size, cfg.redundant_experts)
    covered = set().union(*map(set, local))
    if len(covered) != num_experts:
        missing = sorted(set(range(num_experts)) - covered)
        raise ValueError(f"placement leaves experts {missing[:8]}{'...' if len(missing) > 8 else ''} unowned")
    sources = _lowest_rank_sources(local, num_experts)
    if cfg.source_policy == "balanced":
        sources = _balance(sources, local, num_experts)
    return ExpertPlacement(
        num_experts=num_experts, dwdp_size=cfg.dwdp_size, local_experts=tuple(local),
        sources=tuple(tuple(sorted(per.items())) for per in sources), policy=cfg.source_policy)


def compact_ranges(ids: tuple[int, ...] | list[int]) -> str:
    """Sorted ids as inclusive ranges: (0, 1, 2, 5, 7, 8) -> '0-2,5,7-8'; empty -> '-'."""
    ids = sorted(ids)
    if not ids:
        return "-"
    parts, start, prev = [], ids[0], ids[0]
    for e in ids[1:] + [None]:  # type: ignore[operator]
        if e is not None and e == prev + 1:
            prev = e
            continue
        parts.append(f"{start}-{prev}" if prev > start else f"{start}")
        if e is not None:
            start = prev = e
    return ",".join(parts)


def group_of(rank: int, dwdp_size: int) -> tuple[int, int]:
    """(group index, dwdp_rank) of a global rank; groups are consecutive blocks of dwdp_size ranks."""
    return divmod(rank, dwdp_size)
