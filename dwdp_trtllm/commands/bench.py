"""`dwdp bench CONFIG.yaml`: run a DWDP vs DEP context-phase benchmark (sweeps, resumable)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench", help="benchmark DWDP against DEP on the embedded engine (config-driven, sweeps, resumable)",
        description="Run every point of a bench config (list-valued keys are swept as a cross product) for each "
                    "mode in run.modes, print DEP | DWDP | DWDP/DEP tables and write results.json, results.csv and "
                    "plots. Finished points (out/points/<hash>.json) are not rerun.")
    p.add_argument("config", type=Path, help="bench YAML (see configs/bench/ and docs/CONFIG.md)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="override run.device")
    p.add_argument("--ranks", type=int, default=None, help="override run.ranks (processes launched)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default bench_out/<config stem>)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. --set workload.isl=16384 or --set 'workload.isl=[1024,4096]' "
                        "(repeatable; VALUE is YAML)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--max-points", type=int, default=None, metavar="N",
                   help="refuse sweeps of more than N points (default 10000), counted before anything is expanded")
    p.add_argument("--floor", action="store_true",
                   help="also time the stock-kernel floor of every measured iteration (projection GEMMs, attention "
                        "core, grouped expert GEMMs of the routing produced, shared expert, router, dense MLP) and "
                        "report engine efficiency = floor / measured per phase (docs/BENCHMARKS.md)")
    return p


def _max_points(args) -> int:
    from ..schema import MAX_SWEEP_POINTS, ConfigError

    if args.max_points is None:
        return MAX_SWEEP_POINTS
    if args.max_points < 1:
        raise ConfigError(None, "--max-points", f"expected an integer >= 1, got {args.max_points}")
    return args.max_points


def run(args: argparse.Namespace) -> int:
    from .. import env
    from ..bench.runner import follow_bench, run_bench

    launched = env.launch_env()
    if launched is None:  # the usual case: this process spawns the ranks itself
        result = run_bench(args.config, args.overrides, device=args.device, ranks=args.ranks, out_dir=args.out,
                           plots=not args.no_plots, floor=args.floor, max_points=_max_points(args))
        return 0 if result["consistent"] else 1
    # Under torchrun / mpirun every process is one rank: rank 0 reports, the others follow the same points.
    from ..engine.launcher import run_in_process

    import torch.distributed as dist

    ranks = args.ranks if args.ranks is not None else launched["world_size"]
    if launched["rank"] != 0:
        follow_bench(args.config, args.overrides, device=args.device, ranks=ranks, out_dir=args.out,
                     run_mode=run_in_process)
        code = 0
    else:
        result = run_bench(args.config, args.overrides, device=args.device, ranks=ranks, out_dir=args.out,
                           plots=not args.no_plots, floor=args.floor,
                           run_mode=lambda cfg, mode, queues, progress=None: run_in_process(cfg, mode, queues))
        code = 0 if result["consistent"] else 1
    # On success only (an error propagates and the launcher ends the others): a gloo group still alive at
    # interpreter exit aborts the process, so every rank leaves it together.
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return code
