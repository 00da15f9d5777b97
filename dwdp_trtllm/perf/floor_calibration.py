"""The engine's compute, calibrated from `dwdp bench --floor` runs: floor rates and efficiencies by size (pure).

From the FloorPoints (perf/floor_points.py) of one campaign:
- floor rate of the dense GEMM phases (attention_proj, other): TFLOP/s interpolated over (tokens per
  iteration, ISL) by inverse squared distance in log2 space (exact at a measured point, bounded by the
  measured values, no extrapolation beyond them);
- attention core floor: FLOPs / R + calls x c (R a rate, c a fixed cost per attention call and layer),
  least squares over the points, because the per-call cost, not the ISL, is what makes short sequences
  slow (a rate interpolated over ISL cannot extrapolate below the shortest measured ISL);
- routed-expert floor: FLOPs / R_dtype x (1 + k x a(m) / m), m rows per expert, a(m) = 1 - exp(-m) the
  chance that an expert has rows: every expert holding rows costs about k more rows (a tile), k shared by
  the weight dtypes and fitted with R_dtype over the points (so that BF16 measured at one size still
  extrapolates with the size dependence FP8 showed; the measured rate ratios of two sizes agree across
  dtypes within 1%);
- engine efficiency of a phase (attention, expert_gemm per dtype, other): measured / floor (the median of the
  per-iteration ratios when the run has it, else the ratio of the means), interpolated like the rates;
  "outside": iteration wall / the sum of the timed phases (the engine's time between phases).

Which points calibrate (`select`): one campaign, i.e. the directory the results files lie in (floor rates
and efficiencies are measured against one floor method on one engine, so campaigns are not mixed): the
validated file's own campaign when it is one, else the newest *complete* campaign (`complete`: recognised by
its content, not by the recency of a directory: usable points of both weight dtypes the engine runs, each at two
sizes or more; an in-progress or one-file directory is not one), latest env.date then name; with no complete
campaign the most complete one (most (dtype, size) pairs), said so in `choice`, the one line a command prints
about it; measurements marked as not
describing the work (floor_points.py) do not calibrate, and points whose ranks shared a GPU calibrate nothing
(floor rates included); the validated file's own runs never calibrate its
prediction (leave-one-out: all its runs and modes, also where a copy of them lies in another file).
"""
from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .floor_points import FloorPoint, mark_unrepeatable


def show(path: str | Path) -> str:
    """`path` relative to the working directory when it lies under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def expert_overhead(rows_per_expert, k: float):
    """1 + k x a(m) / m: the grouped GEMM's cost over its FLOPs when every expert with rows (a(m) = 1 - e^-m of
    them under uniform routing) costs k rows more; 1 + k for m -> 0."""
    m = np.maximum(np.asarray(rows_per_expert, float), 1e-9)
    return 1.0 + k * -np.expm1(-m) / m


def idw(xy: list[tuple[float, float]], values: list[float], x, y=None):
    """Inverse squared distance weighting in (log2 x, log2 y) (elementwise over array x, y; y None: x only)."""
    px = np.log2([a for a, _ in xy])
    qx = np.log2(np.maximum(np.asarray(x, float), 1.0))[..., None]
    d2 = (qx - px) ** 2
    if y is not None:
        d2 = d2 + (np.log2(np.maximum(np.asarray(y, float), 1.0))[..., None] - np.log2([b for _, b in xy])) ** 2
    w = 1.0 / np.maximum(d2, 1e-12)
    out = (w * np.asarray(values, float)).sum(-1) / w.sum(-1)
    return float(out) if out.ndim == 0 else out


#: the routed-expert floor is fitted per weight dtype: a complete campaign measures both the engine runs, each at
#: COMPLETE_SIZES sizes or more (the fit's size term k and the attention core's per-call cost need two sizes)
COMPLETE_DTYPES = ("bf16", "fp8")
COMPLETE_SIZES = 2


def _sizes(points) -> dict[str, set[int]]:
    """{weight dtype: distinct tokens per iteration} of the points that may calibrate (not shared-GPU)."""
    out: dict[str, set[int]] = {}
    for p in points:
        if not p.shared_gpu:
            out.setdefault(p.weight_dtype, set()).add(round(p.tokens))
    return out


def complete(points) -> tuple[bool, str]:
    """Whether a campaign's points calibrate the floor on their own, and what they hold or lack ("bf16 at 3 sizes,
    fp8 at 3 sizes" / "lacks bf16; fp8 at 1 size")."""
    have = _sizes(points)
    lack = [d for d in COMPLETE_DTYPES if len(have.get(d, ())) < COMPLETE_SIZES]
    held = "; ".join(f"{d} at {len(v)} size{'s' * (len(v) != 1)}" for d, v in sorted(have.items())) or "no usable run"
    return not lack, held if not lack else f"{held} (a complete campaign: {', '.join(COMPLETE_DTYPES)} at " \
                                            f"{COMPLETE_SIZES}+ sizes each)"


