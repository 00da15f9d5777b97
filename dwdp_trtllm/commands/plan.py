"""`dwdp plan`: predict DWDP against DEP for a model, GPU, group sizes and ISLs; recommend a setup."""
from __future__ import annotations

import dataclasses

import argparse
import json
import math
import re
from pathlib import Path

from ..deploy import memory as mem
from ..spec.config import MAX_SLICE_BYTES, MAX_TOKENS
from ..spec.models import PRESETS
from ..spec.schema import ConfigError
from .deploy_args import gpu_budget_bytes

from . import pricing_flags as pf
from .context_length import check_context_length, context_length
from .pricing_flags import DEP_COMMS, DEP_VARIANTS  # noqa: F401  (plan's names since before the shared parser)
#: perf.moe_op.GEMMS, spelled here so the parser does not import numpy: the TensorRT-LLM host's expert paths on
#: DWDP layers
GEMMS = ("multi_buffer", "composite_view", "merge")

#: --interference of `dwdp plan` and `dwdp validate-plan` lies in [1, INTERFERENCE_MAX): a slowdown of compute overlapped
#: with copies of 100x or more describes no GPU (the paper's priors are below 1.5x); one bound for both commands
INTERFERENCE_MAX = 100.0
#: --isl's default; those beyond a model's context length are left out (a stated one is refused)
DEFAULT_ISLS = "1024,4096,8192,16384,32768"


def interference_problem(value: float | None) -> str | None:
    """What is wrong with an --interference value (None: not given, or fine)."""
    if value is None or math.isfinite(value) and 1 <= value < INTERFERENCE_MAX:
        return None
    return f"expected a number in [1, {INTERFERENCE_MAX:g}), got {value}"


