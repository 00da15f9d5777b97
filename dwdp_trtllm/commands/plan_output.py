"""What `dwdp plan` shows: the table with its legend and footer, the JSON document, the plot (presentation only;
the numbers come from perf/planner.py and perf/recommend.py)."""
from __future__ import annotations

import re
from pathlib import Path

from ..spec.schema import ConfigError


def _ms(x: float) -> str:
    return f"{x / 1000:,.2f}"


#: the width of wide tables when piped (docs, CI logs): `dwdp plan --wide`, validate-plan's table
WIDE_WIDTH = 180


def console(wide: bool = True):
    """A terminal console; piped: WIDE_WIDTH for a wide table (unwrapped), else COLUMNS when set or 80 (`dwdp plan`'s
    default table fits 60 columns)."""
    from rich.console import Console

    con = Console()
    return Console(width=WIDE_WIDTH) if wide and not con.is_terminal else con


#: the tables' legend, one entry a paragraph (wrapped); the last only with --wide, whose column it explains
LEGEND = ("DEP, DWDP: ms per MoE layer; x: DWDP/DEP throughput (DEP / DWDP time)",
          "✗: does not fit the GPU memory (DWDP's GB/rank over the budget)",
          "†: priced past its kernel table's last row (constant rate beyond it; routed-expert and DEP-communication "
          "cells widen the range 5% per doubling; --json 'extrapolated' names the cells)",
          "range: DWDP/DEP with every uncertain input at DWDP's worse / better end (docs/PLANNER.md 'Uncertainty')",
          "verdict: DWDP / DEP / marginal from that range where both fit (DEP where only DEP's ranks fit; nothing "
          "fits where neither's do)",
          "hides at: tokens per rank per iteration (requests of that ISL) whose compute hides the prefetch")

#: sources the output names by a short label, with where to read them (printed once, after the text naming them)
REFERENCES = {"blog 19": "https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/blogs/tech_blog/"
                         "blog19_DWDP_Distributed_Weight_Data_Parallelism_for_High_Performance_LLM_Inference_on_NVL72.md"}


def rel_to_root(text: str, root: Path | None) -> str:
    """Paths under the calibration data's root shown relative to it (as absolute, relative to the working directory
    or as given), only where a path starts: another directory's own 'docs/bench_results/' is left alone."""
    if not root:
        return text
    from ..perf.floor_calibration import show  # floor notes name paths relative to the working directory

    r = Path(root).resolve()
    for form in sorted({str(r), show(r), str(root)}, key=len, reverse=True):
        text = re.sub(r"(?<![\w/.-])" + re.escape(form.rstrip("/") + "/"), "", text)
    return text


def dep_comm_paths(spec, rows=()) -> list[str]:
    """DEP's communication path(s) as the rows were priced (PlanSpec.dep_comm_for each row's group size), in row
    order; without rows, the path at no particular size."""
    return list(dict.fromkeys(spec.dep_comm_for(r.dwdp_size) for r in rows)) or [spec.dep_comm_path]


def describe_pricing(spec, rows=()) -> str:
    """The target and its tables, then DEP's communication path as the rows priced it (--dep-comm): each row's
    description clause by clause, a clause said once (rows of two group sizes often share the first)."""
    t = spec.tables
    head = f"trtllm: {t.describe(spec.weight_dtype)}; peer copy: the project's model" if t is not None else spec.priced_as
    comms = list(dict.fromkeys(r.dep_comm for r in rows if r.dep_comm))
    if not comms:
        return f"{head}; DEP communication {', '.join(dep_comm_paths(spec, rows))}"
    clauses: list[str] = []
    for c in comms:
        for i, part in enumerate(c.split("; ")):
            text = f"DEP communication {part}" if i == 0 else part
            if text not in clauses:
                clauses.append(text)
    return "; ".join([head, *clauses])


#: what prices DEP's routed experts per DEP variant (perf/phases.trtllm_phases, perf/dep_variants.py)
DEP_EXPERTS = {"trtllm": "TensorRT-LLM's CUTLASS MoE table at EP=G",
               "deepep_deepgemm": "DeepGEMM's published grouped-GEMM rates"}


