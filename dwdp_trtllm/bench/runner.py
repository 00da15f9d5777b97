"""`dwdp bench` end to end: sweep points -> engine runs per mode -> metrics -> files, resumable.

Layout of out_dir:
    points/<point hash>.json   one finished point (a report "run" dict, timeline included), written
                               atomically after the point's last mode; its presence means "done"
    results.json, results.csv  every point of this sweep, rewritten at the end
    plots/ratio*.png, plots/timeline_<hash>.png
A point is keyed by the hash of its full config, so changing any value reruns it and an interrupted
sweep continues where it stopped.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..spec.config import BenchConfig
from ..engine.records import RankResult, Request
from .floor_sustained import measured_window
from .metrics import compute_metrics, consistency
from .preflight import nothing_to_fetch_note, preflight
from .repeats import merge_repeats
from ..deploy.out_path import check_out_dir
from ..spec.schema import MAX_SWEEP_POINTS, ConfigError
from .report import env_info, json_ready, point_label, print_point, write_atomic, write_results
from .sweep import SweepPoint, check_device_present, load_sweep
from .timeline import steady_timeline
from ..spec.workload import generate_requests

RunMode = Callable[..., list[RankResult]]


def skew_kwargs(popularity_LE) -> dict:
    """What a RunMode is given besides (cfg, mode, queues, progress): popularity_LE=the point's routing-skew table
    (SweepPoint.popularity_LE: the counts file read once, by load_sweep) when the skew is on; nothing when off, so a
    RunMode without routing skew (bench/synthetic.py, test fakes) keeps the plain signature."""
    return {} if popularity_LE is None else {"popularity_LE": popularity_LE}


def engine_run_mode() -> RunMode:
    """The embedded engine's run_mode, imported only when a real run starts."""
    from ..engine.launcher import run_mode

    return run_mode


def _load_point(path: Path, console: Console | None = None) -> dict | None:
    try:
        run = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        run = None  # unreadable or truncated
    if not (isinstance(run, dict) and isinstance(run.get("metrics"), dict) and isinstance(run.get("config"), dict)):
        if console is not None:
            console.print(f"[yellow]warning:[/] {path} is not a finished point (unreadable or of the wrong shape): "
                          "running that point again", soft_wrap=True)
        return None
    return run


_write_atomic = write_atomic


@contextlib.contextmanager
def out_lock(out: Path):
    """Hold an exclusive lock on out/.dwdp.lock for the run: a second `dwdp bench` into the same folder is refused
    (it would compute every point again and race this one's writes). The file is removed when the run ends, so a
    clean exit leaves no lock behind; a killed run's file holds no lock (flock ends with the process)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(str(out), "--out", "is a file; expected a directory (or a path to create)")
    lock = out / ".dwdp.lock"
    made = [d for d in (*reversed(out.parents), out, out / "points") if not d.exists()]  # removed again if we fail here
    for _ in range(3):  # a lock file removed by a run ending between our open and our flock: open it again
        try:
            out.mkdir(parents=True, exist_ok=True)
            if (out / "points").exists() and not (out / "points").is_dir():
                raise ConfigError(str(out / "points"), "--out", "is a file; the run keeps its finished points in this directory")
            (out / "points").mkdir(exist_ok=True)
            f = open(lock, "a+")
        except OSError as e:
            raise ConfigError(str(out), "--out", f"cannot create or write the output directory ({e.strerror})") from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise ConfigError(str(out), "--out", f"another `dwdp bench` ({holder}) is writing here; wait for it to finish "
                                                 "or choose another --out") from None
        try:
            same = os.fstat(f.fileno()).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()
    else:
        raise ConfigError(str(out), "--out", "another `dwdp bench` keeps replacing .dwdp.lock here; choose another --out")
    try:
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}")
        f.flush()
    except OSError as e:  # a full (or failing) filesystem at the start: nothing of this run is left
        try:
            f.close()  # flushes what is still buffered: the same error again
        except OSError:
            pass
        lock.unlink(missing_ok=True)
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                break
        raise ConfigError(str(lock), "--out", f"cannot write the run's lock file ({e.strerror or e}): the output "
                                              "directory's filesystem must have room for the results") from None
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # still holding the lock: nobody else can have taken it
        f.close()


def _device_name(results: dict[str, list[RankResult]]) -> str | None:
    """The ranks' device name (RankResult.device is e.g. 'NVIDIA H200' on cuda, 'cpu' on cpu)."""
    names = sorted({r.device for res in results.values() for r in res})
    return ", ".join(names) if names else None


def num_gpus(cfg: BenchConfig) -> int | None:
    """Physical GPUs the launcher spreads the ranks over (rank r -> GPU r % device_count); None on cpu."""
    if cfg.run.device != "cuda":
        return None
    import torch

    count = torch.cuda.device_count()  # NVML/driver query; creates no context in this process
    return max(1, min(cfg.run.ranks, count)) if count else None


