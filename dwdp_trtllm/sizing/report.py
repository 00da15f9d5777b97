"""`dwdp size`'s output: the side-by-side table (80 columns), its JSON, and the two plots (pure but for the PNGs).

Numbers come from metrics.py (one function per fact); this module only lays them out. A range [low-high] is the
same deployment simulated with every uncertain input of the planner at DWDP's worse / better end
(perf/uncertainty.py): DWDP's low end is its worse one, DEP's the opposite.
"""
from __future__ import annotations

import math
from pathlib import Path

from .metrics import Metrics, Slo, meets
from .search import Outcome, Problem

W_LABEL, W_COL = 22, 26  # 22 + " | " + 26 + " | " + 26 = 80 columns


def _range(m: Metrics, lo: Metrics | None, hi: Metrics | None, key: str, fmt: str) -> str:
    v = getattr(m, key)
    s = format(v, fmt)
    if lo is None or hi is None:
        return s
    a, b = sorted((getattr(lo, key), getattr(hi, key)))
    if not (math.isfinite(a) and math.isfinite(b)) or format(a, fmt) == format(b, fmt) == s:
        return s
    return f"{s} [{format(a, fmt)}-{format(b, fmt)}]"


def _cells(o: Outcome, p: Problem) -> list[str]:
    if o.deployment is None:
        return ["none: " + o.why_none[:W_COL - 6]] + [""] * (len(ROWS) - 1)
    d, m = o.deployment, o.metrics
    ctx = (f"{d.ctx_servers} ranks, DWDP{d.ctx_group}" if d.mode == "dwdp" else f"{d.ctx_servers} x DEP{d.ctx_group}")
    if d.redundant:
        ctx += f" +{d.redundant} red."
    return [ctx, f"{d.mnt:,}", f"{d.gen_servers} x {d.gen_tp} GPUs, batch {d.gen_batch}",
            f"{d.gpus} ({d.ctx_gpus} ctx + {d.gen_gpus} gen)",
            _range(m, o.low, o.high, "ttft_p50_s", ".2f"), _range(m, o.low, o.high, "ttft_p99_s", ".2f"),
            f"{m.tpot_s * 1e3:.1f}", f"{m.tps_user:.1f}",
            _range(m, o.low, o.high, "output_tps_per_gpu", ".0f"),
            f"{m.goodput_rps:.2f} of {m.requests / max(o.result.window_s, 1e-9):.2f}",
            "yes" if meets(m, p.slo) else "no", f"{o.memory_gb:.1f}"]


ROWS = ("context servers", "max_num_tokens", "generation servers", "GPUs", "TTFT p50 s", "TTFT p99 s", "TPOT ms",
        "TPS/user", "output TPS/GPU", "goodput req/s", "SLOs met", "ctx rank GB")


def wrap(text: str, width: int) -> list[str]:
    out, line = [], ""
    for w in text.split():
        if line and len(line) + 1 + len(w) > width:
            out.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return out + ([line] if line else [])


def table(p: Problem, out: dict[str, Outcome]) -> str:
    """The side-by-side table, then the binding constraints, every line at most 80 columns."""
    lines = [f"{'':<{W_LABEL}} | {'DWDP':<{W_COL}} | {'DEP':<{W_COL}}", "-" * 80]
    cols = {k: _cells(o, p) for k, o in out.items()}
    for i, label in enumerate(ROWS):
        lines.append(f"{label:<{W_LABEL}} | {cols['dwdp'][i][:W_COL]:<{W_COL}} | {cols['dep'][i][:W_COL]:<{W_COL}}")
    lines.append("-" * 80)
    for k, o in out.items():
        if o.deployment is not None:
            lines += wrap(f"{k.upper()} binding constraint: {o.binding}", 80)
        else:
            lines += wrap(f"{k.upper()}: no deployment: {o.why_none}", 80)
    return "\n".join(lines)


def slo_text(slo: Slo) -> str:
    parts = [f"TTFT p50 <= {slo.ttft_p50_s:g} s" if slo.ttft_p50_s else "",
             f"TTFT p99 <= {slo.ttft_p99_s:g} s" if slo.ttft_p99_s else "",
             f"TPS/user >= {slo.tps_user:g}" if slo.tps_user else ""]
    return "SLOs: " + (", ".join(x for x in parts if x) or "none")


def to_dict(out: dict[str, Outcome]) -> dict:
    res = {}
    for k, o in out.items():
        if o.deployment is None:
            res[k] = {"deployment": None, "why": o.why_none}
            continue
        d = o.deployment
        res[k] = {"deployment": {"mode": d.mode, "ctx_group": d.ctx_group, "ctx_servers": d.ctx_servers, "mnt": d.mnt,
                                 "redundant_experts": d.redundant, "gen_tp": d.gen_tp, "gen_servers": d.gen_servers,
                                 "gen_batch": d.gen_batch, "gpus": d.gpus, "ctx_gpus": d.ctx_gpus, "gen_gpus": d.gen_gpus},
                  "metrics": o.metrics.to_dict(), "low": o.low.to_dict(), "high": o.high.to_dict(),
                  "binding": o.binding, "ctx_rank_memory_gb": round(o.memory_gb, 3)}
    return res


def plot_rates(rows: list[tuple[float, dict[str, Outcome]]], path: Path) -> None:
    """TTFT p50 / p99 against the request rate, DWDP beside DEP (each at its own best deployment)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for mode, color in (("dwdp", "tab:blue"), ("dep", "tab:orange")):
        pts = [(r, o[mode].metrics) for r, o in rows if o[mode].metrics is not None]
        if not pts:
            continue
        xs = [r for r, _ in pts]
        ax.plot(xs, [m.ttft_p50_s for _, m in pts], "o-", color=color, label=f"{mode.upper()} p50")
        ax.plot(xs, [m.ttft_p99_s for _, m in pts], "s--", color=color, label=f"{mode.upper()} p99")
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("TTFT (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_pareto(points: dict[str, list[tuple[float, float]]], path: Path, title: str) -> None:
    """Output TPS/GPU against TPS/user (one point per generation batch), DWDP beside DEP, as the paper's Figure 5."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for mode, color in (("dwdp", "tab:blue"), ("dep", "tab:orange")):
        pts = sorted(points.get(mode, []))
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", color=color, label=mode.upper())
    ax.set_xlabel("TPS/user")
    ax.set_ylabel("output TPS/GPU")
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