def experts_pricing(spec) -> dict | None:
    """{dwdp, dep: {variant: ...}}: which op priced each side's routed experts (target trtllm with its tables; None
    otherwise: the engine's cost model prices both)."""
    if spec.tables is None:
        return None
    p = spec.dwdp_experts
    gemm = f"gemm {spec.gemm}" + (f" ({spec.gemm_how})" if spec.gemm_how else "") if spec.gemm else "gemm not known"
    dwdp = p.op.label if p.op is not None else "TensorRT-LLM's CUTLASS MoE table at EP1"
    return {"dwdp": f"{dwdp}; {gemm}" + (f"; {p.why}" if p.why else ""),
            "dep": {v: DEP_EXPERTS[v] for v in spec.dep_variants}}


def experts_line(spec) -> str | None:
    """'experts: DWDP <op>; DEP <op per variant>' (one line; None where the engine's cost model prices both)."""
    e = experts_pricing(spec)
    if e is None:
        return None
    deps = "; ".join(f"DEP ({v}) {x}" if len(e["dep"]) > 1 else f"DEP {x}" for v, x in e["dep"].items())
    return f"experts: DWDP {e['dwdp']}; {deps}"


def interference_line(spec) -> str:
    from ..perf.uncertainty import PRIORS
    over = spec.interference if spec.interference is not None else spec.calibration.interference
    if over is not None:
        return f"interference {over:g}x on every phase (given)"
    by_phase = spec.calibration.interference_by_phase
    if by_phase:
        return ("interference measured per phase (calibration): "
                + ", ".join(f"{k.replace('_', ' ')} {by_phase.get(k, v):g}x" + ("" if k in by_phase else " (prior)")
                            for k, v in PRIORS.items()))
    from ..perf.inputs import is_measured
    from ..perf.uncertainty import NO_EVIDENCE_INTERFERENCE, peer_evidence
    measured = is_measured(spec, "peer bandwidth")
    wide = any(peer_evidence(spec.gpu, g, measured) for g in spec.dwdp_sizes)
    rng = (f"none to {NO_EVIDENCE_INTERFERENCE:g}x each excess: nothing measured copies on {spec.gpu.name}" if wide else
           "half to 1.5x each excess")
    return ("interference priors: " + ", ".join(f"{k.replace('_', ' ')} {v:g}x" for k, v in PRIORS.items())
            + f" (paper / TensorRT-LLM blog 19 Table 3; range: {rng})")


def not_priced_line(spec) -> str:
    """'not priced: swiglu_limit' (PlanSpec.not_priced: model_dims.not_priced / preset_not_priced), or 'not priced:
    nothing' -- said either way, so a silent omission cannot pass for a priced feature."""
    return "not priced: " + (", ".join(spec.not_priced) or "nothing (every config key is priced or cost-free)")


def calibration_notes(spec) -> tuple[str, ...]:
    return spec.calibration.notes + spec.calibration.floor.notes


def plan_json(spec, rows, recs: dict, root: Path | None = None) -> dict:
    """--json: every row (each names its dep_variant), the first DEP variant's recommendation as "recommendation" and
    every variant's under "recommendations"."""
    from ..deploy.memory import UNIT
    from ..perf import inputs
    return {"priced_as": spec.priced_as, "pricing": describe_pricing(spec, rows), "dep_comm": ", ".join(dep_comm_paths(spec, rows)), "memory_unit": UNIT,
            "mnt": spec.mnt, "batch": spec.batch, "mnt_is_default": spec.mnt_default,
            "interference": interference_line(spec), "experts": experts_pricing(spec), "inputs": inputs.to_dict(spec), "not_priced": list(spec.not_priced), "routing_skew": rows[0].routing_skew if rows else "none",
            "calibration": [rel_to_root(x, root) for x in spec.calibration.sources],
            "calibration_not_used": {f: list(v) for f, v in inputs.not_used(spec)},
            "calibration_notes": [rel_to_root(x, root) for x in calibration_notes(spec)],
            "floor_campaign": rel_to_root(spec.calibration.floor.choice, root) or None,
            "dep_variants": list(spec.dep_variants), "recommendation": next(iter(recs.values())).to_dict(),
            "recommendations": {v: rec.to_dict() for v, rec in recs.items()}, "rows": [r.to_dict() for r in rows]}


def _tok(x: float) -> str:
    if x == float("inf"):
        return "never"
    return f"{x / 1000:,.1f}K" if x >= 1000 else f"{x:,.0f}"


