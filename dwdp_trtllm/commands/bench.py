"""`dwdp bench CONFIG.yaml`: run a DWDP vs DEP context-phase benchmark (sweeps, resumable)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    from ..bench.floor_sustained import MAX_RANKS  # pure (no torch): the limit --help states

    p = subparsers.add_parser(
        "bench", help="benchmark DWDP against DEP on the embedded engine (config-driven, sweeps, resumable)",
        description="Run every point of a bench config (list-valued keys are swept as a cross product) for each "
                    "mode in run.modes, print DEP | DWDP | DWDP gain (> 1 = better) tables and write results.json, results.csv and "
                    "plots. Finished points (out/points/<hash>.json) are not rerun unless --force.")
    p.add_argument("config", type=Path, help="bench YAML (see configs/bench/ and docs/CONFIG.md)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="override run.device")
    p.add_argument("--ranks", type=int, default=None, help="override run.ranks (processes launched)")
    p.add_argument("--out", default=None, help="output directory (default bench_out/<config stem>)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. --set workload.isl=16384 or --set 'workload.isl=[1024,4096]' "
                        "(repeatable; VALUE is YAML)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--max-points", type=int, default=None, metavar="N",
                   help="refuse sweeps of more than N points (default 10000), counted before anything is expanded")
    p.add_argument("--floor", action="store_true",
                   help="also time the stock-kernel floor of every measured iteration (projection GEMMs, attention "
                        "core, grouped expert GEMMs of the routing produced, shared expert, router, dense MLP) and "
                        "report engine efficiency = floor / measured per phase (docs/BENCHMARKS.md); cuda only: on "
                        "a CPU the ranks share the cores the floor is timed on, so the ratio means nothing")
    p.add_argument("--floor-sustained", action="store_true",
                   help="with --floor: also time the floor under sustained load (its kernels replayed back to back, "
                        "every measured iteration in order, at least as long as the engine's measured iterations ran (5-60 "
                        "passes), after "
                        "a warm-up to a steady pass time) and report the SM clock / power of the burst floor, the "
                        "sustained floor and the engine; engine / floor(sustained) separates engine overhead from "
                        f"clock (bench/floor_sustained.py); at most {MAX_RANKS} ranks: every rank's iterations are "
                        "replayed on cuda:0, so a pass takes about ranks x the engine's span")
    p.add_argument("--floor-warmup-s", default=None, metavar="S",
                   help="with --floor-sustained: seconds of replays before timing (default 3; 0.5-60; the warm-up "
                        "goes on until the pass time settles, at most 4x this)")
    p.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="run every point N times (every mode, the same requests) and report the median and min-max "
                        "of every rate, TTFT and gain; overrides run.repeat (default 1; the quickstart sets 3)")
    p.add_argument("--force", action="store_true",
                   help="run every point again, also those already finished in --out (default: finished points are "
                        "read back, not rerun)")
    return p


def _check_floor_device(points) -> None:
    """--floor times stock kernels against the engine on the same device; on a CPU the ranks and the floor share
    the same few cores (a floor 3-40x slower than the engine it bounds was seen): refused, exit 2. Run by run_bench
    on the points it loads (bench/runner.py check_points), so the sweep is loaded once."""
    from ..spec.schema import ConfigError

    cpu = sorted({p.config.run.device for p in points} - {"cuda"})
    if cpu:
        raise ConfigError(None, "--floor", f"needs run.device: cuda, got {', '.join(cpu)} (on a CPU the floor is timed "
                                           "on the cores the ranks share: the ratio would mean nothing)")


def _floor_checks(sustained):
    """run_bench's check_points for --floor: the device, and with --floor-sustained the ranks
    (floor_sustained.check_ranks)."""
    def check(points) -> None:
        _check_floor_device(points)
        if sustained is not None:
            from ..bench.floor_sustained import check_ranks
            check_ranks(points)
    return check


def _max_points(args) -> int:
    from ..spec.schema import MAX_SWEEP_POINTS, ConfigError

    if args.max_points is None:
        return MAX_SWEEP_POINTS
    if args.max_points < 1:
        raise ConfigError(None, "--max-points", f"expected an integer >= 1, got {args.max_points}")
    return args.max_points


def floor_sustained(args: argparse.Namespace):
    """--floor-sustained / --floor-warmup-s as SustainedSettings (None without --floor-sustained); ConfigError naming
    the flag (exit 2) for one without the flag it needs or a bad number, before anything runs."""
    from ..bench.floor_sustained import SustainedSettings, check_warmup_s
    from ..spec.schema import ConfigError

    if args.floor_warmup_s is not None and not args.floor_sustained:
        raise ConfigError(None, "--floor-warmup-s", "needs --floor-sustained")
    if not args.floor_sustained:
        return None
    if not args.floor:
        raise ConfigError(None, "--floor-sustained", "needs --floor (the sustained floor is timed beside it)")
    if args.floor_warmup_s is None:
        return SustainedSettings()
    return SustainedSettings(warmup_s=check_warmup_s(args.floor_warmup_s))


def run(args: argparse.Namespace) -> int:
    from .. import env
    from ..bench.runner import follow_bench, run_bench

    sustained = floor_sustained(args)
    check = _floor_checks(sustained) if args.floor else None
    launched = env.launch_env()
    if launched is None:  # the usual case: this process spawns the ranks itself
        result = run_bench(args.config, args.overrides, device=args.device, ranks=args.ranks, out_dir=args.out,
                           plots=not args.no_plots, floor=args.floor, max_points=_max_points(args), force=args.force,
                           repeat=args.repeat, check_points=check, floor_sustained=sustained)
        return 0 if result["consistent"] else 1
    # Under torchrun / mpirun every process is one rank: rank 0 reports, the others follow the same points.
    from ..engine.launcher import run_in_process

    import torch.distributed as dist

    ranks = args.ranks if args.ranks is not None else launched["world_size"]
    if launched["rank"] != 0:
        follow_bench(args.config, args.overrides, device=args.device, ranks=ranks, out_dir=args.out,
                     run_mode=run_in_process, force=args.force, repeat=args.repeat, check_points=check)
        code = 0
    else:
        result = run_bench(args.config, args.overrides, device=args.device, ranks=ranks, out_dir=args.out,
                           plots=not args.no_plots, floor=args.floor, force=args.force, repeat=args.repeat,
                           check_points=check, floor_sustained=sustained,
                           run_mode=lambda cfg, mode, queues, progress=None, **kw: run_in_process(cfg, mode, queues, **kw))
        code = 0 if result["consistent"] else 1
    # On success only (an error propagates and the launcher ends the others): a gloo group still alive at
    # interpreter exit aborts the process, so every rank leaves it together.
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return code
