"""The recommendation: DWDP, DEP or marginal, read from the predicted range, never from its optimistic end (pure).

Per ISL first (row_verdict, PlanRow.verdict): "DWDP" when the low end, every uncertain input at DWDP's worse end,
is above 1; "DEP" when the high end is below 1; else "marginal"; memory overrides the range: "DEP" where DWDP's
ranks do not fit and DEP's do, "DWDP" where only DWDP's fit, "nothing fits" where neither does.

A setup is chosen among those whose DWDP ranks fit at some ISL: the one fitting the most ISLs, then by nominal
gains (geometric mean over its fitting ISLs of max(speedup, 1): DEP stays available where DWDP loses). It is
recommended for the ISLs where it fits, and the ISLs (or the MNT) where it does not are named with what fits there.
G=1 (plain data parallel: every expert on every rank) is a candidate like any other: where its ranks fit at every ISL
and its throughput per GPU is within DP_TIE of the best DWDP setup's, it is recommended ("DP": ties go to it).
Overall, from its per-ISL verdicts:
- "DWDP" at the ISLs whose verdict is DWDP (the others named: DEP stays available there);
- "DEP" when every ISL says DEP;
- else "marginal": the reason names DEP at the ISLs whose whole range is below 1 and "marginal (depends on X;
  measure with ...)" at those whose range straddles 1, X the input whose worse end alone moves it most.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..byte_units import fmt_bytes
from ..deploy.memory import GB, MAX_DWDP_SIZE, gpu_count_text, parts_text, smallest_line
from .inputs import is_measured
from .uncertainty import SETTLE, peer_evidence


def more_redundant_experts(spec, group: int, redundant: int, headroom_bytes: float) -> int:
    """How many redundant experts per rank beyond `redundant` fit in `headroom_bytes`, priced by memory.rank_memory (the
    one model of per-rank bytes: the worst DWDP rank holds each added expert in every MoE layer and pulls one fewer
    into its prefetch slots); at most what the placement allows (every expert on every rank)."""
    from ..spec.config import DwdpConfig
    from ..deploy.memory import rank_memory
    from ..spec.schema import ConfigError

    def total(r: int) -> int:  # activations and the KV floor do not depend on r: priced at 0 tokens
        cfg = DwdpConfig(dwdp_size=group, redundant_experts=r, source_policy=spec.source_policy)  # type: ignore[arg-type]
        cfg.validate_for(spec.model.num_experts, prefix="")
        return rank_memory(spec.model, "dwdp", weight_dtype=spec.weight_dtype, max_num_tokens=0, dwdp=cfg).total

    base, extra = total(redundant), 0
    for r in range(redundant + 1, spec.model.num_experts + 1):
        try:
            grown = total(r) - base
        except ConfigError:  # more experts per rank than the model has
            break
        if grown > headroom_bytes:
            break
        extra = r - redundant
    return extra


@dataclass(frozen=True)
class Recommendation:
    use_dwdp: bool
    dwdp_size: int | None
    redundant_experts: int | None
    slice_bytes: int | None
    mean_speedup: float | None  # geometric mean over the ISLs of the chosen (or best) setup
    reason: str
    notes: tuple[str, ...] = ()
    verdict: str = "DEP"  # DWDP | DEP | marginal | nothing fits
    speedup_range: tuple = ()  # (geomean low, geomean high) of the chosen setup
    depends_on: str = ""
    by_isl: tuple = ()  # ((isl, verdict), ...) of the chosen setup, every ISL (row_verdict)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "by_isl": {str(i): v for i, v in self.by_isl}, "use_dwdp": self.use_dwdp,
                "dwdp_size": self.dwdp_size,
                "redundant_experts": self.redundant_experts, "slice_bytes": self.slice_bytes,
                "mean_speedup": None if self.mean_speedup is None else round(self.mean_speedup, 4),
                "speedup_range": [round(x, 4) for x in self.speedup_range], "depends_on": self.depends_on,
                "reason": self.reason, "notes": list(self.notes)}


def fmt_slice(n: int) -> str:
    """A copy slice size as a user reads it: 'unsliced' (0), else MiB, the unit slice sizes are given in
    (byte_units.fmt_bytes: '2 MiB', '0.5 MiB')."""
    return "unsliced" if n == 0 else fmt_bytes(n, "MiB", digits=None)


def _geomean(xs) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def row_verdict(s_lo: float, s_hi: float, fits: bool, dep_fits: bool) -> str:
    """One row's verdict: from the range (DWDP: low end above 1; DEP: high end below 1; else marginal), unless
    memory decides: DEP where only DEP's ranks fit, DWDP where only DWDP's fit, "nothing fits" where neither."""
    if not fits:
        return "DEP" if dep_fits else "nothing fits"
    if not dep_fits:
        return "DWDP"
    return "DWDP" if s_lo > 1.0 else ("DEP" if s_hi < 1.0 else "marginal")


def isl_set(isls, all_isls) -> str:
    """'ISL 4096', 'ISL <= 8192' (the shortest ones), 'ISL >= 16384' (the longest), 'ISL 4096-8192' (a run of the
    planned ones) or 'ISL 1024, 8192'."""
    got, every = sorted(set(isls)), sorted(set(all_isls))
    n = len(got)
    if n == 1 or n == len(every):
        return "ISL " + (str(got[0]) if n == 1 else f"{got[0]}-{got[-1]}")
    if got == every[:n]:
        return f"ISL <= {got[-1]}"
    if got == every[-n:]:
        return f"ISL >= {got[0]}"
    i = every.index(got[0]) if got[0] in every else -1
    if i >= 0 and every[i:i + n] == got:
        return f"ISL {got[0]}-{got[-1]}"
    return "ISL " + ", ".join(str(x) for x in got)


def _where(spec, rows) -> str:
    """Where rows lie: 'at MNT 16384' (memory is priced at the MNT: every ISL alike), else 'at ISL ...'."""
    return f"at MNT {spec.mnt}" if spec.mnt else "at " + isl_set([r.isl for r in rows], spec.isls)


def _ranges(rows) -> str:
    return ", ".join(f"{r.speedup_low:.2f}-{r.speedup_high:.2f}x" for r in rows)


def _counts(lo, hi) -> str:
    """memory.smallest_line: the smallest GPU count per mode that fits, at the lightest row and (where it differs) the
    heaviest one."""
    def one(attr):
        a, b = getattr(lo, attr), getattr(hi, attr)
        return gpu_count_text(a) if a == b else f"{gpu_count_text(a)} at ISL {lo.isl}, {gpu_count_text(b)} at ISL {hi.isl}"
    return smallest_line(one("smallest_fitting_dwdp_size"), one("smallest_fitting_dep_size"))


def _misfit(spec, g: int, rows) -> str:
    """What to do where DWDP{g}'s ranks do not fit: DEP{g} where it fits, else nothing fits (smallest counts)."""
    budget = spec.memory_budget_gb
    lo, hi = min(rows, key=lambda r: r.memory_per_rank_gb), max(rows, key=lambda r: r.memory_per_rank_gb)
    need = (f"{lo.memory_per_rank_gb:.1f} GB" if lo is hi or spec.mnt else
            f"{lo.memory_per_rank_gb:.1f}-{hi.memory_per_rank_gb:.1f} GB")
    out = [f"DWDP{g} does not fit {_where(spec, rows)} ({need} per rank > {budget:.1f} GB)"]
    dep = [r for r in rows if r.dep_fits]
    none = [r for r in rows if not r.dep_fits]
    if dep:
        out.append(f"DEP{g} there ({max(r.memory_dep_gb for r in dep):.1f} GB)" if not none else
                   f"DEP{g} {_where(spec, dep)}")
    if none:
        n_lo, n_hi = min(none, key=lambda r: r.memory_dep_gb), max(none, key=lambda r: r.memory_dep_gb)
        out.append(f"nothing fits {g} GPUs {_where(spec, none)} (DEP{g} {n_hi.memory_dep_gb:.1f} GB); {_counts(n_lo, n_hi)}")
    return ": ".join(out[:2]) + ("; " + out[2] if len(out) > 2 else "")