#: the engine calibration `dwdp plan --target engine` and `dwdp validate-plan` use by default (bench_dir): package
#: data (a copy of one floor campaign, data/engine_calibration/README.md), so an installed command and a checkout's
#: agree; --bench-results DIR overrides
PACKAGE_CAL_DIR = Path(__file__).resolve().parents[1] / "data" / "engine_calibration"
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def int_list(text: str, arg: str, *, lo: int = 1, hi: int | None = None) -> tuple[int, ...]:
    """'1024,8192' -> (1024, 8192); every item an integer in [lo, hi], else an error naming `arg`."""
    out = []
    for item in str(text).split(","):
        item = item.strip().lower().replace("_", "")
        m = re.fullmatch(r"(\d+)(k?)", item)
        if not m:
            raise ConfigError(None, arg, f"expected a comma-separated list of integers (e.g. 1024,8192 or 8k), got {text!r}")
        v = int(m.group(1)) * (1024 if m.group(2) else 1)
        if v < lo:
            raise ConfigError(None, arg, f"each value must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            raise ConfigError(None, arg, f"each value must be <= {hi:,}, got {v:,}")
        out.append(v)
    return tuple(dict.fromkeys(out))


def size_list(text: str, arg: str) -> tuple[int, ...]:
    """'2MiB,8MiB' or '0' (unsliced) -> bytes; multiples of 256."""
    out = []
    for item in str(text).split(","):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", item)
        if not m or m.group(2).lower() not in _UNITS:
            raise ConfigError(None, arg, f"expected sizes like 2MiB, 512KiB, 4194304 or 0 (unsliced), got {item!r}")
        v = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
        if v % 256 or v > MAX_SLICE_BYTES:
            raise ConfigError(None, arg, f"slice size must be 0 or a multiple of 256 bytes up to {MAX_SLICE_BYTES:,}, "
                                         f"got {v:,}")
        out.append(v)
    return tuple(dict.fromkeys(out))


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="predict DWDP vs DEP (roofline + contention + imbalance) and recommend G",
                              description=__doc__)
    g = p.add_argument_group("model and hardware")
    g.add_argument("--model", default=mem.DEFAULT_MODEL,
                   help=f"model preset ({', '.join(sorted(PRESETS))}), or a checkpoint's config.json / directory: its "
                        "dimensions only, so families the engine cannot run (gpt_oss, glm4_moe) plan too (default deepseek-r1)")
    g.add_argument("--num-layers", type=int, default=None, help="truncate the preset to this many layers (memory)")
    g.add_argument("--gpu", default=mem.DEFAULT_GPU, help="shipped GPU spec: h100 | h200 | b200 | gb200 | mi355x (default h200)")
    g.add_argument("--gpu-spec", default=None, metavar="FILE",
                   help="GPU spec file (YAML, docs/PLANNER.md 'GPU spec files'); replaces --gpu")
    g.add_argument("--gpu-memory-gb", type=float, default=None,
                   help="usable memory per GPU in GB (1e9 bytes; default: the datasheet's)")
    g.add_argument("--weight-dtype", default=mem.DEFAULT_WEIGHT_DTYPE, help="routed-expert weights: bf16 | fp8 | mxfp4 | nvfp4, scales included (default fp8)")
    g.add_argument("--dispatch-dtype", default="fp8", help="DEP dispatch activations: bf16 | fp8 | nvfp4 (default fp8)")
    pf.add_dep_comm(g)
    pf.add_dep(g)
    g.add_argument("--gemm", default=None, choices=GEMMS,
                   help="the expert path the TensorRT-LLM host runs on DWDP layers (the integration YAML's gemm): "
                        "multi_buffer runs this project's routed-expert op, priced from a calibration's moe_op record "
                        "or the table shipped for the GPU; composite_view and merge run TensorRT-LLM's CUTLASS MoE, "
                        "priced from its kernel table. Default: the adapter's default for the weights and GPU "
                        "(moe_evidence.default_gemm: multi_buffer for fp8 on h100/h200)")
    g.add_argument("--a2a-dedup", action="store_true",
                   help="DEP sends a token once per remote rank (DeepEP-style) instead of once per remote top-k expert")
    g = p.add_argument_group("candidates")
    g.add_argument("--dwdp-size", default="auto",
                   help="candidate group sizes G, comma-separated (default auto: the smallest power of two whose DWDP "
                        "ranks fit the GPU memory, at most the expert count: memory.default_dwdp_size, as "
                        "plan-placement and gen-config)")
    g.add_argument("--redundant-experts", default="0", help="candidate extra experts per rank, comma-separated (default 0)")
    pf.add_slice_bytes(g)
    g = p.add_argument_group("workload")
    g.add_argument("--isl", default=DEFAULT_ISLS, help="mean input sequence lengths, comma-separated (at most the "
                                                       "model's context length)")
    b = g.add_mutually_exclusive_group()
    b.add_argument("--batch", type=int, default=None, help="requests per rank per iteration, instead of --mnt")
    b.add_argument("--mnt", type=int, default=None,
                   help="max tokens per rank per iteration: whole requests packed up to it (default "
                        f"{mem.context_max_num_tokens()}: the context servers' max_num_tokens `dwdp gen-config` "
                        "writes, memory.context_max_num_tokens)")
    g.add_argument("--isl-dist", default="fixed", help="fixed | uniform_ratio | normal (default fixed)")
    g.add_argument("--isl-ratio", type=float, default=0.8, help="uniform_ratio lower bound as a fraction of ISL (default 0.8)")
    g.add_argument("--isl-cv", type=float, default=0.0, help="normal: coefficient of variation of ISL")
    g.add_argument("--imbalance-cv", type=float, default=0.0, help="across-rank CV of each rank's mean ISL (default 0)")
    g.add_argument("--samples", type=int, default=256, help="Monte-Carlo iterations for random workloads (default 256)")
    g.add_argument("--seed", type=int, default=0)
    pf.add_routing_skew(g)
    g = p.add_argument_group("model knobs and calibration")
    g.add_argument("--target", default="trtllm", choices=("trtllm", "engine"),
                   help="price compute and DEP communication for TensorRT-LLM's kernels (trtllm: measured kernel "
                        "tables shipped with the package) or for our engine (engine: the calibration `dwdp bench` "
                        "measures); default trtllm")
    g.add_argument("--kernel-tables", default=None, metavar="FILE",
                   help="kernel-table JSON (scripts/extract_aiconfigurator.py) instead of the shipped one (target trtllm)")
    pf.add_interference(g)
    g.add_argument("--calibration", action="append", default=None,
                   help="calibration JSON, or a `dwdp bench --floor` results.json (repeatable; see docs/PLANNER.md)")
    g.add_argument("--accept-calibration-gpu", action="store_true",
                   help="use a --calibration file measured on another GPU than --gpu / --gpu-spec (refused otherwise)")
    g.add_argument("--bench-results", default=None,
                   help="directory of benchmark JSON to calibrate --target engine from (default: the floor campaign "
                        "shipped with the package, dwdp_trtllm/data/engine_calibration; e.g. docs/bench_results)")
    g.add_argument("--no-bench-results", action="store_true", help="ignore benchmark JSON; datasheet + defaults only")
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true",
                   help="print {rows, recommendation, priced_as, calibration} as JSON instead of the table")
    g.add_argument("--wide", action="store_true",
                   help="every column (compute, prefetch, communication, sync, memory, break-even) instead of the "
                        "table that fits 60 columns; --json carries them all")
    g.add_argument("--verbose", action="store_true", help="list every calibration note (skipped files) under the table")
    g.add_argument("--plot", default=None, help="write DWDP/DEP against ISL to this PNG (the paper's figure 3)")
    return p


