"""`dwdp validate-plan RESULTS.json`: the planner's prediction against a `dwdp bench` results.json.

For each run in the file, the run's config (model, dwdp, workload) becomes a planner spec, and the run's
measured iterations are rebuilt from its workload (perf/bench_work.py), so that predicted and measured
describe the same iterations: per-iteration means of attention, expert_gemm, other, communication and the
wall, and the per-layer rows the bench derives from them (attention and other per layer, expert and
communication phases per MoE layer). Every metric both sides have is printed as predicted, measured and
relative error (predicted/measured - 1); missing keys are tolerated and listed as not compared.

Compute is calibrated by `dwdp bench --floor` runs of one campaign (perf/floor_calibration.py): floor rates
and the engine's measured / floor per phase. The validated file's own runs never calibrate its prediction
(leave-one-out), and phases whose measured means are not usable (not repeatable in the campaign, allocator
retries) are marked and not counted as errors; the output says which runs calibrated and what was left out.

A run is compared only with a prediction for the device it ran on: --gpu defaults to the GPU the results name
(env.device_name); a run measured on the CPU, or on another GPU than --gpu, is refused (exit 2, before any table)
unless --allow-other-device is given, and then every such run carries a note that its errors measure the machine
gap, not the planner.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..perf.bench_work import get as _get
from ..perf.floor_points import TIMED_PHASES, run_linear_dtype
from ..perf.imbalance import tokens_per_s_per_gpu
from ..spec.schema import ConfigError
from .plan_output import console, rel_to_root
from .run_device import gpu_for, measured_on

LAYER_KEYS = ("attention", "expert_gemm", "all_to_all", "sync_wait", "prefetch_wait", "other")
ITERATION_KEYS = ("attention", "expert_gemm", "other", "all_to_all", "sync_wait", "prefetch_wait", "wall")
#: metrics (after the mode) that contain a measured statistic.phase: excluded with it
_CONTAINS = {**{f"mean.{ph}": (f"iteration_ms.{ph}", f"layer_us.{ph}") for ph in TIMED_PHASES},
             "mean.wall": ("iteration_ms.wall", "tps_per_gpu"),
             **{f"median.{ph}": (f"iteration_ms_median.{ph}",) for ph in (*TIMED_PHASES, "wall")}}


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("validate-plan", help="compare the planner's prediction with a dwdp bench results.json",
                              description=__doc__)
    p.add_argument("results", nargs="+", help="results.json written by dwdp bench (several: each validated on its own)")
    p.add_argument("--gpu", "--gpu-spec", dest="gpu", default=None, metavar="GPU",
                   help="hardware to predict with: h100 | h200 | b200 | gb200 | mi355x or a GPU spec file (YAML, "
                        "docs/PLANNER.md 'GPU spec files'; its name is matched with the device the results name) "
                        "(default: the GPU the results were measured on; another one is refused)")
    p.add_argument("--allow-other-device", action="store_true",
                   help="compare runs measured on another device (the CPU, another GPU) with the --gpu prediction anyway")
    p.add_argument("--calibration", action="append", default=None,
                   help="calibration JSON, or a `dwdp bench --floor` results.json (repeatable; see docs/PLANNER.md)")
    p.add_argument("--accept-calibration-gpu", action="store_true",
                   help="use a --calibration file measured on another GPU than the results' (refused otherwise)")
    p.add_argument("--bench-results", default=None,
                   help="directory of benchmark JSON to calibrate from (default: the floor campaign shipped with the "
                        "package, dwdp_trtllm/data/engine_calibration, as `dwdp plan`; docs/bench_results: the "
                        "validated file's own campaign when it is one)")
    p.add_argument("--no-bench-results", action="store_true", help="ignore benchmark JSON")
    p.add_argument("--interference", type=float, default=None, help="override the copy/compute interference factor, in [1, 100) (as `dwdp plan`)")
    p.add_argument("--a2a-dedup", action="store_true", help="DEP sends a token once per remote rank (DeepEP-style)")
    p.add_argument("--samples", type=int, default=256, help="Monte-Carlo iterations for random workloads")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON (a list, one entry per file)")
    p.add_argument("--summary", action="store_true",
                   help="one line per file, run and mode: the per-iteration phases and the wall, predicted vs measured")
    p.add_argument("--verbose", action="store_true",
                   help="list every calibration note (campaigns not used, skipped runs) before the table, not one line")
    p.add_argument("--wide", action="store_true",
                   help="tables on one line per row, wider than 80 columns (default: they fit the terminal)")
    return p


def load_runs(path: str) -> list[dict]:
    """The runs of a results.json (perf/calibration.read_json), each checked for the shape it is read with."""
    from ..perf.calibration import read_json

    p = Path(path)
    data = read_json(p)
    runs = data.get("runs") if isinstance(data, dict) else data
    if isinstance(data, dict) and runs is None and "config" in data:
        runs = [data]
    if not isinstance(runs, list):
        raise ConfigError(str(p), "runs", "expected a list of runs (each with config and metrics)")
    if not runs:
        raise ConfigError(str(p), "runs", "the file holds no runs: nothing to validate")
    for i, run in enumerate(runs):  # the shape every run is read with (a bench results.json)
        if not isinstance(run, dict):
            raise ConfigError(str(p), f"runs[{i}]", f"expected a mapping with config and metrics, got {type(run).__name__}")
        for key in ("config", "metrics", "env", "point"):
            if run.get(key) is not None and not isinstance(run[key], dict):
                raise ConfigError(str(p), f"runs[{i}].{key}", f"expected a mapping, got {type(run[key]).__name__}")
        for section, value in (run.get("config") or {}).items():
            if section in ("model", "dwdp", "workload", "run") and value is not None and not isinstance(value, dict):
                raise ConfigError(str(p), f"runs[{i}].config.{section}", f"expected a mapping, got {type(value).__name__}")
    return runs


def spec_for_run(run: dict, args, cal) -> tuple[Any, list[str]]:
    """A PlanSpec mirroring one bench run's config, and notes on what had to be approximated."""
    from ..perf.bench_work import run_model
    from ..perf.hardware import get_gpu
    from ..perf.plan_spec import PlanSpec

    notes: list[str] = []
    cfg = run.get("config") or {}
    model = run_model(cfg)  # preset, num_layers and first_k_dense as the run built it (checkpoint: config.json)
    E = model.num_experts
    G = int(_get(cfg, "dwdp.dwdp_size", 1))
    dtype = _get(cfg, "dwdp.weight_dtype", "bf16")
    if dtype not in ("bf16", "fp8", "nvfp4"):
        notes.append(f"weight_dtype {dtype} predicted as bf16")
        dtype = "bf16"
    red = int(_get(cfg, "dwdp.redundant_experts", 0))
    nepw = int(_get(cfg, "dwdp.num_experts_per_worker", 0))
    if nepw:
        red = max(0, nepw - -(-E // G))
        notes.append(f"upstream placement predicted as the derived one with {red} redundant experts")
    slice_bytes = int(_get(cfg, "dwdp.slice_bytes", 2 << 20)) if _get(cfg, "dwdp.contention_opt", True) else 0
    ranks = _get(cfg, "run.ranks")
    if ranks is not None and ranks != G:
        notes.append(f"run.ranks={ranks} != dwdp_size={G}: the planner models one group of G ranks for both modes")
    from ..perf.calibration import device_matches
    if measured_on(run) == "unknown":
        notes.append(f"the run records no device (env.device_name): predicted for {args.gpu}")
    elif not device_matches(measured_on(run), args.gpu):
        notes.append(f"OTHER DEVICE: measured on {measured_on(run)}, predicted for {args.gpu} (--allow-other-device): "
                     "errors measure the machine gap, not the model")
    gpus = _get(run, "env.gpu_count") or _get(run, "env.num_gpus")
    if isinstance(gpus, int) and ranks and gpus < ranks:
        notes.append(f"{ranks} ranks shared {gpus} GPU(s): measured times include time-slicing the planner does not model")
    wl = cfg.get("workload") or {}
    spec = PlanSpec(
        model=model, gpu=getattr(args, "gpu_file_spec", None) or get_gpu(args.gpu), weight_dtype=dtype, dwdp_sizes=(G,), isls=(int(wl.get("isl", 256)),),
        batch=None, mnt=int(wl.get("max_num_tokens", 1024)), isl_dist=wl.get("isl_dist", "uniform_ratio"),
        isl_ratio=float(wl.get("isl_ratio", 0.8)), isl_cv=float(wl.get("isl_cv", 0.0)),
        imbalance_cv=float(wl.get("imbalance_cv", 0.0)), redundant_experts=(red,), slice_bytes=(slice_bytes,),
        interference=args.interference, a2a_dedup=args.a2a_dedup, calibration=cal, samples=args.samples, seed=int(wl.get("seed", 0)),
        source_policy=_get(cfg, "dwdp.source_policy", "balanced"), linear_dtype=run_linear_dtype(run))
    return spec, notes


def predicted_metrics(row, model, outside: float = 1.0) -> dict[str, float]:
    """The planner's numbers under the bench's metric names: per-iteration means (iteration_ms; the wall is the
    timed phases x `outside`, the engine's time between phases), per-layer rows as the bench divides them, and
    tokens/s per GPU (perf.imbalance.tokens_per_s_per_gpu of the tokens per rank and the planner's whole iteration x
    `outside`: with `outside` 1, the plan's tps_per_gpu_* of the same row)."""
    c = row.t_compute_us
    # the MoE layers' compute that ran beside the copies is slowed (the planner's: the dense layers prefetch nothing);
    # spread the layer's slowdown over its compute parts
    s = (row.t_dwdp_us - row.t_prefetch_wait_us) / c if c > 0 and row.dwdp_size > 1 else 1.0
    L, n, k = model.num_layers, model.num_moe_layers, model.first_k_dense
    other = row.t_other_us * n + row.t_dense_mlp_us * k
    dep = {"attention": row.t_attention_us * L, "expert_gemm": row.t_experts_dep_us * n, "other": other,
           "all_to_all": row.t_all2all_us * n, "prefetch_wait": 0.0}
    # DEP waits for the slowest rank at each MoE layer's all-to-all, also for the dense layers before the first one
    # (row.t_sync_us is the MoE layers' wait only): its wait is what the planner's whole iteration (DEP: the slowest
    # rank's) leaves after the other phases, so the wall and tps_per_gpu below are one iteration time
    dep["sync_wait"] = max(0.0, row.t_iteration_dep_us - sum(dep.values()))
    it = {"dep": dep,
          "dwdp": {"attention": row.t_attention_us * (k + n * s), "expert_gemm": row.t_experts_dwdp_us * n * s,
                   "other": row.t_other_us * n * s + row.t_dense_mlp_us * k,
                   "all_to_all": 0.0, "sync_wait": 0.0, "prefetch_wait": row.t_prefetch_wait_us * n}}
    out: dict[str, float] = {}
    for mode, ph in it.items():
        ph["wall"] = sum(ph.values()) * outside
        for key in ITERATION_KEYS:
            out[f"{mode}.iteration_ms.{key}"] = ph[key] / 1e3
        for key in LAYER_KEYS:
            out[f"{mode}.layer_us.{key}"] = ph[key] / (L if key in ("attention", "other") else n)
        # the planner's whole iteration (DEP: the slowest rank's, lock-step), as `dwdp plan` shows it, x `outside`
        out[f"{mode}.tps_per_gpu"] = tokens_per_s_per_gpu(row.tokens_per_rank, getattr(row, f"t_iteration_{mode}_us") * outside)
    out["ratio.tps_per_gpu"] = out["dwdp.tps_per_gpu"] / out["dep.tps_per_gpu"]
    return out


def _excluded(own_points, run_index: int) -> dict[str, str]:
    """{metric: why} of the metrics of run `run_index` whose measured phase does not validate."""
    out: dict[str, str] = {}
    for p in own_points:
        if p.run != run_index:
            continue
        for phase, why in p.excluded.items():
            for key in _CONTAINS.get(phase, ()):
                out[f"{p.mode}.{key}"] = why
                if key == "tps_per_gpu":
                    out["ratio.tps_per_gpu"] = why
    return out


def compare_run(run: dict, args, cal, *, index: int = 0, own_points=()) -> dict:
    from ..perf.bench_work import rebuild
    from ..perf.planner import plan, predict

    spec, notes = spec_for_run(run, args, cal)
    load, why = rebuild(run.get("config") or {}, spec.model)
    setup = (spec.dwdp_sizes[0], spec.redundant_experts[0], spec.slice_bytes[0], spec.isls[0])
    if load is None:
        notes.append(f"iterations not rebuilt ({why}): predicted for the planner's sampled workload")
        row = plan(spec)[0]
    else:
        if why:
            notes.append(f"rebuilt iterations: {why}")
        row = predict(spec, *setup, load)
    outside = float(cal.engine_factor("outside", row.tokens_per_rank, row.isl))
    pred = predicted_metrics(row, spec.model, outside)
    if load is not None:  # the median over the iterations with tokens, as the bench's iteration_ms_median
        per_it = [predicted_metrics(predict(spec, *setup, load.at(s)), spec.model, outside)
                  for s in range(load.tokens_SR.shape[0]) if load.tokens_SR[s].sum() > 0]
        for mode in ("dep", "dwdp"):
            for key in ITERATION_KEYS:
                pred[f"{mode}.iteration_ms_median.{key}"] = float(np.median([m[f"{mode}.iteration_ms.{key}"] for m in per_it]))
    skip = _excluded(own_points, index)
    metrics = run.get("metrics") or {}
    out, missing = [], []
    for key, p in pred.items():
        m = _get(metrics, key)
        if isinstance(m, (int, float)) and not isinstance(m, bool) and math.isfinite(m):
            rel = (p / m - 1.0) if m else (0.0 if p == 0 else math.inf)
            out.append({"metric": key, "predicted": p, "measured": float(m), "rel_error": rel, "excluded": skip.get(key)})
        else:
            missing.append(key)
    return {"config": {"model": spec.model.name, "layers": spec.model.num_layers, "dwdp_size": row.dwdp_size,
                       "isl": row.isl, "mnt": spec.mnt, "weight_dtype": spec.weight_dtype, "gpu": spec.gpu.name,
                       "ranks": _get(run, "config.run.ranks")},
            "comparisons": out, "not_compared": missing, "notes": notes}


def validate(results: str, args) -> dict:
    """{"calibration": {...}, "runs": [per-run comparison or error]} for one results file."""
    from ..perf.floor_points import mark_unrepeatable, points_from_bench, run_id
    from .plan import load_cal

    runs = load_runs(results)  # the one read of the file
    args = argparse.Namespace(**{**vars(args), "gpu": gpu_for(results, runs, args.gpu, getattr(args, "allow_other_device", False))})
    cal = load_cal(args, args.gpu, validated=results, validated_ids={run_id(r) for r in runs})
    own = cal.floor.validated
    if not own:  # not in the calibration campaign: mark what its own runs' repeats say
        own = tuple(mark_unrepeatable(points_from_bench({"runs": runs}, file=results)[0])[0])
    out = []
    for i, r in enumerate(runs):
        if not isinstance(r, dict) or not isinstance(r.get("config"), dict):
            out.append({"run": i, "error": "no config mapping in this run"})
            continue
        try:
            out.append({"run": i, **compare_run(r, args, cal, index=i, own_points=own)})
        except (ValueError, TypeError) as e:
            out.append({"run": i, "error": f"could not predict: {e}"})
    fc = cal.floor
    return {"file": results, "calibration": {"campaign": fc.campaign, "choice": fc.choice, "runs": [p.label for p in fc.points],
                            "left_out": [p.label for p in fc.validated],
                            "core": {"tflops": fc.core[0], "ms_per_call": fc.core[1]} if fc.core else None,
                            "experts": {"tflops": fc.experts[0], "k_rows": fc.experts[1]} if fc.experts else None,
                            "notes": list(fc.notes)}, "runs": out}


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def run(args) -> int:
    from ..perf.hardware import GPUS, is_spec_path, load_gpu_spec
    from .plan import bench_dir, interference_problem

    if args.gpu is not None and is_spec_path(args.gpu):  # a spec file: its name is the device to match and calibrate
        args.gpu_file_spec = load_gpu_spec(args.gpu)  # ConfigError naming the file and key
        args.gpu = args.gpu_file_spec.name
    elif args.gpu is not None and args.gpu.lower() not in GPUS:
        raise ConfigError(None, "--gpu", f"expected one of {', '.join(GPUS)} or a GPU spec file (.yaml), got {args.gpu!r}")
    if args.samples < 1:
        raise ConfigError(None, "--samples", f"expected an integer >= 1, got {args.samples}")
    if problem := interference_problem(args.interference):  # the bound `dwdp plan` takes
        raise ConfigError(None, "--interference", problem)
    args.engine_efficiency = True  # the measured runs are the engine's: its measured/floor factors apply
    results = [validate(f, args) for f in args.results]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    con = console(args.wide)  # --wide: unwrapped rows (180 columns when piped); else the terminal, at most 80
    if not args.wide:
        from rich.console import Console

        from .terminal import width
        con = Console(width=width())
    root = bench_dir(args)
    if args.summary:
        print_summary(con, results, root, wide=args.wide)
        return 0
    for res in results:
        print_file(con, res, verbose=args.verbose, root=root, wide=args.wide)
    return 0


def _say(con, text: str, *, indent: str = "", hang: str | int = 2) -> None:
    """Prose wrapped within 80 columns (commands/terminal.py), printed as is (rich neither cuts nor re-wraps it)."""
    from rich.text import Text

    from .terminal import wrap
    con.print(Text(wrap(text, indent=indent, hang=hang)), soft_wrap=True, highlight=False)


def _new_table(wide: bool, **kw):
    """A rich Table: --wide's boxed one, or a compact one (no outer edge, one space between columns) that fits the
    terminal, cells wrapping at word boundaries and long names folded, never cut."""
    from rich import box
    from rich.table import Table

    if wide:
        return Table(**kw)
    return Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1), **kw)


