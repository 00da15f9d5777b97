"""`dwdp validate-plan RESULTS.json`: the planner's prediction against a `dwdp bench` results.json.

For each run in the file, the run's config (model, dwdp, workload) becomes a planner spec; every metric
that both sides have is printed as predicted, measured and relative error (predicted/measured - 1).
Missing keys are tolerated and listed as not compared.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from ..models import PRESETS
from ..schema import ConfigError

LAYER_KEYS = ("attention", "expert_gemm", "all_to_all", "sync_wait", "prefetch_wait", "other")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("validate-plan", help="compare the planner's prediction with a dwdp bench results.json",
                              description=__doc__)
    p.add_argument("results", help="results.json written by dwdp bench")
    p.add_argument("--gpu", default="h200", help="hardware to predict with: h100 | h200 | b200 | gb200 (default h200)")
    p.add_argument("--calibration", default=None, help="calibration JSON (see docs/PLANNER.md)")
    p.add_argument("--bench-results", default=None, help="directory of benchmark JSON to calibrate from")
    p.add_argument("--no-bench-results", action="store_true", help="ignore benchmark JSON")
    p.add_argument("--interference", type=float, default=None, help="override the copy/compute interference factor")
    p.add_argument("--a2a-dedup", action="store_true", help="DEP sends a token once per remote rank (DeepEP-style)")
    p.add_argument("--samples", type=int, default=256, help="Monte-Carlo iterations for random workloads")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return p


def _get(d: Any, path: str, default: Any = None) -> Any:
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def load_runs(path: str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "", "file not found" if not p.exists() else "not a regular file")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(str(p), "", f"not valid JSON: {e}") from None
    runs = data.get("runs") if isinstance(data, dict) else data
    if isinstance(data, dict) and runs is None and "config" in data:
        runs = [data]
    if not isinstance(runs, list):
        raise ConfigError(str(p), "runs", "expected a list of runs (each with config and metrics)")
    return runs


def spec_for_run(run: dict, args, cal) -> tuple[Any, list[str]]:
    """A PlanSpec mirroring one bench run's config, and notes on what had to be approximated."""
    from ..models import get_model
    from ..perf.hardware import get_gpu
    from ..perf.planner import PlanSpec

    notes: list[str] = []
    cfg = run.get("config") or {}
    if _get(cfg, "model.checkpoint"):  # the spec of a checkpoint run comes from its config.json
        from ..config import ModelConfig
        model = ModelConfig(checkpoint=_get(cfg, "model.checkpoint"), num_layers=_get(cfg, "model.num_layers")).spec()
    else:
        preset = _get(cfg, "model.preset") or "tiny"  # null: ModelConfig's default
        if preset not in PRESETS:
            raise ValueError(f"config.model.preset {preset!r} is not a known preset")
        model = get_model(preset, _get(cfg, "model.num_layers"))
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
    if _get(cfg, "run.device") == "cpu":
        notes.append(f"measured on the CPU; predicted for {args.gpu}: errors measure the machine gap, not the model")
    gpus = _get(run, "env.gpu_count") or _get(run, "env.num_gpus")
    if isinstance(gpus, int) and ranks and gpus < ranks:
        notes.append(f"{ranks} ranks shared {gpus} GPU(s): measured times include time-slicing the planner does not model")
    wl = cfg.get("workload") or {}
    spec = PlanSpec(
        model=model, gpu=get_gpu(args.gpu), weight_dtype=dtype, dwdp_sizes=(G,), isls=(int(wl.get("isl", 256)),),
        batch=None, mnt=int(wl.get("max_num_tokens", 1024)), isl_dist=wl.get("isl_dist", "uniform_ratio"),
        isl_ratio=float(wl.get("isl_ratio", 0.8)), isl_cv=float(wl.get("isl_cv", 0.0)),
        imbalance_cv=float(wl.get("imbalance_cv", 0.0)), redundant_experts=(red,), slice_bytes=(slice_bytes,),
        interference=args.interference, a2a_dedup=args.a2a_dedup, calibration=cal, samples=args.samples, seed=int(wl.get("seed", 0)),
        source_policy=_get(cfg, "dwdp.source_policy", "balanced"))
    return spec, notes