def run_point(point: SweepPoint, run_mode: RunMode, console: Console, *, floor: bool = False,
              floor_sustained=None) -> dict:
    """Run every mode of one point on the same generated requests; the report "run" dict. floor: also time the
    stock-kernel floor of every measured iteration (bench/floor.py) after the modes, in this process, with the GPU's
    clock and power sampled during each mode's measured iterations (bench/gpu_clocks.py, cuda:0: rank 0's GPU);
    floor_sustained (floor_sustained.SustainedSettings): also the floor under sustained load."""
    cfg: BenchConfig = point.config
    queues: list[list[Request]] = generate_requests(cfg.workload, cfg.run.ranks)
    target = point.popularity_LE()  # the routing skew's table: the ranks steer to it, the report compares with it
    by_mode: dict[str, list[RankResult]] = {}
    clocks, windows = {}, {}  # per mode: the GPU's clock during the measured iterations, their (t0, t1)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        for mode in cfg.run.modes:
            total = sum(len(q) for q in queues)
            task = progress.add_task(f"{mode:>9} requests", total=total)
            done: dict[int, int] = {}

            def on_progress(rank: int, n_done: int, _total: int, task=task, done=done) -> None:
                done[rank] = n_done
                progress.update(task, completed=sum(done.values()))

            sampler = _engine_sampler(cfg, floor)
            with sampler or contextlib.nullcontext():
                results = run_mode(cfg, mode, queues, progress=on_progress, **skew_kwargs(target))
            if floor and (win := measured_window(results)) is not None:
                windows[mode] = win  # how long the sustained floor replays
                if sampler is not None:
                    clocks[mode] = sampler.stats(*win)
            if len(results) != cfg.run.ranks:
                raise RuntimeError(f"run_mode({mode!r}) returned {len(results)} rank results for {cfg.run.ranks} ranks")
            by_mode[mode] = sorted(results, key=lambda r: r.rank)
            progress.update(task, completed=sum(sum(1 for q in r.requests if q.request_id in r.first_token_s)
                                                for r in results))
    spec = cfg.model.spec()
    metrics = compute_metrics(by_mode, spec.num_layers, num_gpus(cfg), spec.num_moe_layers,
                              num_experts=spec.num_experts, target_LE=target)
    expected = sum(q.isl for rq in queues for q in rq)
    run = {"config": point.config_dict, "point": point.values, "point_hash": point.key,
           "env": env_info(cfg.run.device, _device_name(by_mode)), "metrics": metrics,
           "consistency": consistency(metrics, expected),
           "timeline": {mode: steady_timeline(res) for mode, res in by_mode.items()}}
    if floor:
        from .floor import floor_report
        console.print("timing the stock-kernel floor of the measured iterations ...")
        run["floor"] = floor_report(cfg, by_mode, sustained=floor_sustained, engine_clocks=clocks, engine_windows=windows)
    return run


def _engine_sampler(cfg: BenchConfig, floor: bool):
    """A GpuSampler of cuda:0 (rank 0's GPU) for a --floor run on CUDA, else None (used as an empty `with`)."""
    if not floor or cfg.run.device != "cuda":
        return None
    from .gpu_clocks import GpuSampler
    return GpuSampler(0)


def run_repeated(point: SweepPoint, run_mode: RunMode, console: Console, *, floor: bool = False,
                 floor_sustained=None) -> dict:
    """run_point run.repeat times on the same requests; one report run with the spread (bench/repeats.py)."""
    n = point.config.run.repeat
    runs = []
    for i in range(n):
        if n > 1:
            console.print(f"repeat {i + 1}/{n}")
        runs.append(run_point(point, run_mode, console, floor=floor, floor_sustained=floor_sustained))
    return merge_repeats(runs)


