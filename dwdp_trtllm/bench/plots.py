"""Bench plots (matplotlib Figure + Agg canvas, no pyplot state): DWDP/DEP ratios against the swept keys, per-rank Gantt timelines.

- ratio_<key>.png for each swept key: TPS/GPU DWDP/DEP and TTFT p50 speedup DEP/DWDP (both > 1 = DWDP better)
  against the key's values, one line per combination of the other swept keys (their mean when there are more
  than MAX_LINES combinations); ratio.png with one bar pair when nothing is swept. With run.repeat > 1 the
  median over the repeats, min-max as error bars; on CPU the title says it is a functional demo.
- timeline_<point hash>.png: one steady-state iteration per mode (report.run["timeline"], bench/timeline.py) on one
  shared time axis, rows = ranks: DEP's iteration k of every rank on the shared clock (lock-step: who waits for
  whom), DWDP's one iteration per rank from that rank's own start (free-running ranks); compute phases on the main
  lane, copy spans on a lane under each rank so the overlap of DWDP's pulls with compute is visible; each rank's
  iteration start / end marked on its row; a title with model / ranks / ISL / device, the sweep point (and, on
  CPU, that it is a functional demo), each panel's total waits. Every mark is in the legend.
Every PNG is written to a temporary beside it and renamed (save_figure): a full disk leaves the previous plot.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

MAX_LINES = 8
COLORS = {"attention": "#4c72b0", "expert_gemm": "#55a868", "other": "#8c8c8c", "all_to_all": "#dd8452",
          "sync_wait": "#c44e52", "prefetch_wait": "#8172b3", "copy": "#ccb974"}
RATIO_SERIES = (("tps_per_gpu", "TPS/GPU  DWDP / DEP"), ("ttft_speedup_p50", "TTFT p50 speedup  DEP / DWDP"))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def _gains(run: dict) -> dict[str, tuple[float, float, float]]:
    """ratio key -> (median, min, max) over the run's repeats (bench/repeats.py), or (v, v, v) for one run."""
    stats = (run.get("repeats") or {}).get("stats", {}).get("ratio", {})
    out = {}
    for k, v in run["metrics"].get("ratio", {}).items():
        st = stats.get(k)
        out[k] = (st["median"], st["min"], st["max"]) if st else (_num(v), _num(v), _num(v))
    return out


def _series_label(key: str, title: str, cpu: bool) -> str:
    return title.replace("TPS/GPU", "tokens/s per rank") if cpu and key == "tps_per_gpu" else title


def _sort_key(v):
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def save_figure(fig, path: Path, dpi: int = 110) -> Path:
    """fig as an image at `path` (format from its suffix), written to a temporary beside it and renamed."""
    from .report import replace_atomically
    return replace_atomically(Path(path), lambda tmp: fig.savefig(tmp, dpi=dpi), suffix=Path(path).suffix)


