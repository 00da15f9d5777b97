"""`dwdp plan-placement`: the expert placement of a DWDP group, per-rank fetch and memory, source loads.

Prints a rich table (or JSON with --json): per dwdp_rank its local expert ranges, #local, #fetched,
bytes fetched per MoE layer and the per-rank memory estimate; then the per-source load (experts each
rank serves per layer) under both source policies, lowest_rank (upstream) and balanced.
Bad input raises ConfigError naming the flag or the file key (cli.main turns it into exit code 2).
Exit code 1 when --gpu-memory-gb is given and some rank does not fit.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from ..config import MAX_TOKENS, DwdpConfig, ModelConfig
from ..memory import GiB, MemoryBudgetError, check_memory, estimate_group_memory
from ..models import PRESETS
from ..placement import compact_ranges, make_placement
from ..schema import ConfigError, from_dict, load_yaml

#: DwdpConfig field -> flag that sets it (errors from the dataclass name the flag)
_FLAGS = {"dwdp_size": "--dwdp-size", "redundant_experts": "--redundant-experts",
          "num_experts_per_worker": "--num-experts-per-worker", "num_prefetch_experts": "--num-prefetch-experts",
          "weight_dtype": "--weight-dtype", "prefetch_depth": "--prefetch-depth", "source_policy": None}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan-placement", help="show the expert placement, fetches, memory and source loads",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="YAML with a dwdp: (or dwdp_config:) section and optionally a model: section; "
                                    "flags given explicitly override it")
    p.add_argument("--model", choices=sorted(PRESETS), help="model preset (default: the config's, else deepseek-r1)")
    p.add_argument("--num-layers", type=int, help="truncate the model to this many layers")
    p.add_argument("--dwdp-size", type=int, help="ranks in the DWDP group (G)")
    p.add_argument("--redundant-experts", type=int, help="derived placement: extra experts per rank")
    p.add_argument("--num-experts-per-worker", type=int, help="upstream placement: experts per rank")
    p.add_argument("--num-prefetch-experts", type=int, help="upstream placement: stride between ranks' ranges")
    p.add_argument("--weight-dtype", choices=("float32", "bf16", "fp8"), help="routed-expert weight dtype")
    p.add_argument("--prefetch-depth", type=int, help="layers prefetched ahead (slots = depth + 1)")
    p.add_argument("--max-num-tokens", type=int, help="add an activation estimate for this many tokens per rank")
    p.add_argument("--gpu-memory-gb", type=float, help="GPU memory in GiB (2^30 bytes); exit 1 if a rank does not fit")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return p


def _dwdp_section(data: dict) -> tuple[Any, str]:
    for name in ("dwdp", "dwdp_config"):
        if name in data:
            return data[name], name
    if data.keys() & {"model", "workload", "run"}:  # a bench config without a dwdp section: defaults
        return {}, "dwdp"
    return data, ""  # the DwdpConfig fields at the top level


def _load(args: argparse.Namespace) -> tuple[ModelConfig, DwdpConfig]:
    file = args.config
    prefix = ""
    dwdp_data: dict = {}
    model_cfg = ModelConfig(preset="deepseek-r1")
    if file:
        data = load_yaml(file)
        section, prefix = _dwdp_section(data)
        base = from_dict(DwdpConfig, section, file=file, prefix=prefix)  # reports file + key path
        dwdp_data = {f.name: getattr(base, f.name) for f in dataclasses.fields(DwdpConfig)}
        if "model" in data:
            model_cfg = from_dict(ModelConfig, data["model"], file=file, prefix="model")
    if args.model is not None or args.num_layers is not None:
        try:
            model_cfg = ModelConfig(preset=args.model or model_cfg.preset,
                                    num_layers=args.num_layers if args.num_layers is not None else model_cfg.num_layers,
                                    dtype=model_cfg.dtype, seed=model_cfg.seed, checkpoint=model_cfg.checkpoint)
        except ConfigError as e:
            raise ConfigError(None, "--num-layers" if e.key == "num_layers" else "--model", e.expected) from None
    for name, flag in _FLAGS.items():
        value = getattr(args, name, None)
        if flag and value is not None:
            dwdp_data[name] = value
    try:
        cfg = DwdpConfig(**dwdp_data)
    except ConfigError as e:
        flag = _FLAGS.get(e.key) if e.key in _FLAGS and getattr(args, e.key, None) is not None else None
        raise ConfigError(None if flag else file, flag or (f"{prefix}.{e.key}" if prefix else e.key), e.expected) from None
    spec = model_cfg.spec()
    try:
        cfg.validate_for(spec.num_experts, file=file, prefix=prefix, num_moe_layers=spec.num_moe_layers)
    except ConfigError as e:
        flag = _FLAGS.get(e.key.split(".")[-1])
        if flag and getattr(args, e.key.split(".")[-1], None) is not None:
            raise ConfigError(None, flag, e.expected) from None
        raise
    return model_cfg, cfg


def build_report(model_cfg: ModelConfig, cfg: DwdpConfig, *, max_num_tokens: int | None = None,
                 gpu_memory_bytes: int | None = None) -> dict:
    """Everything the command prints, as plain data (the --json output)."""
    spec = model_cfg.spec()
    placements = {pol: make_placement(dataclasses.replace(cfg, source_policy=pol), spec.num_experts)
                  for pol in ("lowest_rank", "balanced")}
    placement = placements[cfg.source_policy]
    mems = estimate_group_memory(spec, cfg, placement, max_num_tokens=max_num_tokens)
    fit_error = None
    if gpu_memory_bytes is not None:
        try:
            check_memory(spec, cfg, placement, gpu_memory_bytes, max_num_tokens=max_num_tokens)
        except MemoryBudgetError as e:
            fit_error = e.expected
    expert_bytes = spec.expert_bytes(cfg.weight_dtype)
    ranks = []
    for r in range(cfg.dwdp_size):
        fetched = placement.fetch_experts(r)
        ranks.append({
            "dwdp_rank": r, "local_experts": compact_ranges(placement.local_experts[r]),
            "num_local": len(placement.local_experts[r]), "num_fetched": len(fetched),
            "fetch_bytes_per_layer": len(fetched) * expert_bytes, "memory": mems[r].breakdown()})
    loads = {pol: {"per_source": p.source_load(), "max": p.max_source_load()} for pol, p in placements.items()}
    return {
        "model": spec.name, "num_layers": spec.num_layers, "num_moe_layers": spec.num_moe_layers,
        "num_experts": spec.num_experts, "dwdp_size": cfg.dwdp_size,
        "placement": "upstream" if cfg.upstream_placement else "derived",
        "redundant_experts": cfg.redundant_experts, "num_experts_per_worker": cfg.num_experts_per_worker,
        "num_prefetch_experts": cfg.num_prefetch_experts, "weight_dtype": cfg.weight_dtype,
        "expert_bytes": expert_bytes, "source_policy": cfg.source_policy, "max_num_tokens": max_num_tokens,
        "ranks": ranks, "source_load": loads, "gpu_memory_bytes": gpu_memory_bytes,
        "fits": None if gpu_memory_bytes is None else fit_error is None, "fit_error": fit_error,
    }


def _fmt_bytes(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / (1 << 20):.1f} MiB"


def _print_tables(rep: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True)
    mode = (f"upstream: {rep['num_experts_per_worker']} experts per worker, stride {rep['num_prefetch_experts']}"
            if rep["placement"] == "upstream" else f"derived, redundant_experts={rep['redundant_experts']}")
    title = (f"{rep['model']} ({rep['num_layers']} layers, {rep['num_moe_layers']} MoE, {rep['num_experts']} experts), "
             f"dwdp_size={rep['dwdp_size']}, {mode}, {rep['weight_dtype']} "
             f"(one expert {_fmt_bytes(rep['expert_bytes'])}), source_policy={rep['source_policy']}")
    t = Table(title=title, title_justify="left")
    for col in ("dwdp_rank", "local experts", "#local", "#fetched", "fetched/layer", "memory"):
        t.add_column(col, justify="left" if col == "local experts" else "right")
    for r in rep["ranks"]:
        t.add_row(str(r["dwdp_rank"]), r["local_experts"], str(r["num_local"]), str(r["num_fetched"]),
                  _fmt_bytes(r["fetch_bytes_per_layer"]), _fmt_bytes(r["memory"]["total"]))
    console.print(t)
    s = Table(title="per-source load (experts served per layer)", title_justify="left")
    s.add_column("policy")
    for r in range(rep["dwdp_size"]):
        s.add_column(f"src {r}", justify="right")
    s.add_column("max", justify="right")
    for pol, load in rep["source_load"].items():
        s.add_row(pol, *map(str, load["per_source"]), str(load["max"]))
    console.print(s)
    m = rep["ranks"][0]["memory"]
    console.print("memory of dwdp_rank 0: " + ", ".join(f"{k} {_fmt_bytes(v)}" for k, v in m.items()))
    if rep["fits"] is not None:
        console.print(f"fits in {_fmt_bytes(rep['gpu_memory_bytes'])}: {'yes' if rep['fits'] else 'NO'}")


def run(args: argparse.Namespace) -> int:
    if args.gpu_memory_gb is not None and not 0 < args.gpu_memory_gb < 1e5:
        raise ConfigError(None, "--gpu-memory-gb", f"expected a finite number of GiB in (0, 1e5), got {args.gpu_memory_gb}")
    if args.max_num_tokens is not None and not 1 <= args.max_num_tokens <= MAX_TOKENS:
        raise ConfigError(None, "--max-num-tokens", f"expected an integer in [1, {MAX_TOKENS:,}], got {args.max_num_tokens}")
    model_cfg, cfg = _load(args)
    gpu = None if args.gpu_memory_gb is None else int(args.gpu_memory_gb * GiB)
    rep = build_report(model_cfg, cfg, max_num_tokens=args.max_num_tokens, gpu_memory_bytes=gpu)
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        _print_tables(rep)
    if rep["fits"] is False:
        print(f"dwdp plan-placement: does not fit: {rep['fit_error']}", file=sys.stderr)
        return 1
    return 0