def _no_fit(spec, rows) -> Recommendation:
    """No candidate's DWDP ranks fit at any ISL."""
    cands = [r for r in rows if r.dwdp_size > 1]
    if not cands:
        return Recommendation(False, None, None, None, None, "use DEP here: no DWDP group size > 1 among the candidates")
    near = min(cands, key=lambda r: r.memory_per_rank_gb)  # the candidate nearest to fitting: its rows, every ISL
    g = near.dwdp_size
    mine = [r for r in cands if (r.dwdp_size, r.redundant_experts, r.slice_bytes) ==
            (g, near.redundant_experts, near.slice_bytes)]
    lo = min(mine, key=lambda r: r.memory_per_rank_gb)
    hi = max(mine, key=lambda r: r.memory_per_rank_gb)
    parts = parts_text({k: v * GB for k, v in lo.memory_parts_gb.items()})  # memory.RankMemory.describe's parts
    by_isl = tuple((r.isl, r.verdict) for r in mine)
    if not any(r.dep_fits for r in mine):  # DEP at that G does not fit either: no advice to use it
        one = len(mine) == 1 or bool(spec.mnt)  # at an MNT every ISL needs the same bytes
        need = f"{lo.memory_per_rank_gb:.1f}" + ("" if one else f"-{hi.memory_per_rank_gb:.1f}")
        dep = f"{lo.memory_dep_gb:.1f}" + ("" if one else f"-{hi.memory_dep_gb:.1f}")
        return Recommendation(False, None, None, None, None, (
            f"nothing fits {g} GPUs {_where(spec, mine)}: DWDP{g} needs {need} GB per rank ({parts} at "
            f"ISL {lo.isl}), DEP{g} {dep} GB, budget "
            f"{spec.memory_budget_gb:.1f} GB; {_counts(lo, hi)}"), verdict="nothing fits", by_isl=by_isl)
    smallest = hi.smallest_fitting_dwdp_size
    fix = (f"the smallest dwdp_size that fits every ISL is {smallest}" if smallest and smallest > g else
           f"DWDP{g} without redundant experts fits" if smallest else f"no dwdp_size up to {MAX_DWDP_SIZE} fits")
    return Recommendation(False, None, None, None, None, (
        f"use DEP here: memory does not fit: {_misfit(spec, g, mine)}; {fix} (DWDP{g} at ISL {lo.isl}: {parts})"),
        by_isl=by_isl)