SUMMARY_PHASES = ("attention", "expert_gemm", "other", "wall")


def summary_rows(res: dict) -> list[dict]:
    """Per (run, mode, statistic) of one validated file: {"file", "run", "mode", "stat" (mean: iteration_ms,
    median: iteration_ms_median), "config", phase: comparison or None}."""
    out = []
    for r in res["runs"]:
        if "error" in r:
            continue
        by = {c["metric"]: c for c in r["comparisons"]}
        for mode in ("dep", "dwdp"):
            for stat, metric in (("mean", "iteration_ms"), ("median", "iteration_ms_median")):
                row = {ph: by.get(f"{mode}.{metric}.{ph}") for ph in SUMMARY_PHASES}
                if any(row.values()):
                    out.append({"file": res["file"], "run": r["run"], "mode": mode, "stat": stat, "config": r["config"], **row})
    return out


def print_summary(con, results: list[dict], root: Path | None = None, *, wide: bool = False) -> None:
    """One row per file, run, mode and statistic: each phase's predicted / measured (error). Narrow (the default):
    the run's name, mode, statistic, ISL and expert dtype in one cell, each phase's error under its times, within 80
    columns."""
    _say(con, "per-iteration ms, predicted / measured (error); * = measured statistic not usable (see notes)")
    t = _new_table(wide)
    cols = ("file", "mode", "stat", "ISL", "experts") if wide else ("run",)
    for col in (*cols, *SUMMARY_PHASES):
        t.add_column(col, justify="left" if col in ("file", "mode", "stat", "run") else "right", overflow="fold")
    reasons: dict[str, int] = {}
    for res in results:
        for row in summary_rows(res):
            cells = []
            for ph in SUMMARY_PHASES:
                x = row[ph]
                if x is None:
                    cells.append("-")
                    continue
                mark = f" *{reasons.setdefault(x['excluded'], len(reasons) + 1)}" if x["excluded"] else ""
                sep = " " if wide else "\n"
                cells.append(f"{_fmt(x['predicted'])} / {_fmt(x['measured'])}{sep}({x['rel_error']:+.1%}){mark}")
            name = Path(row["file"]).name + (f"[{row['run']}]" if row["run"] else "")
            isl, dtype = str(row["config"]["isl"]), row["config"]["weight_dtype"]
            lead = ([name, row["mode"], row["stat"], isl, dtype] if wide else
                    [f"{name}\n{row['mode']} {row['stat']}\nISL {isl}, {dtype}"])
            t.add_row(*lead, *cells)
    con.print(t)
    for why, i in reasons.items():
        _say(con, f"*{i}: {why}", indent="  ", hang="    ")
    for res in results:
        lo = "; ".join(n for n in res["calibration"]["notes"] if n.startswith(("floor calibration", "leave-one-out")))
        _say(con, f"{Path(res['file']).name}: {rel_to_root(lo, root)}", indent="  ", hang="    ")