def plot_ratios(runs: list[dict], swept: list[str], out_dir: Path) -> list[Path]:
    """One PNG per swept key (ratio.png when none); runs without a DEP/DWDP ratio are left out."""
    runs = [r for r in runs if r["metrics"].get("ratio")]
    if not runs:
        return []
    from .report import CPU_NOTE, run_device
    note = CPU_NOTE if any(run_device(r) == "cpu" for r in runs) else None
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    if not swept:
        fig = Figure(figsize=(5.5, 4))
        ax = fig.subplots()
        g = _gains(runs[0])
        vals = [g.get(k, (math.nan,) * 3) for k, _ in RATIO_SERIES]
        med = [v[0] for v in vals]
        err = [[max(0.0, v[0] - v[1]) for v in vals], [max(0.0, v[2] - v[0]) for v in vals]]
        n = (runs[0].get("repeats") or {}).get("n", 1)
        ax.bar([_series_label(k, lbl, bool(note)).replace("  ", "\n") for k, lbl in RATIO_SERIES], med,
               color=["#4c72b0", "#55a868"], yerr=err if n > 1 else None, capsize=6)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_ylabel("DWDP gain (> 1: DWDP better)")
        for i, (v, lo, hi) in enumerate(vals):
            ax.text(i + 0.08, v, f"{v:.3f}" + (f"\n[{lo:.3f}-{hi:.3f}]" if n > 1 else ""), ha="left", va="bottom",
                    fontsize=8)
        ax.set_ylim(0, max([1.2] + [v[2] for v in vals if math.isfinite(v[2])]) * 1.25)
        title = f"median [min-max] over {n} repeats" if n > 1 else ""
        if note:
            title = note.replace("; ", ";\n") + ("\n" + title if title else "")
        if title:
            ax.set_title(title, fontsize=7)
        fig.tight_layout()
        paths.append(out_dir / "ratio.png")
        save_figure(fig, paths[-1])
        return paths
    for key in swept:
        others = [k for k in swept if k != key]
        xs = sorted({r["point"][key] for r in runs}, key=_sort_key)
        categorical = not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
        groups: dict[tuple, dict] = defaultdict(dict)
        for r in runs:
            groups[tuple(r["point"][k] for k in others)][r["point"][key]] = _gains(r)
        fig = Figure(figsize=(11, 4))
        axes = fig.subplots(1, 2)
        for ax, (rk, title) in zip(axes, RATIO_SERIES):
            if len(groups) <= MAX_LINES:
                lines = [(", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(others, g)) or None,
                          [pts.get(x, {}).get(rk, (math.nan,) * 3) for x in xs]) for g, pts in groups.items()]
            else:
                mean = [float(np.nanmean([p[x].get(rk, (math.nan,))[0] for p in groups.values() if x in p])) for x in xs]
                lines = [(f"mean over {len(groups)} other points", [(m, m, m) for m in mean])]
            pos = list(range(len(xs))) if categorical else xs
            for label, ys in lines:  # medians; min-max bars where the points ran repeats
                med = [y[0] for y in ys]
                err = [[max(0.0, y[0] - y[1]) for y in ys], [max(0.0, y[2] - y[0]) for y in ys]]
                ax.errorbar(pos, med, yerr=err if any(y[1] != y[2] for y in ys) else None, marker="o", capsize=3,
                            label=label)
            if categorical:
                ax.set_xticks(pos, [str(x) for x in xs])
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            ax.set_xlabel(key)
            ax.set_ylabel("DWDP gain (> 1: DWDP better)" + (", median [min-max]" if any(
                y[1] != y[2] for _, ys in lines for y in ys) else ""))
            ax.set_title(_series_label(rk, title, bool(note)))
            if any(label for label, _ in lines):
                ax.legend(fontsize=7)
        if note:
            fig.suptitle(note, fontsize=8)
        fig.tight_layout()
        paths.append(out_dir / f"ratio_{_safe(key)}.png")
        save_figure(fig, paths[-1])
    return paths


#: legend text of each timeline colour: what the span is, in whose mode
TIMELINE_LABELS = {"attention": "attention", "expert_gemm": "expert GEMMs", "other": "other compute",
                   "all_to_all": "DEP all-to-all", "sync_wait": "DEP wait for the slowest rank",
                   "prefetch_wait": "DWDP wait for its copy", "copy": "DWDP copy from peers (lower lane)"}
#: the narrowest a copy span is drawn, as a fraction of the time axis: a copy of a few microseconds would
#: otherwise be invisible beside milliseconds of compute (the legend says so)
MIN_COPY_WIDTH = 0.004
ITERATION_MARK = "#333333"


def timeline_title(run: dict) -> str:
    """model / ranks / ISL / device of a run, its sweep point, and what a CPU run's picture is."""
    from .report import CPU_NOTE, point_label, run_device
    cfg = run.get("config", {})
    model = cfg.get("model", {}) or {}
    name = model.get("preset") or (Path(model["checkpoint"]).name if model.get("checkpoint") else "tiny")
    if model.get("num_layers"):
        name += f" ({model['num_layers']} layers)"
    ranks = (cfg.get("run", {}) or {}).get("ranks", "?")
    isl = (cfg.get("workload", {}) or {}).get("isl", "?")
    env = run.get("env", {})
    device = env.get("device_name") or env.get("device") or "?"
    title = f"{name}, {ranks} ranks, ISL {isl}, {device}"
    if run.get("point"):  # a sweep point: which one (a single point has no swept values)
        title += f"\npoint {point_label(run['point'])}"
    return f"{title}\n{CPU_NOTE}" if run_device(run) == "cpu" else title