#: plain data parallel (G=1) wins when its nominal throughput per GPU is within this fraction of the best DWDP setup's
#: at every ISL: with every expert local there is no prefetch, no peer memory and no all-to-all to deploy or debug
DP_TIE = 0.02


def _plain_dp(spec, configs, best) -> Recommendation | None:
    """G=1 (every expert on every rank) where its ranks fit at every planned ISL and it is as fast as `best`'s DWDP
    (within DP_TIE; `best` None: no DWDP setup fits), else None."""
    ones = [v for k, v in configs.items() if k[0] == 1 and all(r.fits for r in v)]
    if not ones:
        return None
    dp = ones[0]
    if best is not None:
        by_isl = {r.isl: r for r in best}
        if any(r.isl in by_isl and r.tps_per_gpu_dwdp < (1 - DP_TIE) * by_isl[r.isl].tps_per_gpu_dwdp for r in dp):
            return None
    vs = ""
    if best is not None:
        g = best[0].dwdp_size
        ratio = _geomean([r.tps_per_gpu_dwdp / {b.isl: b for b in best}[r.isl].tps_per_gpu_dwdp
                          for r in dp if r.isl in {b.isl for b in best}])
        vs = f"; {ratio:.2f}x DWDP{g}'s throughput per GPU (ties within {DP_TIE:.0%} go to G=1)"
    need = max(r.memory_per_rank_gb for r in dp)
    reason = (f"plain data parallel (G=1): every expert fits on every rank ({need:.1f} GB per rank <= "
              f"{spec.memory_budget_gb:.1f} GB): nothing to fetch, no all-to-all{vs}")
    return Recommendation(False, 1, 0, 0, 1.0, reason, verdict="DP", speedup_range=(1.0, 1.0),
                          by_isl=tuple((r.isl, "DP") for r in dp))


def extrapolation_clause(rows) -> str:
    """'; range widened for cells past the kernel tables: routed experts (DEP, EP8) 8.0x the last row' (the farthest
    reach per phase over `rows`; kernel_tables.EXTRAP_PER_DOUBLING per doubling), or ''."""
    from .kernel_tables import EXTRAP_PER_DOUBLING

    far: dict[str, float] = {}
    for r in rows:
        for k, v in (r.extrapolated or {}).items():
            far[k] = max(far.get(k, 0.0), float(v.split("x", 1)[0]))
    if not far:
        return ""
    return (f"; range widened {EXTRAP_PER_DOUBLING:.0%} per doubling for cells past the kernel tables: "
            + ", ".join(f"{k} {x:.1f}x the last row" for k, x in sorted(far.items(), key=lambda kv: -kv[1])))


