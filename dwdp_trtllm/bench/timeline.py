"""One steady-state time window of a mode's run, per rank, for the Gantt plot (pure, JSON-ready).

The window is the span of one iteration index k (the middle of the non-warm-up iterations that
processed tokens on rank 0) over all ranks: [min t_start of iteration k, max t_end of iteration k].
Every phase span of every rank that overlaps the window is kept, clipped to it and shifted so the
window starts at 0. In DEP the ranks' iteration k are aligned by the collectives, so the window shows
who waits; in DWDP ranks drift apart, and the window shows each rank's own progress over the same
wall-clock interval.
"""
from __future__ import annotations

from ..engine.records import RankResult


def steady_timeline(results: list[RankResult]) -> dict | None:
    """{"iteration": k, "duration_s": D, "ranks": {"<rank>": [[phase, layer, start_s, end_s], ...]},
    "iterations": {"<rank>": [[start_s, end_s], ...]}} or None when no iteration has phases."""
    if not results:
        return None
    base = min(results, key=lambda r: r.rank)
    busy = [it.iteration for it in base.iterations if not it.warmup and it.num_tokens > 0 and it.phases]
    if not busy:
        return None
    k = busy[len(busy) // 2]
    spans = [it for r in results for it in r.iterations if it.iteration == k]
    a, b = min(it.t_start for it in spans), max(it.t_end for it in spans)
    ranks: dict[str, list] = {}
    iters: dict[str, list] = {}
    for r in results:
        rows = []
        for it in r.iterations:
            if it.t_end < a or it.t_start > b:
                continue
            iters.setdefault(str(r.rank), []).append([max(it.t_start, a) - a, min(it.t_end, b) - a])
            for phase, layer, s, e in it.phases:
                if e >= a and s <= b:
                    rows.append([phase, layer, max(s, a) - a, min(e, b) - a])
        ranks[str(r.rank)] = rows
    return {"iteration": k, "duration_s": b - a, "ranks": ranks, "iterations": iters}