def check_bench_results(args) -> None:
    """--bench-results calibrates --target engine only: given with --target trtllm (whose compute comes from TensorRT-
    LLM's kernel tables) it would be ignored, so it is refused; given with engine it must name a directory."""
    if args.bench_results is None:
        return
    if args.target != "engine":
        raise ConfigError(None, "--bench-results", f"calibrates --target engine only, got --target {args.target} (priced "
                                                   "from TensorRT-LLM's kernel tables); add --target engine or leave "
                                                   f"--bench-results {args.bench_results} out")
    check_bench_dir(Path(args.bench_results))


def check_bench_dir(d: Path) -> None:
    """--bench-results (`dwdp plan --target engine`, `dwdp validate-plan`) names a directory."""
    if not d.is_dir():
        raise ConfigError(None, "--bench-results", f"expected a directory of benchmark JSON, got {d} ("
                                                   f"{'a file' if d.exists() else 'no such file or directory'})")


def bench_dir(args) -> Path | None:
    """The directory whose benchmark JSON calibrates `dwdp plan --target engine` and `dwdp validate-plan`:
    --bench-results, else the floor campaign shipped with the package (PACKAGE_CAL_DIR); None with --no-bench-results.
    The one place that names the default."""
    if args.no_bench_results:
        return None
    return Path(args.bench_results) if args.bench_results else PACKAGE_CAL_DIR


