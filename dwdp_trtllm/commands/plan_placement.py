"""`dwdp plan-placement`: the expert placement of a DWDP group, per-rank fetch and memory, source loads.

Prints a rich table (or JSON with --json): per dwdp_rank its local expert ranges, #local, #fetched,
bytes fetched per MoE layer and the rank's memory (memory.rank_memory, GB = 1e9 bytes, the same parts and
totals as `dwdp plan` and `dwdp gen-config`), DEP at the same size beside it and the smallest GPU count that
fits per mode; then the per-source load (experts each rank serves per layer) under both source policies,
lowest_rank (upstream) and balanced. Defaults as every command: deepseek-r1, fp8, h200's memory, 16384 tokens.
Bad input raises ConfigError naming the flag or the file key (cli.main turns it into exit code 2). A DWDP rank
that does not fit the GPU is such bad input too (exit code 2, as `dwdp gen-config`): the report is printed, then one
line naming the settings that shrink the rank as the user gives them (the flags, or the --config file's keys).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from ..byte_units import fmt_bytes
from ..spec.config import MAX_TOKENS, DwdpConfig, ModelConfig
from ..deploy import memory as mem
from ..spec.models import PRESETS, ModelSpec
from ..core.placement import compact_ranges, make_placement
from ..spec.schema import ConfigError, from_dict, load_yaml
from .deploy_args import add_gpu_args, gpu_budget_bytes

#: DwdpConfig field -> flag that sets it (errors from the dataclass name the flag)
_FLAGS = {"dwdp_size": "--dwdp-size", "redundant_experts": "--redundant-experts",
          "num_experts_per_worker": "--num-experts-per-worker", "num_prefetch_experts": "--num-prefetch-experts",
          "prefetch_depth": "--prefetch-depth", "source_policy": None}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan-placement", help="show the expert placement, fetches, memory and source loads",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="YAML with a dwdp: (or dwdp_config:) section and optionally a model: section; "
                                    "flags given explicitly override it")
    p.add_argument("--model", help=f"model preset ({', '.join(sorted(PRESETS))}; default: the config's, else "
                                   f"{mem.DEFAULT_MODEL}), or a checkpoint's config.json / directory: its dimensions "
                                   "only (model_dims.py, as `dwdp plan --model`), any MoE family")
    p.add_argument("--num-layers", type=int, help="truncate the model to this many layers")
    p.add_argument("--dwdp-size", type=int, help="ranks in the DWDP group (G; default: the config's, else the smallest "
                                                 "power of two whose ranks fit the GPU, as `dwdp plan` and gen-config)")
    p.add_argument("--redundant-experts", type=int, help="derived placement: extra experts per rank")
    p.add_argument("--num-experts-per-worker", type=int, help="upstream placement: experts per rank")
    p.add_argument("--num-prefetch-experts", type=int, help="upstream placement: stride between ranks' ranges")
    p.add_argument("--weight-dtype", choices=("float32", *mem.WEIGHT_DTYPES),
                   help=f"routed-expert weight dtype (default: the config's, else {mem.DEFAULT_WEIGHT_DTYPE})")
    p.add_argument("--prefetch-depth", type=int, help="layers prefetched ahead (slots = depth + 1)")
    p.add_argument("--max-num-tokens", type=int, default=mem.DEFAULT_MAX_NUM_TOKENS,
                   help=f"tokens per rank and iteration: activations and KV-cache floor (default {mem.DEFAULT_MAX_NUM_TOKENS})")
    add_gpu_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return p


def _dwdp_section(data: dict) -> tuple[Any, str]:
    for name in ("dwdp", "dwdp_config"):
        if name in data:
            return data[name], name
    if data.keys() & {"model", "workload", "run"}:  # a bench config without a dwdp section: defaults
        return {}, "dwdp"
    return data, ""  # the DwdpConfig fields at the top level


def _dims_only(args: argparse.Namespace) -> ModelSpec | None:
    """--model as a config.json path: the dims-only spec (model_dims.py, the reader `dwdp plan` uses), truncated by
    --num-layers; None for a preset. An unknown name is refused naming --model."""
    from ..spec.model_dims import dims_from_config_json, is_config_path

    if args.model is None or args.model in PRESETS:
        return None
    if not is_config_path(args.model):
        raise ConfigError(None, "--model", f"expected one of {', '.join(sorted(PRESETS))} or a config.json path, "
                                           f"got {args.model!r}")
    spec = dims_from_config_json(args.model)  # ConfigError names the file and key
    if args.num_layers is None:
        return spec
    if not 1 <= args.num_layers <= spec.num_layers:
        raise ConfigError(None, "--num-layers", f"expected an integer in [1, {spec.num_layers}] ({args.model}'s "
                                                f"layers), got {args.num_layers}")
    return spec.truncated(args.num_layers)


def _load(args: argparse.Namespace, data: dict | None, *, weight_dtype: str = mem.DEFAULT_WEIGHT_DTYPE,
          gpu_bytes: int | None = None) -> tuple[ModelSpec, DwdpConfig]:
    """The model's spec and the DwdpConfig: the --config file's (data: its mapping, read once by run), flags on top
    (--model a preset or a config.json), validated once; a group size given by neither is memory.default_dwdp_size
    (priced for `weight_dtype` on `gpu_bytes`), the default every deployment command shares."""
    file = args.config
    prefix = ""
    section: Any = {}
    model_cfg = ModelConfig(preset=mem.DEFAULT_MODEL)
    if data is not None:
        section, prefix = _dwdp_section(data)
        if section is None:
            section = {}
        if not isinstance(section, dict):
            from_dict(DwdpConfig, section, file=file, prefix=prefix)  # raises: the section is not a mapping
        if "model" in data:
            model_cfg = from_dict(ModelConfig, data["model"], file=file, prefix="model")
    size_given = args.dwdp_size is not None or "dwdp_size" in section
    dims = _dims_only(args)
    if dims is None and (args.model is not None or args.num_layers is not None):
        try:
            model_cfg = ModelConfig(preset=args.model or model_cfg.preset,
                                    num_layers=args.num_layers if args.num_layers is not None else model_cfg.num_layers,
                                    dtype=model_cfg.dtype, seed=model_cfg.seed, checkpoint=model_cfg.checkpoint)
        except ConfigError as e:
            raise ConfigError(None, "--num-layers" if e.key == "num_layers" else "--model", e.expected) from None
    dwdp_data = dict(section)
    for name, flag in _FLAGS.items():
        value = getattr(args, name, None)
        if flag and value is not None:
            dwdp_data[name] = value
    if not size_given and gpu_bytes is not None:
        dwdp_data["dwdp_size"] = mem.default_dwdp_size(dims or model_cfg.spec(), gpu_bytes, weight_dtype=weight_dtype,
                                                       max_num_tokens=args.max_num_tokens)
    try:
        cfg = from_dict(DwdpConfig, dwdp_data, file=file, prefix=prefix)  # reports file + key path
    except ConfigError as e:
        name = e.key.split(".")[-1]
        if _FLAGS.get(name) and getattr(args, name, None) is not None:  # the flag's value, not the file's
            raise ConfigError(None, _FLAGS[name], e.expected) from None
        raise
    spec = dims or model_cfg.spec()
    try:
        cfg.validate_for(spec.num_experts, file=file, prefix=prefix, num_moe_layers=spec.num_moe_layers)
    except ConfigError as e:
        flag = _FLAGS.get(e.key.split(".")[-1])
        if flag and getattr(args, e.key.split(".")[-1], None) is not None:
            raise ConfigError(None, flag, e.expected) from None
        raise
    return spec, cfg


def _settings(args: argparse.Namespace, data: dict | None, spec: ModelSpec, cfg: DwdpConfig,
              weight_dtype: str) -> tuple[list[str], str | None, str]:
    """The settings that shrink a rank, each named where the user sets it: its flag when given, or when nothing set it
    (a default is changed by its flag); the --config file's key when the file set it. With the file and key of the
    group size (the error's subject, as gen-config's --dwdp-size)."""
    section, prefix = _dwdp_section(data) if data is not None else ({}, "")
    section = section if isinstance(section, dict) else {}
    model = data.get("model") if data is not None else None
    model = model if isinstance(model, dict) else {}

    def key(name: str) -> str:
        return f"{prefix}.{name}" if prefix else name

    def one(flag: str, given: Any, file_key: str | None, value: Any) -> str:
        return f"{flag} {value}" if given is not None or file_key is None else f"{file_key}={value} in {args.config}"

    placement = "num_experts_per_worker" if cfg.upstream_placement else "redundant_experts"
    out = [one(_FLAGS[n], getattr(args, n), key(n) if n in section else None, getattr(cfg, n))
           for n in ("dwdp_size", placement, "prefetch_depth")]
    out.append(one("--weight-dtype", args.weight_dtype, key("weight_dtype") if "weight_dtype" in section else None,
                   weight_dtype))
    out.append(one("--num-layers", args.num_layers, "model.num_layers" if "num_layers" in model else None,
                   spec.num_layers))
    out.append(f"--max-num-tokens {args.max_num_tokens}")  # a flag only (the file's workload section is not read)
    size_in_file = args.dwdp_size is None and "dwdp_size" in section
    return out, (args.config if size_in_file else None), (key("dwdp_size") if size_in_file else "--dwdp-size")


def priced_gemm(data: dict | None, weight_dtype: str, gpu: str) -> tuple[str, str]:
    """(gemm, how): the TensorRT-LLM adapter path whose prefetch slots are priced (memory.slot_experts): the config
    file's gemm when it names one the adapter runs (merge holds [E, ...] slots; a `dwdp bench` config's gemm is the
    embedded engine's, whose slots hold the fetched experts on every path: not taken), else the path the adapter
    takes first on --gpu (moe_evidence.priced_gemm), as gen-config prices it."""
    bench = bool(data) and bool(data.keys() & {"model", "workload", "run"})
    section = _dwdp_section(data)[0] if data and not bench else {}
    g = section.get("gemm") if isinstance(section, dict) else None
    if g in mem.ADAPTER_GEMMS:
        return g, "the config file's gemm"
    from ..integration.moe_evidence import priced_gemm as default_path
    return default_path(weight_dtype, gpu)


def build_report(spec: ModelSpec, cfg: DwdpConfig, *, weight_dtype: str, max_num_tokens: int,
                 gpu_memory_bytes: int, settings: list[str],
                 fit: mem.DeploymentFit | None = None, gemm: tuple[str, str] | None = None) -> dict:
    """Everything the command prints, as plain data (the --json output); memory in GB (memory.RankMemory.to_dict).
    `settings`: what fit_error tells to change (run's _settings: flags or file keys).
    `fit`: memory.fit_deployment's answer for these inputs when the caller has it (run: it prints its lines).
    `gemm`: (path, how) whose slots are priced (priced_gemm); None: the embedded engine's fetched-expert slots."""
    g = gemm[0] if gemm else None
    placements = {pol: make_placement(dataclasses.replace(cfg, source_policy=pol), spec.num_experts)
                  for pol in ("lowest_rank", "balanced")}
    placement = placements[cfg.source_policy]
    wd = weight_dtype  # not cfg.weight_dtype: the engine's DwdpConfig knows no mxfp4 / nvfp4
    ranks_mem = mem.dwdp_ranks(spec, cfg, weight_dtype=wd, max_num_tokens=max_num_tokens, gpu_bytes=gpu_memory_bytes,
                               placement=placement, gemm=g)
    fit = fit or mem.fit_deployment(spec, cfg, gpu_memory_bytes, weight_dtype=wd, max_num_tokens=max_num_tokens, gemm=g)
    fit_error = None
    if not fit.fits:
        fit_error = f"{mem.over_budget(fit.dwdp, settings).expected}; {fit.smallest_line()}"
    expert_bytes = spec.expert_bytes(wd)
    ranks = []
    for r in range(cfg.dwdp_size):
        fetched = placement.fetch_experts(r)
        ranks.append({
            "dwdp_rank": r, "local_experts": compact_ranges(placement.local_experts[r]),
            "num_local": len(placement.local_experts[r]), "num_fetched": len(fetched),
            "fetch_bytes_per_layer": len(fetched) * expert_bytes, "memory": ranks_mem[r].to_dict()})
    loads = {pol: {"per_source": p.source_load(), "max": p.max_source_load()} for pol, p in placements.items()}
    return {
        "model": spec.name, "num_layers": spec.num_layers, "num_moe_layers": spec.num_moe_layers,
        "num_experts": spec.num_experts, "dwdp_size": cfg.dwdp_size,
        "placement": "upstream" if cfg.upstream_placement else "derived",
        "redundant_experts": cfg.redundant_experts, "num_experts_per_worker": cfg.num_experts_per_worker,
        "num_prefetch_experts": cfg.num_prefetch_experts, "weight_dtype": wd,
        "expert_bytes": expert_bytes, "source_policy": cfg.source_policy, "max_num_tokens": max_num_tokens,
        "ranks": ranks, "source_load": loads,
        "memory": {"unit": mem.UNIT, "dwdp": fit.dwdp.to_dict(), "dep": fit.dep.to_dict(),
                   "gemm_priced_how": gemm[1] if gemm else None,
                   "smallest_fitting": {"dwdp": fit.smallest_fitting_dwdp_size, "dep": fit.smallest_fitting_dep_size}},
        "gpu_memory_gb": gpu_memory_bytes / mem.GB, "fits": fit.fits, "fit_error": fit_error,
    }


def size_candidates_note(fit: mem.DeploymentFit) -> str:
    """Why `dwdp size` may deploy more GPUs than the smallest count that fits: it searches only its candidate group
    sizes (commands/size.py DEFAULTS, --dwdp-size / --dep-size), while plan-placement and gen-config count any GPU
    number. Names the candidate each mode's smallest count rounds up to."""
    from .size import DEFAULTS

    def sizes(key: str) -> list[int]:
        return [int(x) for x in DEFAULTS[key].split(",")]

    def deployed(mode: str, n: int | None, cands: list[int]) -> str:
        up = next((c for c in cands if n is not None and c >= n), None)
        return f"{mode}{up}" if up is not None else f"no {mode} candidate"

    dw, dp = sizes("dwdp_size"), sizes("dep_size")
    return (f"(any GPU count; `dwdp size` tries only DWDP groups of {', '.join(map(str, dw))} and DEP servers of "
            f"{', '.join(map(str, dp))} GPUs by default (--dwdp-size, --dep-size), so here it would deploy "
            f"{deployed('DWDP', fit.smallest_fitting_dwdp_size, dw)} and "
            f"{deployed('DEP', fit.smallest_fitting_dep_size, dp)})")


def _print_tables(rep: dict, fit: mem.DeploymentFit) -> None:
    """The report in at most 80 columns (commands/terminal.py's width): the title and memory lines wrapped, the rank
    table, the per-source load with one row per source rank (any group size fits; names never cut)."""
    from rich.console import Console
    from rich.table import Table

    from .terminal import width, wrap

    console = Console(highlight=False, soft_wrap=True, width=width())
    say = lambda text, **kw: console.print(wrap(text, **kw))  # noqa: E731
    mode = (f"upstream: {rep['num_experts_per_worker']} experts per worker, stride {rep['num_prefetch_experts']}"
            if rep["placement"] == "upstream" else f"derived, redundant_experts={rep['redundant_experts']}")
    say(f"{rep['model']} ({rep['num_layers']} layers, {rep['num_moe_layers']} MoE, {rep['num_experts']} experts), "
        f"dwdp_size={rep['dwdp_size']}, {mode}, {rep['weight_dtype']} (one expert {fmt_bytes(rep['expert_bytes'])}), "
        f"source_policy={rep['source_policy']}")
    t = Table()
    for col in ("dwdp_rank", "local experts", "#local", "#fetched", "fetched/layer", "memory"):
        t.add_column(col, justify="left" if col == "local experts" else "right", overflow="fold")
    for r in rep["ranks"]:
        t.add_row(str(r["dwdp_rank"]), r["local_experts"], str(r["num_local"]), str(r["num_fetched"]),
                  fmt_bytes(r["fetch_bytes_per_layer"]), f'{r["memory"]["total_gb"]:.2f} GB')
    console.print(t, soft_wrap=False)
    say("per-source load (experts each source rank serves per layer)")
    s = Table()
    s.add_column("source rank", justify="right")
    pols = list(rep["source_load"])
    for pol in pols:
        s.add_column(pol, justify="right", no_wrap=True)
    for r in range(rep["dwdp_size"]):
        s.add_row(str(r), *(str(rep["source_load"][pol]["per_source"][r]) for pol in pols))
    s.add_row("max", *(str(rep["source_load"][pol]["max"]) for pol in pols), style="bold")
    console.print(s, soft_wrap=False)
    for rank in (fit.dwdp, fit.dep):  # memory's lines, as gen-config prints them
        say(rank.describe(worst=True))
    if rep["memory"]["gemm_priced_how"]:
        say(f"(prefetch slots priced for gemm {fit.dwdp.gemm}: {rep['memory']['gemm_priced_how']})", indent="  ",
            hang="   ")
    say(fit.smallest_line())
    say(size_candidates_note(fit), indent="  ", hang="   ")


def _weight_dtype(args: argparse.Namespace, data: dict | None) -> str | None:
    """--weight-dtype, else the config file's dwdp.weight_dtype when it sets one (data: the file's mapping), else None
    (the shared default)."""
    if args.weight_dtype is not None or data is None:
        return args.weight_dtype
    section, _ = _dwdp_section(data)
    return section.get("weight_dtype") if isinstance(section, dict) else None


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.max_num_tokens <= MAX_TOKENS:
        raise ConfigError(None, "--max-num-tokens", f"expected an integer in [1, {MAX_TOKENS:,}], got {args.max_num_tokens}")
    gpu = gpu_budget_bytes(args.gpu, args.gpu_memory_gb)
    data = load_yaml(args.config) if args.config else None  # the one read of the file
    wd = _weight_dtype(args, data) or mem.DEFAULT_WEIGHT_DTYPE
    spec, cfg = _load(args, data, weight_dtype=wd, gpu_bytes=gpu)
    settings, file, key = _settings(args, data, spec, cfg, wd)
    gemm = priced_gemm(data, wd, args.gpu)
    fit = mem.fit_deployment(spec, cfg, gpu, weight_dtype=wd, max_num_tokens=args.max_num_tokens, gemm=gemm[0])
    rep = build_report(spec, cfg, weight_dtype=wd, max_num_tokens=args.max_num_tokens, gpu_memory_bytes=gpu,
                       settings=settings, fit=fit, gemm=gemm)
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        _print_tables(rep, fit)
    if not rep["fits"]:  # after the report (where the memory goes), the one line and exit 2 of gen-config's misfit
        raise ConfigError(file, key, f"does not fit: {rep['fit_error']}")
    return 0