@dataclass(frozen=True)
class FloorCalibration:
    """The FloorPoints in use, and notes on how they were chosen."""

    points: tuple[FloorPoint, ...] = ()
    notes: tuple[str, ...] = ()
    campaign: str | None = None
    validated: tuple[FloorPoint, ...] = ()  # the validated file's own points (left out), as `select` marked them
    choice: str = ""  # one line: which campaign calibrates and why (`select`)

    def select(self, validated: str | Path | None = None, *, run_ids: Iterable[str] = (),
               measured: bool = True) -> "FloorCalibration":
        """One campaign (the validated file's when it is one, else the newest), unrepeatable phases marked
        (`measured`: the engine's measured times are used, not only the floor rates), the validated file's own
        points left out: those of the file `validated` and those whose run_id is among `run_ids` (the file's runs,
        floor_points.run_id: their copies elsewhere)."""
        if not self.points:
            return self
        camps: dict[str, list[FloorPoint]] = {}
        for p in self.points:
            camps.setdefault(p.campaign, []).append(p)
        target = str(Path(validated).resolve()) if validated else None
        ids = set(run_ids) - {""}

        def mine_(p: FloorPoint) -> bool:
            return p.source == target or p.run_id in ids

        own = [c for c, ps in camps.items() if any(p.source == target for p in ps)]
        full = {c: complete(ps) for c, ps in camps.items()}
        newest = lambda c: (max(p.date for p in camps[c]), c)  # noqa: E731 (env.date, then the name: deterministic)
        if own:
            chosen, how = own[0], "the validated file's"
        elif any(ok for ok, _ in full.values()):
            chosen, how = max((c for c in camps if full[c][0]), key=newest), "the newest complete campaign"
        else:
            chosen = max(camps, key=lambda c: (sum(map(len, _sizes(camps[c]).values())), *newest(c)))
            how = "no complete campaign: the most complete"
        pts, why = mark_unrepeatable(camps[chosen]) if measured else (camps[chosen], [])
        mine = tuple(p for p in pts if mine_(p))
        used = tuple(p for p in pts if not mine_(p) and not p.shared_gpu)
        rest = [c for c in camps if c != chosen]
        runs = len({(p.source, p.run) for p in used})  # a run measures one point per mode (e.g. auto and split)
        choice = (f"floor campaign {show(chosen)} ({how}; {full[chosen][1]}): {runs} run(s) calibrate "
                  f"({len(used)} point(s): run x mode)"
                  + (f"; {len(rest)} other campaign(s) not used, {sum(not full[c][0] for c in rest)} of them incomplete"
                     if rest else ""))
        notes = [f"floor calibration: campaign {show(chosen)} ({how}"
                 f"{'' if measured else '; floor rates only'}): " + (", ".join(p.label for p in used) or "no run left")]
        notes += [f"not used: campaign {show(c)} (one campaign calibrates" + ("" if full[c][0] else f"; {full[c][1]}") + ")"
                  for c in sorted(rest)]
        notes += [f"excluded {w}" for w in why]
        if mine:
            notes.append(f"leave-one-out: {Path(target).name} is the validated file; its own runs "
                         f"({', '.join(p.label for p in mine)}) do not calibrate")
        other = [c for c in camps if c != chosen and any(mine_(p) for p in camps[c])]
        notes += [f"leave-one-out: the validated runs are also in {show(c)}, not used" for c in other]
        return FloorCalibration(used, tuple(self.notes) + tuple(notes), chosen, mine, choice)

    # ---- rates ------------------------------------------------------------------------------------------
    def _pts(self, dtype: str | None):
        return [p for p in self.points if dtype is None or p.weight_dtype == dtype]

    def linear_points(self, linear_dtype: str | None) -> list[FloorPoint]:
        """The points whose linear layers ran in `linear_dtype` (their projections and dense GEMMs are that dtype's
        work); all points when none did or `linear_dtype` is None (`linear_measured` says which)."""
        pts = [p for p in self.points if p.linear_dtype == linear_dtype]
        return pts or list(self.points)

    def linear_measured(self, linear_dtype: str) -> bool:
        """Whether a point of the campaign ran its linear layers in `linear_dtype`."""
        return any(p.linear_dtype == linear_dtype for p in self.points)

    def rate(self, key: str, tokens, isl, linear_dtype: str | None = None):
        """Floor TFLOP/s of `key` (attention_proj, other) at (tokens, isl), from the points whose linear layers ran in
        `linear_dtype` (linear_points); None without points."""
        pts = self.linear_points(linear_dtype)
        if not pts:
            return None
        xy = [(p.tokens, p.isl) for p in pts]
        return idw(xy, [p.flops[key] / p.floor_ms[key] * 1e-9 for p in pts], tokens, isl)

    @functools.cached_property
    def experts(self) -> tuple[dict[str, float], float] | None:
        """({dtype: R TFLOP/s}, k rows per expert) of the routed-expert floor FLOPs / R x expert_overhead(m, k),
        least squares in relative error (k on a log grid, R in closed form per dtype); None without points."""
        if not self.points:
            return None
        t = np.array([p.floor_ms["expert_gemm"] for p in self.points])
        work = np.array([p.flops["expert_gemm"] for p in self.points]) * 1e-9 / t
        m = np.array([p.rows_per_expert for p in self.points])
        dts = np.array([p.weight_dtype for p in self.points])
        best = None
        for k in np.concatenate([[0.0], np.geomspace(1.0, 1e5, 1001)]):
            x = work * expert_overhead(m, k)
            rate = {str(d): float(x[dts == d] @ x[dts == d]) / float(x[dts == d].sum()) for d in set(dts)}  # min sum (x/R - 1)^2
            err = float(sum(((x[dts == d] / r - 1) ** 2).sum() for d, r in rate.items()))
            if best is None or err < best[0] - 1e-12:
                best = (err, float(k), rate)
        return best[2], best[1]

    def factor(self, phase: str, tokens, isl, dtype: str | None = None, linear_dtype: str | None = None):
        """The engine's measured / floor time of `phase` (or "outside") at (tokens, isl); 1.0 without a point.
        expert_gemm: from the points of weight dtype `dtype`; other (its floor is the dense GEMMs, its excess the
        kernels around them): from those whose linear layers ran in `linear_dtype` (linear_points); attention and
        outside: every point (attention's is the core's at long ISL). Each point's is FloorPoint.factor: the median over
        iterations of measured / floor, the mean-based one only without a median; engine_floor_2026-12-03e's medians:
        attention 1.14-1.15 / 1.10, 1.16 / 1.20, 1.08 / 1.06 with BF16 / FP8 linear layers at ISL 8K / 2K / 32K,
        other 1.14-1.18 / 1.23-1.44."""
        cand = (self._pts(dtype) if phase == "expert_gemm"
                else self.linear_points(linear_dtype) if phase == "other" else self.points)
        pts = [p for p in cand if p.factor(phase) is not None]
        if not pts:
            return 1.0
        xy = [((p.expert_tokens if phase == "expert_gemm" else p.tokens), p.isl) for p in pts]
        return idw(xy, [p.factor(phase) for p in pts], tokens, isl)

    @functools.cached_property
    def core(self) -> tuple[float, float] | None:
        """(R TFLOP/s, c ms per attention call and layer): the attention core floor is FLOPs / R + calls x c,
        least squares in relative error over the points with rebuilt batches (c >= 0, else c = 0); without
        rebuilt batches the mean rate with c = 0; None without points."""
        pts = [p for p in self.points if p.calls is not None] or list(self.points)
        if not pts:
            return None
        t = np.array([p.floor_ms["attention_core"] for p in pts])
        work = np.array([p.flops["attention_core"] for p in pts]) * 1e-9 / t  # [TFLOP/s x ms] / ms
        calls = np.array([p.calls or 0.0 for p in pts]) / t
        if len({round(c / w, 9) for c, w in zip(calls, work)}) > 1:  # two distinct calls-per-FLOP ratios at least
            inv_r, c = np.linalg.lstsq(np.stack([work, calls], -1), np.ones(len(pts)), rcond=None)[0]
            if inv_r > 0 and c >= 0:
                return 1.0 / float(inv_r), float(c)
        return float(work @ work / work.sum()), 0.0