def predicted_metrics(row, model=None) -> dict[str, float]:
    """The planner's numbers under the bench's metric names (with `model`: also the per-iteration phase totals)."""
    c = row.t_compute_us
    # compute that ran beside the copies is slowed; spread the layer's slowdown over its compute parts
    s = (row.t_dwdp_us - row.t_prefetch_wait_us) / c if c > 0 and row.dwdp_size > 1 else 1.0
    out = {
        "dep.tps_per_gpu": row.tps_per_gpu_dep, "dwdp.tps_per_gpu": row.tps_per_gpu_dwdp,
        "ratio.tps_per_gpu": row.tps_per_gpu_dwdp / row.tps_per_gpu_dep,
        "dep.layer_us.attention": row.t_attention_us, "dep.layer_us.expert_gemm": row.t_experts_dep_us,
        "dep.layer_us.all_to_all": row.t_all2all_us, "dep.layer_us.sync_wait": row.t_sync_us,
        "dep.layer_us.prefetch_wait": 0.0, "dep.layer_us.other": row.t_other_us,
        "dwdp.layer_us.attention": row.t_attention_us * s, "dwdp.layer_us.expert_gemm": row.t_experts_dwdp_us * s,
        "dwdp.layer_us.all_to_all": 0.0, "dwdp.layer_us.sync_wait": 0.0,
        "dwdp.layer_us.prefetch_wait": row.t_prefetch_wait_us, "dwdp.layer_us.other": row.t_other_us * s,
    }
    if model is not None:  # iteration totals: every layer's attention, the MoE layers' experts, dense MLPs + router/shared
        L, n, k = model.num_layers, model.num_moe_layers, model.first_k_dense
        for mode, experts, f in (("dep", row.t_experts_dep_us, 1.0), ("dwdp", row.t_experts_dwdp_us, s)):
            out[f"{mode}.iteration_ms.attention"] = row.t_attention_us * L * f / 1e3
            out[f"{mode}.iteration_ms.expert_gemm"] = experts * n * f / 1e3
            out[f"{mode}.iteration_ms.other"] = (row.t_other_us * n + row.t_dense_mlp_us * k) * f / 1e3
    return out


def compare_run(run: dict, args, cal) -> dict:
    from ..perf.planner import plan

    spec, notes = spec_for_run(run, args, cal)
    row = plan(spec)[0]
    pred = predicted_metrics(row, spec.model)
    metrics = run.get("metrics") or {}
    out, missing = [], []
    for key, p in pred.items():
        m = _get(metrics, key)
        if isinstance(m, (int, float)) and not isinstance(m, bool) and math.isfinite(m):
            rel = (p / m - 1.0) if m else (0.0 if p == 0 else math.inf)
            out.append({"metric": key, "predicted": p, "measured": float(m), "rel_error": rel})
        else:
            missing.append(key)
    return {"config": {"model": spec.model.name, "layers": spec.model.num_layers, "dwdp_size": row.dwdp_size,
                       "isl": row.isl, "mnt": spec.mnt, "weight_dtype": spec.weight_dtype, "gpu": spec.gpu.name},
            "comparisons": out, "not_compared": missing, "notes": notes}


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def run(args) -> int:
    from rich.table import Table

    from ..perf.hardware import GPUS
    from .plan import console, load_cal

    if args.gpu.lower() not in GPUS:
        raise ConfigError(None, "--gpu", f"expected one of {', '.join(GPUS)}, got {args.gpu!r}")
    if args.samples < 1:
        raise ConfigError(None, "--samples", f"expected an integer >= 1, got {args.samples}")
    if args.interference is not None and args.interference < 1:
        raise ConfigError(None, "--interference", f"expected a number >= 1, got {args.interference}")
    args.engine_efficiency = True  # the measured runs are the engine's: its measured/floor factors apply
    cal = load_cal(args, args.gpu)
    results = []
    for i, r in enumerate(load_runs(args.results)):
        if not isinstance(r, dict) or not isinstance(r.get("config"), dict):
            results.append({"run": i, "error": "no config mapping in this run"})
            continue
        try:
            results.append({"run": i, **compare_run(r, args, cal)})
        except (ValueError, TypeError) as e:
            results.append({"run": i, "error": f"could not predict: {e}"})
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    con = console()
    for res in results:
        if "error" in res:
            con.print(f"run {res['run']}: {res['error']}")
            continue
        c = res["config"]
        t = Table(title=f"run {res['run']}: {c['model']} ({c['layers']} layers), G={c['dwdp_size']}, ISL {c['isl']}, "
                        f"MNT {c['mnt']}, {c['weight_dtype']}, predicted for {c['gpu']}", title_justify="left")
        for col in ("metric", "predicted", "measured", "rel. error"):
            t.add_column(col, justify="left" if col == "metric" else "right")
        for x in res["comparisons"]:
            t.add_row(x["metric"], _fmt(x["predicted"]), _fmt(x["measured"]), f"{x['rel_error']:+.1%}")
        con.print(t)
        if res["not_compared"]:
            con.print("  not compared (missing in the results): " + ", ".join(res["not_compared"]))
        for n in res["notes"]:
            con.print(f"  note: {n}")
    return 0