def _cells(spec, r, wide: bool, multi: bool) -> list[str]:
    """One row's cells: the narrow set (G, ISL, T_DEP, T_DWDP, DWDP/DEP, range, verdict) or every column (--wide)."""
    from ..perf.recommend import fmt_slice

    ex = r.extrapolated or {}
    dep_x = "†" if any("(DWDP" not in k for k in ex) else ""  # DEP's own cells or a phase both modes run
    dwdp_x = "†" if any("(DEP" not in k and not k.startswith("DEP") for k in ex) else ""
    ratio = f"[green]{r.speedup:.2f}[/green]" if r.speedup > 1 else f"[red]{r.speedup:.2f}[/red]"
    rng = f"{r.speedup_low:.2f}-{r.speedup_high:.2f}"
    if not wide:
        g = str(r.dwdp_size) + ("" if r.fits else "[red]✗[/red]")
        knobs = ([str(r.redundant_experts)] if len(spec.redundant_experts) > 1 else []) + (
            [fmt_slice(r.slice_bytes).replace(" MiB", "M").replace("unsliced", "0")] if len(spec.slice_bytes) > 1 else [])
        return [g] + knobs + [str(r.isl), _ms(r.t_dep_us) + dep_x, _ms(r.t_dwdp_us) + dwdp_x, ratio, rng, r.verdict]
    mem = f"{r.memory_per_rank_gb:.0f}" + ("" if r.fits else " [red]✗[/red]")
    return [str(r.dwdp_size)] + ([str(r.redundant_experts), fmt_slice(r.slice_bytes)] if multi else []) + [
        str(r.isl), f"{r.tokens_per_rank:,.0f}", mem, _ms(r.t_compute_us) + dwdp_x, _ms(r.t_prefetch_us),
        _ms(r.t_all2all_us) + ("†" if "DEP communication" in ex else ""), _ms(r.t_sync_us),
        _ms(r.t_dep_us) + dep_x, _ms(r.t_dwdp_us) + dwdp_x, ratio, rng, r.verdict, _tok(r.break_even_tokens)]


def _table(spec, rows, wide: bool):
    """One DEP variant's rows as a rich Table (narrow: fits 60 columns; wide: every column)."""
    from rich import box
    from rich.table import Table

    multi = len(spec.redundant_experts) > 1 or len(spec.slice_bytes) > 1
    comm = "T_comm" if spec.tables is not None else "T_all2all"
    if wide:
        t = Table()
        cols = ["G"] + (["red.", "slice"] if multi else []) + [
            "ISL", "tok/rank", "GB/rank", "T_compute", "T_prefetch", comm, "T_sync", "T_DEP", "T_DWDP", "DWDP/DEP",
            "range", "verdict", "hides at"]
    else:
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False, show_edge=False)
        cols = ["G"] + (["red."] if len(spec.redundant_experts) > 1 else []) + (
            ["slice"] if len(spec.slice_bytes) > 1 else []) + ["ISL", "DEP", "DWDP", "x", "range", "verdict"]
    for c in cols:
        t.add_column(c, justify="right", no_wrap=True)
    for r in rows:
        t.add_row(*_cells(spec, r, wide, multi))
    return t