def run_bench(config_path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, device: str | None = None,
              ranks: int | None = None, out_dir: str | Path | None = None, run_mode: RunMode | None = None,
              plots: bool = True, console: Console | None = None, floor: bool = False,
              max_points: int = MAX_SWEEP_POINTS, force: bool = False, repeat: int | None = None,
              check_points: Callable[[list[SweepPoint]], None] | None = None, floor_sustained=None) -> dict:
    """Run (or resume) a bench sweep; returns {"runs": [...], "swept": [...], "files": {...}}. force: run every
    point again, finished ones included (their files are replaced when each finishes). repeat: override run.repeat.
    floor_sustained (bench/floor_sustained.SustainedSettings, with floor): also the floor under sustained load.
    check_points: a command's own refusals of the loaded points (`dwdp bench --floor` on a CPU), run first, on the
    points loaded here (the sweep is loaded once).

    Raises ConfigError for bad config files/overrides before anything runs.
    """
    console = console or Console()
    swept, points = load_sweep(config_path, overrides, device=device, ranks=ranks, max_points=max_points,
                               repeat=repeat)
    if check_points is not None:
        check_points(points)
    if run_mode is None:  # the embedded engine runs here: its device must exist
        check_device_present(points, config_path, overrides, device)
    out = check_out_dir(out_dir if out_dir is not None else Path("bench_out") / Path(config_path).stem, "--out")
    # before any rank starts (exit 2): warm-up vs iterations, and what the unfinished points take vs what is free
    todo = [p for p in points if force or not (out / "points" / f"{p.key}.json").is_file()]
    preflight(todo, file=str(config_path), resources=run_mode is None)
    if (note := nothing_to_fetch_note(points)) is not None:
        console.print(note, soft_wrap=True)
    with out_lock(out):
        return _run_bench_locked(out, config_path, swept, points, run_mode, plots, console, floor, force,
                                 floor_sustained)


def _run_bench_locked(out: Path, config_path, swept, points, run_mode, plots, console, floor, force=False,
                      floor_sustained=None) -> dict:
    points_dir = out / "points"
    finished = {} if force else {p.key: run for p in points
                                 if (run := _load_point(points_dir / f"{p.key}.json", console)) is not None}
    # lines that name a path are printed unwrapped (soft_wrap): rich would split the path, or a hint after it,
    # wherever the path's length puts the console's edge; the terminal wraps them without changing the text
    console.print(f"dwdp bench: {len(points)} point(s)" + (f" sweeping {', '.join(swept)}" if swept else "")
                  + f"; results in {out}", soft_wrap=True)
    if finished:
        console.print(f"skipping {len(finished)} finished point(s) found in {points_dir} (--force runs them again)",
                      soft_wrap=True)
        for p in points:
            if p.key in finished:
                print_point(console, finished[p.key])
    todo = [p for p in points if p.key not in finished]
    if todo and run_mode is None:
        run_mode = engine_run_mode()
    for i, p in enumerate(todo):
        desc = point_label(p.values)
        console.rule(f"point {i + 1}/{len(todo)}: {desc}")
        run = run_repeated(p, run_mode, console, floor=floor, floor_sustained=floor_sustained)  # type: ignore[arg-type]
        text = json.dumps(json_ready(run), allow_nan=False)
        _write_atomic(points_dir / f"{p.key}.json", text)
        finished[p.key] = json.loads(text)  # the same form a resumed sweep reads back
        print_point(console, run)
    runs = [finished[p.key] for p in points]
    json_path, csv_path = write_results(out, runs)
    files: dict[str, object] = {"results_json": json_path, "results_csv": csv_path, "plots": []}
    if plots:
        from .plots import plot_ratios, plot_timeline

        plot_files = plot_ratios(runs, swept, out / "plots")
        for run in runs:
            t = plot_timeline(run, out / "plots" / f"timeline_{run['point_hash']}.png")
            if t is not None:
                plot_files.append(t)
        files["plots"] = plot_files
    console.print(f"wrote {json_path}, {csv_path}" + (f" and {len(files['plots'])} plot(s) in {out / 'plots'}"
                                                     if files["plots"] else ""), soft_wrap=True)
    bad = [r["point_hash"] for r in runs if not r.get("consistency", {}).get("ok", True)]
    if bad:
        console.print(f"[red]{len(bad)} point(s) failed the consistency checks:[/] {', '.join(bad)}")
    return {"runs": runs, "swept": swept, "files": files, "consistent": not bad}


def follow_bench(config_path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, device: str | None = None,
                 ranks: int | None = None, out_dir: str | Path | None = None, run_mode: RunMode,
                 force: bool = False, repeat: int | None = None,
                 check_points: Callable[[list[SweepPoint]], None] | None = None) -> None:
    """Ranks other than 0 under torchrun/mpirun: run the same unfinished points (every point with force) and modes
    as rank 0 (collectively, in the same order) and write nothing. check_points: as run_bench's (what rank 0
    refuses, every rank refuses)."""
    _, points = load_sweep(config_path, overrides, device=device, ranks=ranks, repeat=repeat)
    if check_points is not None:
        check_points(points)
    out = Path(out_dir) if out_dir is not None else Path("bench_out") / Path(config_path).stem
    for p in points:
        if not force and _load_point(out / "points" / f"{p.key}.json") is not None:
            continue  # rank 0 skips it too (it reads the same file before any point runs)
        queues = generate_requests(p.config.workload, p.config.run.ranks)
        target = p.popularity_LE()
        for _ in range(p.config.run.repeat):  # rank 0 runs every mode once per repeat (run_repeated)
            for mode in p.config.run.modes:
                run_mode(p.config, mode, queues, **skew_kwargs(target))