def load_cal(args, gpu_name: str, validated: str | None = None, validated_ids=(), *, bench: bool = True,
             multi_gpu: bool = False, provenance: list | None = None):
    """Calibration for `gpu_name`: our bench results (bench_dir: --bench-results, default the campaign shipped with
    the package, unless --no-bench-results), then every --calibration on top (a strict calibration JSON, or a results.json whose
    floor runs join the bench results'). Floor runs: one campaign calibrates (FloorCalibration.select: the
    `validated` file's when it is one, else the newest), the validated file's own runs left out (also their copies
    elsewhere: `validated_ids`, the run ids of its runs). bench=False: --calibration files only (target trtllm: the
    answer must not depend on a checkout's docs/). multi_gpu: a plan for several GPUs, where an interference read
    from benchmark JSON (measured on one GPU, the "peer" copy a same-device copy) is dropped (per-phase priors).
    provenance: a list that receives a (Calibration field, file) pair for every field a file sets (perf/inputs.py
    says from it which inputs are measured and where)."""
    from dataclasses import fields as dc_fields
    from ..perf.calibration import (Calibration, calibration_from_bench, device_matches, load_bench_results,
                                    load_calibration, read_json)

    cal = Calibration()
    d = bench_dir(args) if bench else None
    if d is not None:
        if args.bench_results:
            check_bench_dir(d)
        cal = _noted(cal.merged(load_bench_results(d, gpu_name)), str(d), provenance, dc_fields)
        if multi_gpu and cal.interference is not None:
            cal = dataclasses.replace(cal, interference=None, notes=cal.notes + (
                f"interference {cal.interference:g}x of the benchmark JSON is a one-GPU measurement: not used for a "
                "multi-GPU plan (per-phase priors instead)",))
    for path in args.calibration or ():
        data = read_json(Path(path))
        if isinstance(data, dict) and isinstance(data.get("runs"), list):  # a bench results.json
            c = calibration_from_bench(data, file=str(path))
            if not c.gpu or not device_matches(c.gpu, gpu_name):
                raise ConfigError(str(path), "", f"measured on {c.gpu or 'an unnamed device'}, not {gpu_name}")
            cal = cal.merged(_noted(c, str(path), provenance, dc_fields))
        else:
            c = load_calibration(path)
            c = _same_gpu(c, str(path), gpu_name, args)
            cal = cal.merged(_noted(c, str(path), provenance, dc_fields))
    # the embedded engine's measured/floor factors describe our engine, not a deployment: planning uses the
    # stock-kernel floor rates only (validate-plan, which compares against the engine, applies both)
    engine = bool(getattr(args, "engine_efficiency", False))
    return dataclasses.replace(cal, floor=cal.floor.select(validated, run_ids=validated_ids, measured=engine), engine_efficiency=engine)


def _same_gpu(cal, file: str, gpu_name: str, args):
    """`cal` when the GPU it names (measured_on.gpu_name, else the schema-1 `gpu`) is the one planned for (or it names
    none); measured on another GPU: refused naming both, unless --accept-calibration-gpu (then a note says so)."""
    from ..perf.calibration import device_matches

    key = "measured_on.gpu_name" if cal.measured_on.get("gpu_name") else "gpu"
    measured = cal.measured_on.get("gpu_name") or cal.gpu
    if not measured or device_matches(measured, gpu_name):
        return cal
    flag = f"--gpu-spec {args.gpu_spec}" if getattr(args, "gpu_spec", None) else f"--gpu {gpu_name}"
    if not getattr(args, "accept_calibration_gpu", False):
        raise ConfigError(file, key, f"measured on {measured}, but the plan is for {gpu_name} ({flag}): calibrate on "
                                     "that GPU, or pass --accept-calibration-gpu to use this file anyway")
    return dataclasses.replace(cal, notes=cal.notes + (
        f"{file} was measured on {measured}, used for {gpu_name} on purpose (--accept-calibration-gpu)",))


def _noted(cal, file: str, provenance: list | None, dc_fields):
    """`cal` unchanged; its set measurement fields recorded as (field, file) in `provenance` (when given)."""
    if provenance is not None:
        skip = ("sources", "notes", "gpu", "floor", "engine_efficiency")
        provenance += [(f.name, file) for f in dc_fields(cal)
                       if f.name not in skip and getattr(cal, f.name) not in (None, (), {})]
    return cal


def stated_inputs(args) -> tuple:
    """(input, value) for the uncertain inputs the user stated (perf/inputs.py FLAGS): not ranged."""
    out = []
    if args.dep_comm is not None:
        out.append(("DEP communication", args.dep_comm))
    if args.routing_skew is not None:
        out.append(("routing", args.routing_skew))
    if args.interference is not None:
        out.append(("interference", f"{args.interference:g}"))
    return tuple(out)