def panel_title(mode: str, t: dict, waits: str) -> str:
    """What one panel shows: which iteration of which rank, from which start, and how long."""
    its = t["iteration"]
    ms = f"{t['duration_s'] * 1e3:.2f} ms"
    if t.get("align", "wall_clock") == "wall_clock":  # points written before "align" existed were all wall-clock
        k = its if isinstance(its, int) else next(iter(its.values()))
        head = f"{mode.upper()}: iteration {k} of every rank on the shared clock (lock-step), window {ms}"
    else:
        which = ", ".join(f"rank {r}: {k}" for r, k in sorted(its.items(), key=lambda x: int(x[0])))
        head = (f"{mode.upper()}: one iteration per rank ({which}), each from its own start (ranks free-run), "
                f"longest {ms}")
    return head + (f"\n(all ranks: {waits})" if waits else "")


def plot_timeline(run: dict, path: Path) -> Path | None:
    """timeline_figure(run) written to path; None when the run has no timeline."""
    fig = timeline_figure(run)
    if fig is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path)


def timeline_figure(run: dict) -> Figure | None:
    """Gantt of one steady-state iteration per mode of one run (bench/timeline.py), every panel on the same time
    axis (the longest), titled with model / ranks / ISL / device / sweep point; None when the run has no timeline."""
    tl = {m: t for m, t in run.get("timeline", {}).items() if t}
    if not tl:
        return None
    fig = Figure(figsize=(12, 2.6 + 0.8 * max(len(t["ranks"]) for t in tl.values()) * len(tl)))
    axes = fig.subplots(len(tl), 1, squeeze=False, sharex=True)
    span_ms = max(t["duration_s"] for t in tl.values()) * 1e3
    min_copy_ms = MIN_COPY_WIDTH * span_ms
    for ax, (mode, t) in zip(axes[:, 0], tl.items()):
        ranks = sorted(t["ranks"], key=int)
        waited = {p: 0.0 for p in ("sync_wait", "prefetch_wait", "copy")}
        for row, rk in enumerate(ranks):
            y = len(ranks) - 1 - row
            for phase, _layer, s, e in t["ranks"][rk]:
                if phase in waited:
                    waited[phase] += (e - s) * 1e3
                if phase == "copy":  # its own lane under the compute lane
                    ax.broken_barh([(s * 1e3, max((e - s) * 1e3, min_copy_ms))], (y - 0.48, 0.26),
                                   color=COLORS["copy"], edgecolor="#7a6a20", linewidth=0.5)
                else:
                    ax.broken_barh([(s * 1e3, (e - s) * 1e3)], (y - 0.15, 0.6), color=COLORS.get(phase, "k"))
            marks = sorted({x * 1e3 for span in t.get("iterations", {}).get(rk, []) for x in span})
            ax.vlines(marks, y - 0.5, y + 0.5, color=ITERATION_MARK, lw=0.9)
        ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in reversed(ranks)])
        ax.set_ylim(-0.6, len(ranks) - 0.4)
        ax.set_xlim(0, span_ms)
        said = ", ".join(f"{TIMELINE_LABELS[p].split(' (')[0]} {v:.2f} ms" for p, v in waited.items() if v > 0)
        ax.set_title(panel_title(mode, t, said.replace("DWDP copy from peers", "DWDP copies")), loc="left",
                     fontsize=9)
    axes[-1, 0].set_xlabel("ms from the start of the window (same axis for every panel)")
    fig.suptitle(timeline_title(run), fontsize=10)
    from .report import run_device
    idle = "gap: untimed host work between phases" + (" (on CPU also time a rank spent off its core)"
                                                      if run_device(run) == "cpu" else "")
    handles = [Patch(color=c, label=TIMELINE_LABELS[p]) for p, c in COLORS.items() if p != "copy"]
    handles.append(Patch(facecolor=COLORS["copy"], edgecolor="#7a6a20",
                         label=f"{TIMELINE_LABELS['copy'][:-1]}; drawn at least {MIN_COPY_WIDTH:.1%} of the axis wide)"))
    handles.append(Line2D([], [], color=ITERATION_MARK, lw=0.9, label="iteration start / end of that rank"))
    handles.append(Patch(facecolor="white", edgecolor="#999999", label=idle))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 0.93))
    return fig
