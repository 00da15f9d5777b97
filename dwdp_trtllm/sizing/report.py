"""`dwdp size`'s output: the side-by-side table (80 columns), its JSON, and the two plots (pure but for the PNGs).

Numbers come from metrics.py (one function per fact); this module only lays them out. A range [low-high] is the
same deployment simulated with every uncertain input of the planner at DWDP's worse / better end
(perf/uncertainty.py): DWDP's low end is its worse one, DEP's the opposite.
"""
from __future__ import annotations

import math
from pathlib import Path

from .metrics import Metrics, Slo, meets, metric_range
from .search import Outcome, Problem

W_LABEL, W_COL = 16, 18  # 16 + 3 x (" | " + 18) = 79 columns: three modes side by side
LABELS = {"dwdp": "DWDP", "dep": "DEP", "tp": "TP"}


def _range(m: Metrics, lo: Metrics | None, hi: Metrics | None, key: str, fmt: str) -> str:
    v = getattr(m, key)
    s = format(v, fmt)
    if lo is None or hi is None:
        return s
    a, b = metric_range(m, lo, hi, key)
    if format(a, fmt) == format(b, fmt):
        return s
    return f"{s} [{format(a, fmt)}-{format(b, fmt)}]"


def _cells(o: Outcome, p: Problem) -> list[str]:
    if o.deployment is None:
        return ["none (below)"] + [""] * (len(ROWS) - 1)
    d, m = o.deployment, o.metrics
    ctx = f"{d.ctx_servers} ranks DWDP{d.ctx_group}" if d.mode == "dwdp" else f"{d.ctx_servers} x {LABELS[d.mode]}{d.ctx_group}"
    if d.redundant:
        ctx += f" +{d.redundant}r"
    return [ctx, f"{d.mnt:,}", gen_cell(d),
            f"{d.gpus} ({d.ctx_gpus}+{d.gen_gpus})",
            _range(m, o.low, o.high, "ttft_p50_s", ".2f"), _range(m, o.low, o.high, "ttft_p99_s", ".2f"),
            f"{m.tpot_s * 1e3:.1f}", f"{m.tps_user:.1f}",
            _range(m, o.low, o.high, "output_tps_per_gpu", ".0f"),
            f"{m.goodput_rps:.2f} of {m.offered_rps:.2f}",
            "yes" if meets(m, p.slo) else "no", f"{o.memory_gb:.1f}"]


def gen_cell(d) -> str:
    """The generation servers in 18 columns: '1 x 8, batch 16' (attention DP + EP), '1x8 etp2ep4 b6' (MoE TP),
    '1x8 tp8/etp2 b56' (attention TP 8, MoE TP 2: EP the rest)."""
    if not d.gen_shape():
        return f"{d.gen_servers} x {d.gen_tp}, batch {d.gen_batch}"
    shape = d.gen_shape() if d.gen_attn_tp == 1 else f"tp{d.gen_attn_tp}/etp{d.gen_moe_tp}"
    return f"{d.gen_servers}x{d.gen_tp} {shape} b{d.gen_batch}"


ROWS = ("context servers", "max_num_tokens", "gen servers", "GPUs (ctx+gen)", "TTFT p50 s", "TTFT p99 s",
        "TPOT ms", "TPS/user", "output TPS/GPU", "goodput req/s", "SLOs met", "ctx rank GB")


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
    """The side-by-side table (one column per mode), then the binding constraints and the window output TPS/GPU is
    counted over, every line at most 80 columns."""
    modes = list(out)
    lines = [f"{'':<{W_LABEL}}" + "".join(f" | {LABELS[k]:<{W_COL}}" for k in modes), "-" * 79]
    cols = {k: _cells(o, p) for k, o in out.items()}
    for i, label in enumerate(ROWS):
        lines.append(f"{label:<{W_LABEL}}" + "".join(f" | {cols[k][i][:W_COL]:<{W_COL}}" for k in modes))
    lines.append("-" * 79)
    for k, o in out.items():
        if o.deployment is not None:
            lines += wrap(f"{LABELS[k]} binding constraint: {o.binding}", 80)
        else:
            lines += wrap(f"{LABELS[k]}: no deployment: {o.why_none}", 80)
    wins = {o.metrics.tps_window for o in out.values() if o.metrics is not None}
    if wins:
        a = min(w[0] for w in wins)
        b = max(w[1] for w in wins)
        lines += wrap(f"output TPS/GPU: steady state, output tokens from {a:.0f} s (warm-up of one median request "
                      f"lifetime excluded) to {b:.0f} s (the end of the offered traffic); goodput: of the offered "
                      "req/s", 80)
    return "\n".join(lines)


def slo_text(slo: Slo) -> str:
    parts = [f"TTFT p50 <= {slo.ttft_p50_s:g} s" if slo.ttft_p50_s is not None else "",
             f"TTFT p99 <= {slo.ttft_p99_s:g} s" if slo.ttft_p99_s is not None else "",
             f"TPS/user >= {slo.tps_user:g}" if slo.tps_user is not None else ""]
    return "SLOs: " + (", ".join(x for x in parts if x) or "none")


RANGED = ("ttft_p50_s", "ttft_p99_s", "output_tps_per_gpu")


