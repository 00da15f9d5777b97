"""One steady-state iteration of a mode's run, per rank, for the Gantt plot (pure, JSON-ready).

Which iteration, and from which start, depends on whether the mode's ranks run in lock-step:
- DEP ("wall_clock"): the ranks meet in collectives every MoE layer, so their iteration k is the same piece of
  work at the same time. The window is [min t_start, max t_end] of iteration k (the middle of rank 0's non-warm-up
  iterations that processed tokens) over all ranks, on the shared clock: it shows who waits for whom.
- every other mode ("per_rank": DWDP, reference): the ranks free-run and drift apart, so one wall-clock window
  holds several iterations of some ranks and part of one of others. Each rank shows its own middle busy
  measured iteration, shifted so it starts at 0: the panel is one iteration per rank, as the table's
  iteration times are, and the window is the longest of them.
Every phase span of a rank that overlaps its window is kept, clipped to it (a copy issued in the previous
iteration that is still running shows from 0).
"""
from __future__ import annotations

from ..engine.records import IterationRecord, RankResult

#: modes whose ranks run in lock-step (a collective per MoE layer): their iteration k shares one window
LOCK_STEP_MODES = ("dep",)


def _busy(r: RankResult) -> list[IterationRecord]:
    return [it for it in r.iterations if not it.warmup and it.num_tokens > 0 and it.phases]


def _clipped(r: RankResult, a: float, b: float) -> tuple[list, list]:
    """The rank's phase spans and iteration spans overlapping [a, b], clipped to it and shifted to start at 0."""
    rows, iters = [], []
    for it in r.iterations:
        if it.t_end < a or it.t_start > b:
            continue
        if min(it.t_end, b) > max(it.t_start, a):  # not a neighbour that only touches the window
            iters.append([max(it.t_start, a) - a, min(it.t_end, b) - a])
        for phase, layer, s, e in it.phases:
            if e >= a and s <= b:
                rows.append([phase, layer, max(s, a) - a, min(e, b) - a])
    return rows, iters


def steady_timeline(results: list[RankResult]) -> dict | None:
    """{"align": "wall_clock" | "per_rank", "iteration": {"<rank>": k}, "duration_s": D,
    "ranks": {"<rank>": [[phase, layer, start_s, end_s], ...]}, "iterations": {"<rank>": [[start_s, end_s], ...]}}
    (times from the start of the window: the shared one for "wall_clock", the rank's own for "per_rank"), or None
    when no iteration has phases."""
    if not results:
        return None
    base = min(results, key=lambda r: r.rank)
    if not _busy(base):
        return None
    ranks: dict[str, list] = {}
    iters: dict[str, list] = {}
    if base.mode in LOCK_STEP_MODES:
        busy = _busy(base)
        k = busy[len(busy) // 2].iteration
        spans = [it for r in results for it in r.iterations if it.iteration == k]
        a, b = min(it.t_start for it in spans), max(it.t_end for it in spans)
        for r in results:
            ranks[str(r.rank)], iters[str(r.rank)] = _clipped(r, a, b)
        return {"align": "wall_clock", "iteration": {str(r.rank): k for r in results}, "duration_s": b - a,
                "ranks": ranks, "iterations": iters}
    chosen: dict[str, int] = {}
    duration = 0.0
    for r in results:
        busy = _busy(r)
        if not busy:  # a rank with no measured work: an empty row
            ranks[str(r.rank)], iters[str(r.rank)] = [], []
            continue
        it = busy[len(busy) // 2]
        chosen[str(r.rank)] = it.iteration
        ranks[str(r.rank)], iters[str(r.rank)] = _clipped(r, it.t_start, it.t_end)
        duration = max(duration, it.t_end - it.t_start)
    return {"align": "per_rank", "iteration": chosen, "duration_s": duration, "ranks": ranks, "iterations": iters}