def print_file(con, res: dict, *, verbose: bool = False, root: Path | None = None, wide: bool = False) -> None:
    """One file's tables; before them its calibration in one paragraph (every note with `verbose`), paths relative to
    the data's root (plan_output.rel_to_root, as `dwdp plan`). Prose wraps within 80 columns; the tables fit the
    terminal unless `wide`."""
    cal = res["calibration"]
    if verbose:
        for n in cal["notes"]:
            _say(con, f"calibration: {rel_to_root(n, root)}")
    else:
        head = rel_to_root(cal["choice"], root) if cal["choice"] else "no floor campaign (datasheet rates)"
        out = f"; {len(cal['left_out'])} run(s) of the validated file left out" if cal["left_out"] else ""
        _say(con, f"calibration{f' (under {root})' if root else ''}: {head}{out}; {len(cal['notes'])} note(s), "
                  "--verbose lists them")
    for r in res["runs"]:
        if "error" in r:
            _say(con, f"run {r['run']}: {r['error']}")
            continue
        c = r["config"]
        for n in (first := [n for n in r["notes"] if n.startswith(("OTHER DEVICE", "the run records no device"))]):
            _say(con, f"run {r['run']}: {n}")  # before the table: another device's errors measure the machine gap
        _say(con, f"run {r['run']}: {c['model']} ({c['layers']} layers), G={c['dwdp_size']}, ISL {c['isl']}, "
                  f"MNT {c['mnt']}, {c['weight_dtype']}, predicted for {c['gpu']}")
        t = _new_table(wide)
        marks: dict[str, int] = {}
        rows = []
        for x in r["comparisons"]:
            note = ""
            if x["excluded"]:
                note = f"excluded ({marks.setdefault(x['excluded'], len(marks) + 1)})"
            rows.append((x["metric"], _fmt(x["predicted"]), _fmt(x["measured"]), f"{x['rel_error']:+.1%}", note))
        cols = ("metric", "predicted", "measured", "rel. error") + (("note",) if wide or marks else ())
        for col in cols:
            t.add_column(col, justify="left" if col in ("metric", "note") else "right", overflow="fold")
        for row in rows:
            t.add_row(*row[:len(cols)])
        con.print(t)
        for why, i in marks.items():
            _say(con, f"({i}) measured statistic not usable: {why}", indent="  ", hang="    ")
        missing = r["not_compared"]
        absent = [m for m in ("dep", "dwdp") if all(not k.startswith(m + ".") for k in (x["metric"] for x in r["comparisons"]))]
        shown = [k for k in missing if k.split(".")[0] not in absent and not (absent and k.startswith("ratio."))]
        if absent:
            _say(con, f"not compared: {', '.join(absent)} (mode not in the results)", indent="  ", hang="    ")
        if shown:
            _say(con, "not compared (missing in the results): " + ", ".join(shown), indent="  ", hang="    ")
        for n in r["notes"]:
            if n not in first:
                _say(con, f"note: {n}", indent="  ", hang="    ")