def recommend(spec, rows) -> Recommendation:
    """Best setup among those that fit somewhere; plain data parallel (G=1) where it fits and is as fast; DWDP / DEP /
    marginal from the chosen setup's per-ISL ranges (module docstring)."""
    configs: dict[tuple[int, int, int], list] = {}
    for r in rows:
        configs.setdefault((r.dwdp_size, r.redundant_experts, r.slice_bytes), []).append(r)
    fitting = {k: [r for r in v if r.fits] for k, v in configs.items() if k[0] > 1}
    fitting = {k: v for k, v in fitting.items() if v}
    if not fitting:
        return _plain_dp(spec, configs, None) or _no_fit(spec, rows)
    scores = {k: _geomean([max(r.speedup, 1.0) for r in v]) for k, v in fitting.items()}
    best = max(scores, key=lambda k: (len(fitting[k]), scores[k], _geomean([r.speedup_low or r.speedup for r in fitting[k]]),
                                      -k[0], -k[1]))
    best_rows = fitting[best]
    dp = _plain_dp(spec, configs, best_rows)
    if dp is not None:
        return dp
    misfit = [r for r in configs[best] if not r.fits]  # the ISLs where this setup's DWDP ranks do not fit
    score = _geomean([r.speedup for r in best_rows])
    lo = _geomean([r.speedup_low or r.speedup for r in best_rows])
    hi = _geomean([r.speedup_high or r.speedup for r in best_rows])
    setup = f"G={best[0]}, redundant_experts={best[1]}, slice {fmt_slice(best[2])}"
    rng = (f"{lo:.2f}-{hi:.2f}x (nominal {score:.2f}x; geometric means over ISL "
           f"{', '.join(str(r.isl) for r in best_rows)}) DWDP/DEP throughput")
    notes: list[str] = []
    wins = [r for r in best_rows if r.verdict == "DWDP"]
    lost = [r for r in best_rows if r.verdict == "DEP"]
    marg = [r for r in best_rows if r.verdict == "marginal"]

    def depends(rs) -> str:
        return Counter(r.depends_on for r in rs).most_common(1)[0][0]  # "": no row's range crosses 1

    dep_on = depends(marg or best_rows)
    missing = peer_evidence(spec.gpu, best[0], is_measured(spec, "peer bandwidth"))
    measure = (f"no measurement of {missing}" if missing else
               f"depends on {dep_on} - {SETTLE.get(dep_on, 'a multi-GPU run measures it')}")
    if wins:  # DEP stays available at the other ISLs: the setup is recommended where its whole range is above 1
        verdict, use = "DWDP", True
        above = all(r.dep_fits for r in wins)  # a row DWDP wins because DEP's ranks do not fit may have a range across 1
        reason = (f"DWDP with {setup} at ISL {', '.join(str(r.isl) for r in wins)}: "
                  + ", ".join(f"{r.speedup_low:.2f}-{r.speedup_high:.2f}x" + ("" if r.dep_fits else " (DEP does not fit)")
                              for r in wins) + " DWDP/DEP throughput"
                  + (", the whole range above 1" if above else "; where DEP does not fit at this size the choice is "
                     "memory's, not speed's"))
        rest = [r for r in best_rows if r.verdict != "DWDP"]
        if rest:
            notes.insert(0, "elsewhere: " + ", ".join(f"ISL {r.isl} {r.verdict} ({r.speedup_low:.2f}-{r.speedup_high:.2f}x)"
                                                      for r in rest) + "; use DEP where DWDP is not certain to win"
                         + (f" (marginal: no measurement of {missing})" if missing and marg else ""))
    elif not marg:
        exposed = [r for r in best_rows if not r.prefetch_hidden]
        why = ("prefetch exposed at ISL " + ", ".join(str(r.isl) for r in exposed)) if exposed else \
            "the all-to-all and sync DWDP removes cost less than the interference it adds"
        verdict, use, reason = "DEP", False, f"DEP: the best DWDP setup ({setup}) reaches {rng}; {why}"
    elif not lost:
        verdict, use = "marginal", False
        reason = f"marginal: {measure}; DWDP with {setup} predicts {rng}"
    else:  # DEP where the whole range is below 1, marginal where it straddles 1: one line, per ISL
        verdict, use = "marginal", False
        reason = (f"DEP at {isl_set([r.isl for r in lost], spec.isls)} ({_ranges(lost)}: the whole range below 1); "
                  f"marginal at {isl_set([r.isl for r in marg], spec.isls)} with {setup} ({_ranges(marg)}; {measure})")
    reason += extrapolation_clause(best_rows)
    if misfit:
        reason += f"; {_misfit(spec, best[0], misfit)}"
    headroom = spec.memory_budget_gb - max(r.memory_per_rank_gb for r in best_rows)
    local = best_rows[0].local_experts
    extra = more_redundant_experts(spec, best[0], best[1], headroom * 1e9)
    if extra > 0 and local + extra >= spec.model.num_experts:
        notes.append(f"{headroom:.1f} GB free per rank: every expert fits on every rank (plain data parallel, "
                     "no prefetch) -- compare with G=1")
    elif extra > 0:
        notes.append(f"{headroom:.1f} GB free per rank: up to {extra} more redundant experts per rank fit "
                     f"(try --redundant-experts {best[1] + extra})")
    cal = spec.calibration
    if best[2] and cal.slice_efficiency:
        s_best = max(cal.slice_efficiency, key=lambda pt: (pt[1], pt[0]))
        notes.append(f"measured slice efficiency is best at {fmt_slice(int(s_best[0]))} ({s_best[1]:.2f} of bulk)")
    elif best[2]:
        notes.append(f"slice size {fmt_slice(best[2])} is not calibrated: `dwdp calibrate` measures it (slice_efficiency)")
    return Recommendation(use, best[0], best[1], best[2], score, reason, tuple(notes), verdict=verdict,
                          speedup_range=(lo, hi), depends_on=dep_on, by_isl=tuple((r.isl, r.verdict) for r in configs[best]))