def print_table(spec, by_variant: dict, recs: dict, *, verbose: bool = False, root: Path | None = None,
                wide: bool = False) -> None:
    """The plan as a user reads it: one table per DEP variant (perf/dep_variants.py) that fits 60 columns (--wide:
    every column), then prose wrapped at word boundaries to the terminal, at most 80 columns (commands/terminal.py),
    one recommendation per DEP variant, and the references the text names (REFERENCES)."""
    from rich.text import Text

    from ..perf import inputs
    from ..perf.dep_variants import LABELS, SHORT
    from .terminal import wrap

    con = console(wide)  # the narrow table follows the terminal (COLUMNS)
    said: list[str] = []

    def say(text: str, *, indent: str = "", hang: str | int = 2, bold: str = "") -> None:
        said.append(text)
        out = Text(wrap(text, indent=indent, hang=hang))
        if bold:
            out.stylize("bold", len(indent), len(indent) + len(bold))
        con.print(out, soft_wrap=True, highlight=False)  # already wrapped: rich must not cut or re-wrap it

    rows = [r for rs in by_variant.values() for r in rs]
    first = next(iter(by_variant.values()))
    wl = f"batch {spec.batch}" if spec.mnt is None else f"MNT {spec.mnt}"
    wl += " (gen-config's default; --mnt to change)" if spec.mnt_default else ""
    wl += f", ISL {spec.isl_dist}" + (f" ratio {spec.isl_ratio}" if spec.isl_dist == "uniform_ratio" else "")
    wl += f", imbalance CV {spec.imbalance_cv}"
    if rows and rows[0].routing_skew != "none":
        wl += f", routing skew {rows[0].routing_skew}"
    say(f"{spec.model.name} ({spec.model.num_layers} layers) on {spec.gpu.name}, {spec.weight_dtype} experts, {wl}; "
        f"priced for {spec.priced_as}; times per MoE layer in ms")
    several = len(by_variant) > 1
    for v, rs in by_variant.items():
        if several:
            say(f"vs {SHORT[v]}, --dep {v}:")
        con.print(_table(spec, rs, wide))
    for entry in LEGEND if wide else LEGEND[:-1]:
        say(entry)
    say(inputs.line(spec, rows))
    if (ex := experts_line(spec)) is not None:
        say(ex)
    say(not_priced_line(spec))
    for v, rs in by_variant.items():
        say(f"priced{f' ({v}: {LABELS[v]})' if several else ''}: {describe_pricing(spec, rs)}")
    srcs = [rel_to_root(x, root) for x in spec.calibration.sources]
    src = (", ".join(srcs) if verbose or len(srcs) <= 3 else f"{len(srcs)} files (--verbose lists them)") if srcs else "none"
    say(f"calibration{f' (under {root})' if root else ''}: {src}; memory budget {spec.memory_budget_gb:g} GB/rank")
    if spec.calibration.floor.choice:  # which floor campaign calibrates, chosen by its content (one line)
        say(rel_to_root(spec.calibration.floor.choice, root))
    say(interference_line(spec))
    notes = calibration_notes(spec)
    if verbose:
        for n in notes:
            say(f"note: {rel_to_root(n, root)}", indent="  ", hang="    ")
    elif notes:
        say(f"{len(notes)} calibration note(s) (skipped or dropped inputs); --verbose lists them", indent="  ")
    by_g: dict[int, list] = {}
    for r in first:
        by_g.setdefault(r.dwdp_size, []).append(r)
    for g, rs in by_g.items():
        say(f"break-even for hiding the prefetch, G={g} (tokens per rank per iteration; range): " + ", ".join(
            f"ISL {r.isl}: {_tok(r.break_even_tokens)} ({_tok(r.break_even_range[0])}-{_tok(r.break_even_range[1])})"
            for r in rs[:len(spec.isls)]))
    same = len({rec.reason for rec in recs.values()}) == 1  # memory decided: the DEP variant does not matter
    for v, rec in (list(recs.items())[:1] if same else recs.items()):
        head = f"recommendation{f' against {v}' if several and not same else ''}:"
        say(f"{head} {rec.reason}", bold=head)
        for n in rec.notes:
            say(f"- {n}", indent="  ", hang="    ")
    for label, url in REFERENCES.items():
        if any(label in text for text in said):
            say(f"{label}: {url}")


def write_plot(spec, rows, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..perf.recommend import fmt_slice

    multi = len(spec.redundant_experts) > 1 or len(spec.slice_bytes) > 1
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    series: dict[tuple, list] = {}
    for r in rows:
        series.setdefault((r.dwdp_size, r.redundant_experts, r.slice_bytes), []).append(r)
    for (g, red, s), rs in series.items():
        label = f"DWDP{g} / DEP{g}" + (f", red {red}, {fmt_slice(s)}" if multi else "")
        line, = ax.plot([r.isl for r in rs], [r.speedup for r in rs], marker="o", label=label)
        if all(r.speedup_high for r in rs):  # the range over the uncertain inputs (perf/uncertainty.py)
            ax.fill_between([r.isl for r in rs], [r.speedup_low for r in rs], [r.speedup_high for r in rs],
                            color=line.get_color(), alpha=0.2, linewidth=0)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("input sequence length (tokens)")
    ax.set_ylabel("T_DEP / T_DWDP (predicted)")
    ax.set_title(f"{spec.model.name}, {spec.gpu.name}, {spec.weight_dtype}, priced for {spec.priced_as.split(' ')[0]}\n"
                 "band: range over the uncertain inputs", fontsize=9)
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    from ..bench.plots import save_figure  # a temporary renamed over the file: never half a plot
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, out, dpi=120)
    except OSError as e:
        raise ConfigError(None, "--plot", f"cannot write {out} ({e.strerror or e})") from None
    finally:
        plt.close(fig)