def build_spec(args, *, gpu_name: str | None = None):
    """A PlanSpec from parsed arguments; bad values raise ConfigError naming the argument."""
    from ..perf.hardware import GPUS, get_gpu
    from ..perf.planner import check_candidates
    from ..perf.plan_spec import PlanSpec

    from ..spec.model_dims import dims_from_config_json, is_config_path
    from ..perf.hardware import is_spec_path, load_gpu_spec

    gpu_name = gpu_name or args.gpu
    spec_file = args.gpu_spec or (gpu_name if is_spec_path(gpu_name) else None)  # --gpu FILE, as the other commands take
    if not spec_file and gpu_name.lower() not in GPUS:
        raise ConfigError(None, "--gpu", f"expected one of {', '.join(GPUS)} or a GPU spec file (.yaml), got {gpu_name!r}")
    from ..spec.hf_config import read_config_json
    from ..spec.model_dims import not_priced, preset_not_priced

    if is_config_path(args.model):
        base_model = dims_from_config_json(args.model)  # ConfigError names the file and key
        unpriced = not_priced(read_config_json(args.model)[0])
    elif args.model in PRESETS:
        base_model = PRESETS[args.model]
        unpriced = preset_not_priced(base_model)
    else:
        raise ConfigError(None, "--model", f"expected one of {', '.join(sorted(PRESETS))} or a config.json path, "
                                           f"got {args.model!r}")
    layers = base_model.num_layers
    if args.num_layers is not None and not 1 <= args.num_layers <= layers:
        raise ConfigError(None, "--num-layers", f"expected an integer in [1, {layers}] ({args.model}'s layers), "
                                                f"got {args.num_layers}")
    for name, val, choices in (("--weight-dtype", args.weight_dtype, ("bf16", "fp8", "mxfp4", "nvfp4")),
                               ("--dispatch-dtype", args.dispatch_dtype, ("bf16", "fp8", "nvfp4")),
                               ("--isl-dist", args.isl_dist, ("fixed", "uniform_ratio", "normal"))):
        if val not in choices:
            raise ConfigError(None, name, f"expected one of {', '.join(choices)}, got {val!r}")
    checks = [("--batch", args.batch is None or args.batch >= 1, "an integer >= 1"),
              ("--mnt", args.mnt is None or 1 <= args.mnt <= MAX_TOKENS, f"an integer in [1, {MAX_TOKENS:,}]"),
              ("--isl-ratio", 0 < args.isl_ratio <= 1, "a number in (0, 1]"),
              ("--isl-cv", 0 <= args.isl_cv <= 10, "a number in [0, 10]"),
              ("--imbalance-cv", 0 <= args.imbalance_cv < 1, "a number in [0, 1)"),
              ("--samples", 1 <= args.samples <= 100_000, "an integer in [1, 100000]"),
              ("--seed", 0 <= args.seed < 2 ** 32, "an integer in [0, 2**32)"),
              ("--gpu-memory-gb", args.gpu_memory_gb is None or 0 < args.gpu_memory_gb < 1e5, "a number in (0, 1e5)")]
    for name, ok, expected in checks:
        if not ok:
            raise ConfigError(None, name, f"expected {expected}, got {getattr(args, name[2:].replace('-', '_'))!r}")
    if problem := interference_problem(args.interference):
        raise ConfigError(None, "--interference", problem)
    check_bench_results(args)
    isls = int_list(args.isl, "--isl", hi=MAX_TOKENS)
    limit = context_length(args.model, base_model)
    if args.isl == DEFAULT_ISLS and limit is not None:  # the defaults the model can hold; stated ISLs are checked
        isls = tuple(i for i in isls if i <= limit) or isls
    check_context_length(args.model, base_model, max(isls))  # as `dwdp size` and `dwdp gen-config`
    if args.mnt is None and args.batch is None:  # a context server's iterations: the MNT gen-config writes
        args.mnt, args.mnt_default = mem.context_max_num_tokens(), True
    gpu = load_gpu_spec(spec_file) if spec_file else get_gpu(gpu_name)
    model = base_model if args.num_layers is None else base_model.truncated(args.num_layers)
    sizes = auto_dwdp_size(args, model, gpu, isls) if args.dwdp_size == "auto" else int_list(args.dwdp_size, "--dwdp-size")
    _check_draws(args, sizes, isls)
    target, tables = args.target, args.kernel_tables
    if tables and not Path(tables).is_file():
        raise ConfigError(tables, "", "kernel-table file not found (--kernel-tables)")
    provenance: list = []
    cal = load_cal(args, gpu.name, bench=target == "engine", multi_gpu=True, provenance=provenance)
    if cal.interference is None:  # a one-GPU interference dropped for a multi-GPU plan measured nothing
        provenance = [p for p in provenance if p[0] != "interference"]
    cal = linear_layers_said(cal, args.weight_dtype)
    spec = PlanSpec(
        model=model, gpu=gpu, weight_dtype=args.weight_dtype, target=target, kernel_tables=tables,
        routing_skew=parse_skew(args.routing_skew or "none"), stated=stated_inputs(args), provenance=tuple(provenance),
        dwdp_sizes=sizes, isls=isls,
        batch=None if args.mnt else (args.batch or 1), mnt=args.mnt, isl_dist=args.isl_dist,
        mnt_default=bool(getattr(args, "mnt_default", False)),
        isl_ratio=args.isl_ratio, isl_cv=args.isl_cv, imbalance_cv=args.imbalance_cv,
        redundant_experts=int_list(args.redundant_experts, "--redundant-experts", lo=0),
        slice_bytes=size_list(args.slice_bytes, "--slice-bytes"), dispatch_dtype=args.dispatch_dtype,
        a2a_dedup=args.a2a_dedup, interference=args.interference, calibration=cal, gpu_memory_gb=args.gpu_memory_gb,
        samples=args.samples, seed=args.seed, dep_comm=args.dep_comm, not_priced=unpriced,
        **dwdp_gemm(args, gpu.name))
    spec.dwdp_experts  # noqa: B018 - a calibration's moe_op record from another GPU is refused here (exit 2)
    from ..perf.dep_variants import applies, variants
    if args.dep == "deepep_deepgemm" and not applies(spec):
        raise ConfigError(None, "--dep", f"deepep_deepgemm is priced for fp8 experts on {' or '.join(('h100', 'h200'))} "
                                         f"with --target trtllm, got {args.weight_dtype} on {gpu.name}, target {target}")
    spec = dataclasses.replace(spec, dep_variants=variants(spec, args.dep))
    check_candidates(spec)
    return spec