def to_dict(out: dict[str, Outcome]) -> dict:
    res = {}
    for k, o in out.items():
        if o.deployment is None:
            res[k] = {"deployment": None, "why": o.why_none}
            continue
        d = o.deployment
        res[k] = {"deployment": {"mode": d.mode, "label": d.ctx_short(), "ctx_group": d.ctx_group, "ctx_servers": d.ctx_servers, "mnt": d.mnt,
                                 "redundant_experts": d.redundant, "gen_tp": d.gen_tp, "gen_servers": d.gen_servers,
                                 "gen_batch": d.gen_batch, "gen_attn_tp": d.gen_attn_tp, "gen_moe_tp": d.gen_moe_tp,
                                 "gpus": d.gpus, "ctx_gpus": d.ctx_gpus, "gen_gpus": d.gen_gpus},
                  "metrics": o.metrics.to_dict(), "low": o.low.to_dict(), "high": o.high.to_dict(),
                  "range": {k: list(metric_range(o.metrics, o.low, o.high, k)) for k in RANGED},
                  "binding": o.binding, "ctx_rank_memory_gb": round(o.memory_gb, 3)}
    return res


COLORS = {"dwdp": "tab:blue", "dep": "tab:orange", "tp": "tab:green"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_rates(rows: list[tuple[float, dict[str, Outcome]]], path: Path, slo: Slo | None = None) -> None:
    """TTFT p50 / p99 against the request rate, one line pair per mode (each at its own best deployment), the TTFT
    SLOs as horizontal lines, each p99 point labelled with its deployment (GPUs, context servers)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for mode, color in COLORS.items():
        pts = [(r, o[mode]) for r, o in rows if mode in o and o[mode].metrics is not None]
        if not pts:
            continue
        xs = [r for r, _ in pts]
        ax.plot(xs, [o.metrics.ttft_p50_s for _, o in pts], "o-", color=color, label=f"{LABELS[mode]} p50")
        ax.plot(xs, [o.metrics.ttft_p99_s for _, o in pts], "s--", color=color, label=f"{LABELS[mode]} p99")
        for x, o in pts:
            d = o.deployment
            ax.annotate(f"{d.gpus} GPUs\n{d.ctx_short()}", (x, o.metrics.ttft_p99_s), fontsize=6, color=color,
                        textcoords="offset points", xytext=(3, 3))
    for v, name, style in ((slo.ttft_p50_s if slo else None, "TTFT p50 SLO", ":"),
                           (slo.ttft_p99_s if slo else None, "TTFT p99 SLO", "-.")):
        if v is not None:
            ax.axhline(v, color="red", linestyle=style, linewidth=1, label=name)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("TTFT (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


#: two modes' Pareto points coincide when every point is within this fraction of the other's (the same generation
#: setups behind the same context GPUs differ only by their first tokens' timing)
COINCIDE = 0.01


def _same(a: list, b: list) -> bool:
    a, b = sorted(a), sorted(b)
    return len(a) == len(b) and all(abs(p[0] - q[0]) <= COINCIDE * max(abs(q[0]), 1e-9)
                                    and abs(p[1] - q[1]) <= COINCIDE * max(abs(q[1]), 1e-9) for p, q in zip(a, b))


def coinciding(points: dict[str, list]) -> list[list[str]]:
    """Groups (of two or more) of modes whose Pareto points coincide (COINCIDE)."""
    groups: list[list[str]] = []
    for mode, pts in points.items():
        if not pts:
            continue
        for g in groups:
            if _same(points[g[0]], pts):
                g.append(mode)
                break
        else:
            groups.append([mode])
    return [g for g in groups if len(g) > 1]


def shared_note(points: dict[str, list[tuple[float, float, str]]], ctx: dict[str, object]) -> str:
    """What modes whose Pareto points coincide share (their context GPUs and the generation side), or ""."""
    notes = []
    for modes in coinciding(points):
        gpus = sorted({ctx[m].ctx_gpus for m in modes})
        notes.append(f"{' and '.join(LABELS[m] for m in modes)} coincide (within {COINCIDE:.0%}): the same "
                     f"generation side behind {'/'.join(map(str, gpus))} context GPUs each ("
                     + ", ".join(ctx[m].ctx_short() for m in modes) + "); points labelled once")
    return "; ".join(notes)


def plot_pareto(points: dict[str, list[tuple[float, float, str]]], path: Path, title: str, slo: Slo | None = None,
                note: str = "") -> None:
    """Output TPS/GPU against TPS/user (one point per generation setup), one line per mode, as the paper's Figure 5;
    each point labelled with its deployment, the TPS/user SLO as a vertical line, and `note` (what coinciding lines
    share) on the plot."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    quiet = {m for g in coinciding(points) for m in g[1:]}  # a coinciding line's labels are drawn once
    for mode, color in COLORS.items():
        pts = sorted(points.get(mode, []))
        if not pts:
            continue
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "o-", color=color, label=LABELS[mode])
        for x, y, label in ([] if mode in quiet else pts):
            ax.annotate(label, (x, y), fontsize=5, color=color, textcoords="offset points", xytext=(3, 3))
    if slo is not None and slo.tps_user is not None:
        ax.axvline(slo.tps_user, color="red", linestyle="-.", linewidth=1, label="TPS/user SLO")
    ax.set_xlabel("TPS/user")
    ax.set_ylabel("output TPS/GPU (steady state)")
    ax.set_title(title, fontsize=8)
    if note:
        fig.text(0.01, 0.01, "\n".join(wrap(note, 110)), fontsize=6)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout(rect=(0, 0.07 if note else 0, 1, 1))
    fig.savefig(path, dpi=80)
    plt.close(fig)
