"""Bench output: the terminal table, results.json, results.csv, and the run environment.

A "run" is one sweep point as a JSON-ready dict:
    {"config": BenchConfig as nested dict, "point": {swept key: value}, "env": {...},
     "metrics": {"dep": {...}, "dwdp": {...}, "reference": {...}?, "ratio": {...}},
     "consistency": {...}, "timeline": {mode: steady_timeline}}
results.json holds {"runs": [run without "timeline", ...]}; results.csv one row per run and mode.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import hashlib
import io
import json
import os
import math
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..byte_units import fmt_bytes
from ..spec.config import BenchConfig
from ..engine.records import PHASES
from .expert_load import expert_load_rows, expert_load_table

MODE_TITLES = {"dep": "DEP", "dwdp": "DWDP", "reference": "reference"}


def config_dict(cfg: BenchConfig) -> dict:
    """The config as nested plain data (tuples become lists), as it round-trips through JSON."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def point_hash(cfg_dict: dict) -> str:
    """A stable key of one point's full config (sorted-key JSON, sha256, 16 hex digits)."""
    return hashlib.sha256(json.dumps(cfg_dict, sort_keys=True).encode()).hexdigest()[:16]


def _run(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def env_info(device: str, device_name: str | None = None) -> dict:
    """Where the run happened. On cuda the GPU name comes from the ranks (device_name) or nvidia-smi,
    never from torch.cuda in this process (that would create a CUDA context beside the ranks')."""
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - torch is a dependency
        torch_version = "unknown"
    if device_name is None:
        if device == "cuda":
            smi = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
            device_name = smi.splitlines()[0] if smi else "cuda (name unknown)"
        else:
            device_name = platform.processor() or platform.machine() or "cpu"
    repo = Path(__file__).resolve().parents[2]
    commit = _run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"]) or "unknown"
    return {"device": device, "device_name": device_name, "torch": torch_version,
            "python": platform.python_version(), "git_commit": commit, "hostname": socket.gethostname(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "argv": " ".join(sys.argv)}


def json_ready(obj):
    """obj with NaN/inf floats replaced by None (strict JSON), tuples as lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    return obj


def _fmt(v: float | None, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{digits}f}"


#: what a CPU run is, said wherever its numbers are shown (table title, results.json, plots)
CPU_NOTE = "functional demo on CPU: the ranks are processes sharing this machine's cores; ratios are not GPU predictions"
#: the ratio column's header: every row reads the same way
RATIO_HEADER = "DWDP gain, >1 better"


def run_device(run: dict) -> str:
    """cpu or cuda: where a report run's ranks ran."""
    return (run.get("config", {}).get("run", {}) or {}).get("device") or run.get("env", {}).get("device", "cuda")


def _spread(st: dict, digits: int, unit: str = "") -> str:
    """median on one line, [min-max] under it (bench/repeats.py spread)."""
    lo, hi = st["min"], st["max"]
    d = 0 if max(abs(lo), abs(hi)) >= 1000 else digits  # the range line fits a narrow column
    return escape(f"{_fmt(st['median'], digits)}{unit}\n[{_fmt(lo, d)}-{_fmt(hi, d)}]")


def _rows(metrics: dict, cpu: bool = False) -> list[tuple[str, str, int, str | None]]:
    """(label, metric path, digits, ratio key) in table order; cpu: per-device rows named for what they are."""
    per = "per rank (CPU process)" if cpu else "per GPU"
    rows: list[tuple[str, str, int, str | None]] = [
        (f"context tokens/s {per}", "tps_per_gpu", 1, "tps_per_gpu"),
        ("  while busy (per-rank mean)", "tps_per_gpu_busy", 1, "tps_per_gpu_busy"),
        *([] if cpu else [("  per physical device", "tps_per_device", 1, None)]),
        ("iterations/s per rank", "iterations_per_s", 2, "iterations_per_s"),
        ("TTFT p50 ms *", "ttft_p50_ms", 2, "ttft_speedup_p50"),
        ("TTFT p90 ms *", "ttft_p90_ms", 2, "ttft_speedup_p90"),
        ("TTFT p99 ms *", "ttft_p99_ms", 2, "ttft_speedup_p99"),
        ("tokens measured / total", "tokens", 0, None),
        ("measured iterations (all ranks)", "iterations", 0, None),
    ]
    per = {"attention": "per attention layer", "other": "per layer (all layers)"}
    rows += [(f"{p.replace('_', ' ')} us {per.get(p, 'per MoE layer')}", f"layer_us.{p}", 1, None)
             for p in (*PHASES, "exposed_copy", "hidden_copy")]
    rows += [(label, path, digits, None) for label, path, digits in expert_load_rows()]  # bench/expert_load.py
    rows += [("iteration ms (wall, per iteration)", "iteration_ms.wall", 1, None)]
    rows += [(f"peak memory {label} per rank", f"memory_max_bytes.{k}", 1, None)  # GB, the house unit (byte_units)
             for k, label in (("weights", "weights"), ("prefetch_slots", "prefetch slots"),
                              ("activations", "activations (CPU: process footprint)" if cpu else "activations"),
                              ("peak_total", "total"))]
    return rows


def _get(d: dict, path: str):
    for k in path.split("."):
        d = d.get(k, {}) if isinstance(d, dict) else {}
    return d if not isinstance(d, dict) else None


def point_label(values: dict) -> str:
    """A sweep point as the table, the progress rule and the plots name it: "key=value, ..." or "single point"."""
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "single point"


def point_table(run: dict, title: str | None = None) -> Table:
    """metric | DEP | DWDP | (reference) | DWDP/DEP for one run."""
    m = run["metrics"]
    cpu = run_device(run) == "cpu"
    modes = [x for x in ("dep", "dwdp", "reference") if x in m]
    point = point_label(run.get("point", {}))
    title = title or point
    reps = run.get("repeats") or {}
    stats = reps.get("stats", {})
    if reps.get("n", 1) > 1:
        title += escape(f"\n{reps['n']} repeats: rates, TTFT and gains are the median [min-max] over them; other "
                        "rows are the median repeat's")
    if cpu:
        title = f"{title}\n{CPU_NOTE}"
    table = Table(title=title, title_justify="left",
                  caption="gain > 1 means DWDP is better in every row: rates DWDP/DEP, * times (TTFT) DEP/DWDP"
                          + ("; measured iterations differ because DEP ranks run in lock-step (a rank that ran out "
                             "of work runs empty iterations) while DWDP ranks free-run" if "dep" in m else ""),
                  caption_justify="left")
    # names wrap instead of being cut ("lowes..."): piped output is 80 columns wide
    table.add_column("metric", overflow="fold", ratio=5)
    for mode in modes:
        table.add_column(MODE_TITLES[mode], justify="right", overflow="fold", ratio=3)
    table.add_column(RATIO_HEADER, justify="right", overflow="fold", ratio=3)
    for label, path, digits, rkey in _rows(m, cpu):
        cells = []
        for mode in modes:
            v = _get(m[mode], path)
            if path.startswith("memory_max_bytes"):
                cells.append("-" if v is None else fmt_bytes(v))
            elif path == "tokens":
                cells.append(f"{m[mode]['tokens']:,} / {m[mode]['total_tokens']:,}")
            elif stats.get(mode, {}).get(path):
                cells.append(_spread(stats[mode][path], digits))
            else:
                cells.append(_fmt(v, digits))
        ratio = m.get("ratio", {}).get(rkey) if rkey else None
        if rkey and stats.get("ratio", {}).get(rkey):
            table.add_row(label, *cells, _spread(stats["ratio"][rkey], 3, "x"))
            continue
        table.add_row(label, *cells, f"{_fmt(ratio, 3)}x" if _fmt(ratio) != "-" else "")
    return table


FLOOR_PHASES = (("attention", "attention"), ("expert_gemm", "experts"), ("other", "other"), ("total", "iteration"))


def floor_table(run: dict) -> Table | None:
    """Engine vs floor (bench/floor.py: its kernels timed alone), ms per iteration, per mode: floor | measured |
    measured/floor."""
    fl = run.get("floor")
    modes = [m for m in ("dep", "dwdp", "reference") if fl and m in fl]
    if not modes:
        return None
    table = Table(title=f"engine vs floor (kernels timed alone), ms per iteration (mean over measured iterations of every rank; "
                        f"{fl.get('device', '')})", title_justify="left",
                  caption="attention: all layers; experts: the routed-expert op of the MoE layers (its floor: the "
                          "routed GEMMs; measured: sort, gather, SwiGLU and combine too, DEP across ranks: its dispatch "
                          "sort / gather and combine under other); other: dense MLP, router, shared experts (+ norms, "
                          "residual adds measured); iteration: wall. x floor = measured / "
                          "floor (1.00 = the floor's kernels alone: stock GEMMs and attention, the engine's one-pass kernels for the "
                          "attention passes, prefixed chunks all one way), median: the median over iterations of each "
                          "iteration's measured / floor; the floor has no communication",
                  caption_justify="left")
    table.add_column("phase")
    for m in modes:
        for col in ("floor", "ms", "x floor", "median"):
            table.add_column(f"{MODE_TITLES[m]} {col}", justify="right")
    for key, label in FLOOR_PHASES:
        cells = []
        for m in modes:
            f = fl[m]
            med = f.get("measured_over_floor_median", {}).get(key)
            cells += [_fmt(f["floor_ms"][key], 1), _fmt(f["measured_ms"][key], 1), _fmt(f["measured_over_floor"][key], 2),
                      _fmt(med, 2)]
        table.add_row(label, *cells)
    return table


def sustained_table(run: dict, mode: str) -> Table | None:
    """One mode's engine against both floors (bench/floor.py "sustained", `--floor-sustained`), ms per iteration,
    with the median SM clock and power while each ran (floor.py "clock": gpu_clocks.clock_stats); None without a
    sustained floor."""
    f = (run.get("floor") or {}).get(mode)
    su = f.get("sustained") if isinstance(f, dict) else None
    if not su:
        return None
    clock = f.get("clock") or {}
    table = Table(title=f"{MODE_TITLES.get(mode, mode)}: engine vs the floor burst and sustained, ms per iteration",
                  title_justify="left", caption_justify="left",
                  caption="burst: each kernel timed alone (the floor above); sustained: the same kernels replayed back "
                          "to back, every measured iteration in order, after a warm-up, at least as long as the engine's "
                          f"measured iterations ran ({su.get('passes_timed')} passes, warm-up {_fmt(su.get('warmup_s'), 1)} s, "
                          f"{su.get('warmup_end')}); x = engine / floor; clock and power: medians while each ran")
    for col in ("phase", "floor burst", "floor sustained", "engine", "x burst", "x sustained"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for key, label in FLOOR_PHASES:
        table.add_row(label, _fmt(f["floor_ms"][key], 1), _fmt(su["floor_ms"][key], 1), _fmt(f["measured_ms"][key], 1),
                      _fmt(f["measured_over_floor"][key], 2), _fmt(su["measured_over_floor"][key], 2))
    for what, label in (("sm_clock_mhz", "SM clock MHz"), ("power_w", "power W")):
        med = [((clock.get(k) or {}).get(what) or {}).get("median") for k, _ in CLOCK_RUNS]
        table.add_row(label, *(_fmt(v, 0) for v in med), "", "")
    return table


#: the clocks a floor run reports per mode (bench/floor.py "clock"), in the order shown
CLOCK_RUNS = (("floor_burst", "floor (burst)"), ("floor_sustained", "floor (sustained)"), ("engine", "engine"))


def floor_clock_lines(run: dict) -> list[str]:
    """One line per mode and run of the GPU's SM clock and power (bench/gpu_clocks.clock_text of floor.py's
    "clock"): the burst floor, the sustained floor, the engine's measured iterations."""
    from .gpu_clocks import clock_text

    fl = run.get("floor") or {}
    lines = []
    for m in ("dep", "dwdp", "reference"):
        clock = (fl.get(m) or {}).get("clock") if isinstance(fl.get(m), dict) else None
        if not clock:
            continue
        for key, label in CLOCK_RUNS:
            if key in clock:
                lines.append(f"{MODE_TITLES[m]} GPU during the {label}: {clock_text(clock[key])}")
    return lines


def print_point(console: Console, run: dict) -> None:
    console.print(point_table(run))
    ft = floor_table(run)
    if ft is not None:
        console.print(ft)
        for m in ("dep", "dwdp", "reference"):
            st = sustained_table(run, m)
            if st is not None:
                console.print(st)
        for line in floor_clock_lines(run):
            console.print(line, soft_wrap=True)
    et = expert_load_table(run)  # bench/expert_load.py: only when the workload has a routing skew
    if et is not None:
        console.print(et)
    first = next(iter(v for k, v in run["metrics"].items() if k != "ratio"), {})
    if first.get("ranks_share_gpu"):
        console.print(f"[yellow]note:[/] {first['ranks']} ranks share {first['num_gpus']} GPU(s) "
                      f"({', '.join(first['devices'])}): 'per GPU' numbers are per rank, and the ratio is not the "
                      "multi-GPU answer (the ranks compete for one GPU's SMs, memory bandwidth and copy engines).")
    for mode, m in run["metrics"].items():
        if mode == "ratio":
            continue
        hot = {r: a for r, a in m.get("allocator_after_warmup", {}).items() if a["alloc_retries"] or a["ooms"]}
        if hot:
            console.print(f"[yellow]note:[/] {mode}: the caching allocator freed its cache and retried during measured "
                          f"iterations on rank(s) {', '.join(sorted(hot))} ({json.dumps(hot)}): near the memory limit, "
                          "those iterations include device synchronisation and cudaMalloc time.")
    c = run.get("consistency", {})
    if c and not c.get("ok", True):
        bad = [k for k, v in c.items() if isinstance(v, bool) and not v and k != "ok"]
        console.print(f"[red]consistency check failed:[/] {', '.join(bad)}: {json.dumps(c)}")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        elif isinstance(v, list):
            out[key] = ";".join(map(str, v))
        else:
            out[key] = v
    return out


def write_results(out_dir: Path, runs: list[dict]) -> tuple[Path, Path]:
    """results.json (every run, without timelines) and results.csv (one row per run and mode)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    slim = [{**({"note": CPU_NOTE} if run_device(run) == "cpu" else {}),
             **{k: v for k, v in run.items() if k != "timeline"}} for run in runs]
    json_path, csv_path = out_dir / "results.json", out_dir / "results.csv"
    write_atomic(json_path, json.dumps(json_ready({"runs": slim}), indent=1, allow_nan=False))
    rows = []
    for i, run in enumerate(slim):
        for mode, mm in run["metrics"].items():
            if mode == "ratio":
                continue
            row = {"run": i, "point_hash": run.get("point_hash", ""), "mode": mode}
            row.update({f"point.{k}": v for k, v in run.get("point", {}).items()})
            row.update(_flatten({k: v for k, v in mm.items() if k != "memory_bytes"}))
            row.update({f"ratio.{k}": v for k, v in run["metrics"].get("ratio", {}).items()})
            row["consistency.ok"] = run.get("consistency", {}).get("ok")
            rows.append(row)
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
    write_atomic(csv_path, buf.getvalue())
    return json_path, csv_path


def replace_atomically(path: Path, write, suffix: str = "") -> Path:
    """Call write(tmp) on a temporary beside `path`, then rename it over `path`: a full disk or a kill leaves the
    previous file (or none), never a partial one. An OSError names `path`, not the temporary."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem if suffix else path.name}.{os.getpid()}.tmp{suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):  # name the file the user knows, not the temporary
            raise OSError(e.errno, e.strerror or str(e), str(path)) from e
        raise
    return path


def write_atomic(path: Path, text: str) -> None:
    """`text` into `path` through replace_atomically, flushed to disk before the rename."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    replace_atomically(path, write)