def dwdp_gemm(args, gpu_name: str) -> dict:
    """PlanSpec's gemm and gemm_how: --gemm, else the path the TensorRT-LLM adapter takes first for these weights on
    this GPU (integration/moe_evidence.priced_gemm, as plan-placement and gen-config price it)."""
    if args.gemm is not None:
        return {"gemm": args.gemm, "gemm_how": "--gemm"}
    from ..integration.moe_evidence import priced_gemm
    g, how = priced_gemm(args.weight_dtype, gpu_name)
    return {"gemm": g, "gemm_how": how}


def linear_layers_said(cal, weight_dtype: str):
    """The floor campaign's one line (`choice`) says so when none of its runs ran the linear layers in the dtype this
    plan prices them in (cost_model.DENSE_DTYPE_FOR: FP8 for FP8 / FP4 checkpoints): their floor rates are then the
    other dtype's (FP8 linear layers are faster than BF16 ones: docs/history/benchmarks-2026-12.md section 9,
    one H200, 2026-12-03, an MoE layer's set 1.37-1.38x and a dense layer's 1.43-1.45x at 4K-16K tokens)."""
    from ..perf.cost_model import DENSE_DTYPE_FOR

    fc, dense = cal.floor, DENSE_DTYPE_FOR[weight_dtype]
    if not fc.points or not fc.choice or fc.linear_measured(dense):
        return cal
    other = sorted({p.linear_dtype for p in fc.points})
    said = (f"; no run of it ran the linear layers in {dense}: projections and dense GEMMs priced at its "
            f"{'/'.join(other)} linear layers' floor rates")
    return dataclasses.replace(cal, floor=dataclasses.replace(fc, choice=fc.choice + said))


def auto_dwdp_size(args, model, gpu, isls) -> tuple[int, ...]:
    """--dwdp-size auto: memory.default_dwdp_size (the group size every deployment command defaults to), priced at
    --mnt, else batch x the longest ISL (tokens per rank), on --gpu-memory-gb or the GPU's datasheet memory."""
    mnt = args.mnt or args.batch * max(isls)
    budget = gpu_budget_bytes(gpu, args.gpu_memory_gb)
    return (mem.default_dwdp_size(model, budget, weight_dtype=args.weight_dtype, max_num_tokens=mnt),)


def parse_skew(text: str):
    """--routing-skew: none | power_law_<alpha> | zipf_<alpha> | a counts file -> RoutingSkewConfig (or None)."""
    from ..spec.routing_skew import RoutingSkewConfig

    t = str(text).strip()
    if t in ("", "none", "balanced"):
        return None
    m = re.fullmatch(r"(power_law|zipf)_(\d+(?:\.\d+)?)", t)
    try:
        if m:
            return RoutingSkewConfig(kind=m.group(1), alpha=float(m.group(2)))  # type: ignore[arg-type]
        if Path(t).is_file():
            return RoutingSkewConfig(kind="file", path=t)
    except ConfigError as e:
        raise ConfigError(None, "--routing-skew", f"{e.key}: {e.expected}") from None
    raise ConfigError(None, "--routing-skew", f"expected none, power_law_<alpha>, zipf_<alpha> or a counts file, got {t!r}")


#: request lengths one candidate may draw (samples x ranks x requests per iteration; 8 bytes each)
MAX_DRAWS = 1 << 24


def _check_draws(args, sizes: tuple[int, ...], isls: tuple[int, ...]) -> None:
    """The Monte-Carlo workload (perf/imbalance.sample_requests) draws samples x G x K request lengths, K the
    requests a rank packs in an iteration (--batch, or about 2 x --mnt / the shortest ISL): refuse what would not
    fit in memory, naming the argument."""
    from ..perf.imbalance import requests_per_iteration

    deterministic = args.imbalance_cv == 0 and args.isl_dist == "fixed"
    samples = 1 if deterministic else args.samples
    if args.mnt:
        per_iter = requests_per_iteration(args.mnt, min(isls), args.isl_dist, args.isl_ratio)
    else:
        per_iter = args.batch or 1
    n = samples * max(sizes) * per_iter
    if n > MAX_DRAWS:
        arg = "--mnt" if args.mnt else "--batch"
        raise ConfigError(None, arg, f"{samples} samples x G={max(sizes)} x {per_iter:,} requests per iteration make "
                                     f"{n:,} request draws, more than {MAX_DRAWS:,}: a smaller {arg}, fewer --samples "
                                     "or a longer --isl")


def check_plot_path(path: str) -> Path:
    """--plot names an image file (.png, .pdf, .svg) whose directory exists or can be made; checked before planning."""
    from ..deploy.out_path import check_out_file  # empty, loops, dangling links, too long, a file in the way

    return check_out_file(path, "--plot", suffixes=(".png", ".pdf", ".svg"))


def data_root(args) -> Path | None:
    return bench_dir(args) if args.target == "engine" else None


def run(args) -> int:
    from ..perf.planner import plan
    from ..perf.recommend import recommend
    from .plan_output import plan_json, print_table, write_plot

    if args.plot is not None:  # an empty --plot is refused, not taken for "no plot"
        check_plot_path(args.plot)
    spec = build_spec(args)
    rows = plan(spec)
    by_variant = {v: [r for r in rows if r.dep_variant == v] for v in spec.dep_variants}
    if args.plot:
        write_plot(spec, by_variant[spec.dep_variants[0]], args.plot)
    recs = {v: recommend(spec, rs) for v, rs in by_variant.items()}
    if args.json:
        print(json.dumps(plan_json(spec, rows, recs, data_root(args)), indent=1))
        return 0
    print_table(spec, by_variant, recs, verbose=args.verbose, root=data_root(args), wide=args.wide)
    if args.plot:
        print(f"plot: {args.plot}")
    return 0
