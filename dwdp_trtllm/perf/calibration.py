"""Measured overrides for the planner: a strict calibration JSON, or tolerant reads of benchmark JSON.

Calibration file (strict; every key optional, unknown keys are errors naming file and key):

    {
      "gpu": "h200",                                   # informational: the GPU it was measured on
      "grouped_gemm_tflops": {"bf16": [[tokens, tflops], ...], "fp8": [...], "nvfp4": [...]},
      "attention_tflops": 450.0,                       # effective causal-SDPA TFLOP/s
      "attention_us_by_isl": [[isl, us], ...],         # one request's SDPA time per layer (wins over attention_tflops)
      "hbm_tbps": 4.19,                                # effective HBM TB/s (weight reads)
      "peer_copy_gbps": 375.0,                         # effective one-way copy-engine peer copy GB/s
      "slice_efficiency": [[slice_bytes, fraction], ...],  # sliced copy bandwidth / bulk bandwidth
      "all_to_all_gbps": 300.0,                        # effective dispatch/combine GB/s per rank
      "interference": 1.15,                            # slowdown of compute overlapped with copies
      "contention_slowdown": {"sliced": 1.01, "unsliced": 1.6},
      "floor_tflops": {"attention_proj": 650.0, "attention_core": 500.0, "expert_gemm_bf16": 560.0, "expert_gemm_fp8": 900.0, "other": 650.0},
                                                       # stock-kernel floor rates per phase, the same at every size
                                                       # (win over floor runs)
      "engine_over_floor": {"attention": 1.1, "expert_gemm": 1.05, "other": 1.2},
                                                       # the engine's measured / floor time per phase, the same at
                                                       # every size (win over floor runs)
      "moe_op": {...}                                  # this project's whole routed-expert op, ms per call per
                                                       # (routing, tokens), its gemm path, buffer split and source
                                                       # (perf/moe_op.py; `dwdp plan --target trtllm` prices DWDP's
                                                       # experts with it under gemm multi_buffer)
    }

Schema 2 (`dwdp calibrate`, docs/CALIBRATION.md) adds `schema_version`, `measured_on` (host, time, GPU, driver, torch,
CUDA, NVLink topology), `provenance` (per key: measured where and when, or a prior and why) and the measurements behind
the keys above (per-pair and many-to-one peer bandwidth, sliced vs unsliced, interference per phase, DEP
dispatch per backend); perf/calibration_detail.py validates them. A key is measured iff the file sets it; a newer
schema_version is refused, and so is a CPU functional check's file (`measured_on.purpose`).

Every number must be one a GPU node can measure: finite (NaN, Infinity and 1e400 are refused by read_json, as is
nesting deeper than a checkpoint's JSON may go) and within its kind's plausible range (calibration_detail.LIMITS:
TFLOP/s, GB/s, TB/s, slowdowns as --interference, times); an error names the file and the key.

`grouped_gemm_tflops` tokens are the tokens entering the MoE on one rank (before top-k); values are
interpolated log-linearly in tokens and clamped at the ends.

Benchmark JSON (tolerant, scripts/bench_grouped_gemm.py and scripts/bench_copy.py): the whole tree is
walked and only these keys are read, anything else is ignored:
  - a mapping with "tokens" and "tflops" (and optionally "dtype": bf16 (the default), fp8 or nvfp4; a record of
    another dtype, e.g. "fp8_blockwise", is not one of these and is skipped): one grouped-GEMM point;
    the best value per (dtype, tokens) is kept (the planner assumes the best measured kernel is used);
  - a mapping with "slice_bytes" and "fraction_of_bulk", or "slice_bytes" and "gbps" plus a "bulk_gbps"
    anywhere in the file: one slice-efficiency point (best per slice size);
  - "p2p_gbps" or "peer_copy_gbps": peer copy bandwidth; "gemm_slowdown" or "interference": interference;
  - a bench run with "floor" (`dwdp bench --floor`, results.json): one FloorPoint per mode (floor rates and
    engine efficiencies by size; perf/floor_calibration.py, which also says which points calibrate);
  - "device" or "gpu" (top level or under "env"/"environment", or the first run's env): which GPU measured it. A file is used only
    when that name contains the planner's --gpu (e.g. "NVIDIA H200" for h200); otherwise it is skipped
    with a note.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..spec.json_values import MAX_DEPTH
from ..spec.json_values import _depth as json_depth  # the config.json reader's bound and its non-recursive count
from ..spec.schema import ConfigError
from .calibration_detail import DETAIL_KEYS, FUNCTIONAL, in_range, limits_off, parse_detail
from .floor_calibration import FloorCalibration
from .floor_points import ENGINE_PHASES, points_from_bench
from .moe_op_record import parse_record

Points = tuple[tuple[float, float], ...]

_KEYS = ("gpu", "grouped_gemm_tflops", "attention_tflops", "attention_us_by_isl", "hbm_tbps", "peer_copy_gbps",
         "slice_efficiency", "all_to_all_gbps", "interference", "contention_slowdown", "floor_tflops",
         "engine_over_floor", "moe_op") + DETAIL_KEYS
FLOOR_RATE_KEYS = ("attention_proj", "attention_core", "expert_gemm_bf16", "expert_gemm_fp8", "expert_gemm_nvfp4", "other")


@dataclass(frozen=True)
class Calibration:
    """Measured numbers; None / empty = use the GpuSpec default."""

    sources: tuple[str, ...] = ()
    gpu: str | None = None
    grouped_gemm_tflops: dict[str, Points] = field(default_factory=dict)
    attention_tflops: float | None = None
    attention_us_by_isl: Points = ()
    hbm_tbps: float | None = None
    peer_copy_gbps: float | None = None
    slice_efficiency: Points = ()
    all_to_all_gbps: float | None = None
    interference: float | None = None
    contention_slowdown: dict[str, float] = field(default_factory=dict)
    floor_tflops: dict[str, float] = field(default_factory=dict)
    engine_over_floor: dict[str, float] = field(default_factory=dict)
    floor: FloorCalibration = field(default_factory=FloorCalibration)  # `dwdp bench --floor` runs
    engine_efficiency: bool = True  # False: plan for stock kernels (the floor), not for our engine
    notes: tuple[str, ...] = ()
    # schema 2 (perf/calibration_detail.py): where it was measured, per key provenance, the measurements in detail
    schema_version: int = 1
    measured_on: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, dict[str, str]] = field(default_factory=dict)
    peer_pairs: tuple[dict, ...] = ()
    slice_gbps: Points = ()
    many_to_one: tuple[dict, ...] = ()
    group_pull: tuple[dict, ...] = ()
    interference_by_phase: dict[str, float] = field(default_factory=dict)
    copy_slowdown_by_phase: dict[str, float] = field(default_factory=dict)
    dep_comm: dict[str, dict] = field(default_factory=dict)
    # this project's whole routed-expert op, ms per call (perf/moe_op.py's record; `dwdp calibrate`'s moe_op step)
    moe_op: dict = field(default_factory=dict)

    def measured(self, key: str) -> bool:
        """Whether this calibration sets `key` (a file key, e.g. peer_copy_gbps): the planner's test of measured."""
        v = getattr(self, key, None)
        return key in _KEYS and v not in (None, (), {}) and key not in ("gpu", "schema_version", "measured_on", "provenance")

    def floor_rate(self, key: str, tokens, isl, linear_dtype: str | None = None):
        """Floor TFLOP/s of attention_proj / other at this size, for linear layers in `linear_dtype` (the floor runs
        that measured them; all runs when none did); None if not calibrated."""
        return self.floor_tflops.get(key) or self.floor.rate(key, tokens, isl, linear_dtype)

    def expert_floor(self, dtype: str) -> tuple[float, float] | None:
        """(R TFLOP/s, k rows per expert) of the routed experts' floor in `dtype`; None if not calibrated."""
        if self.floor_tflops.get(f"expert_gemm_{dtype}"):
            return self.floor_tflops[f"expert_gemm_{dtype}"], 0.0
        fit = self.floor.experts
        return (fit[0][dtype], fit[1]) if fit and dtype in fit[0] else None

    def core_floor(self) -> tuple[float, float] | None:
        """(R TFLOP/s, c ms per call and layer) of the attention core floor; None if not calibrated."""
        if self.floor_tflops.get("attention_core"):
            return self.floor_tflops["attention_core"], 0.0
        return self.floor.core

    def engine_factor(self, phase: str, tokens=None, isl=None, dtype: str | None = None, linear_dtype: str | None = None):
        """The engine's measured / floor time for `phase` at this size (expert_gemm: weight dtype `dtype`; attention
        and other: linear layers in `linear_dtype`); 1.0 when not calibrated or when planning for stock kernels."""
        if not self.engine_efficiency:
            return 1.0
        if phase in self.engine_over_floor:
            return self.engine_over_floor[phase]
        return self.floor.factor(phase, tokens, isl, dtype, linear_dtype)

    def gemm_tflops(self, dtype: str, tokens: float) -> float | None:
        pts = self.grouped_gemm_tflops.get(dtype)
        return interp_log(pts, tokens) if pts else None

    def attention_us(self, isl: float) -> float | None:
        """One request's SDPA time per layer at `isl`, scaled as isl^2 outside the measured range."""
        pts = self.attention_us_by_isl
        if not pts:
            return None
        lo, hi = pts[0], pts[-1]
        if isl < lo[0]:
            return lo[1] * (isl / lo[0]) ** 2
        if isl > hi[0]:
            return hi[1] * (isl / hi[0]) ** 2
        return interp_log(pts, isl)

    def slice_eff(self, slice_bytes: int) -> float | None:
        return min(1.0, interp_log(self.slice_efficiency, slice_bytes)) if self.slice_efficiency else None

    def merged(self, other: "Calibration") -> "Calibration":
        """`other` wins where it has a value."""
        kw = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name in ("sources", "notes"):
                kw[f.name] = a + b
            elif f.name == "schema_version":
                kw[f.name] = max(a, b)
            elif f.name in ("measured_on", "moe_op"):  # one machine's record, never a mix of two
                kw[f.name] = b or a
            elif f.name == "provenance":  # a key's provenance follows the value that wins
                kw[f.name] = {k: (b[k] if k in b and other.measured(k) else a[k] if k in a and self.measured(k)
                                  else b.get(k, a.get(k))) for k in {**a, **b}}
            elif isinstance(a, dict):
                kw[f.name] = {**a, **b}
            elif f.name == "floor":  # floor runs are pooled; FloorCalibration.select picks one campaign
                kw[f.name] = FloorCalibration(a.points + b.points, a.notes + b.notes)
            elif f.name == "engine_efficiency":
                kw[f.name] = a and b
            else:
                kw[f.name] = b if b not in (None, ()) else a
        return Calibration(**kw)


def interp_log(points: Points, x):
    """Piecewise-linear in log(x) through sorted (x, y) points, clamped at both ends; x a float or an
    array (elementwise, same shape back)."""
    xs = np.log([p[0] for p in points])
    out = np.interp(np.log(np.maximum(np.asarray(x, float), points[0][0])), xs, [p[1] for p in points])
    return float(out) if out.ndim == 0 else out


def _num(file: str, key: str, v: Any, kind: str, *, lo: float = 0.0, lo_incl: bool = False) -> float:
    """A finite number above `lo` (or at it with lo_incl), within the plausible range of its kind
    (calibration_detail.LIMITS)."""
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            or not (v >= lo if lo_incl else v > lo)):
        raise ConfigError(file, key, f"expected a number {'>=' if lo_incl else '>'} {lo} (finite), got {v!r}")
    return in_range(file, key, float(v), kind)


def _points(file: str, key: str, v: Any, x_kind: str, y_kind: str) -> Points:
    if not isinstance(v, list) or not v:
        raise ConfigError(file, key, f"expected a non-empty list of [x, y] pairs, got {v!r}")
    out = []
    for i, p in enumerate(v):
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            raise ConfigError(file, f"{key}[{i}]", f"expected a pair [x, y], got {p!r}")
        out.append((_num(file, f"{key}[{i}][0]", p[0], x_kind), _num(file, f"{key}[{i}][1]", p[1], y_kind)))
    xs = [p[0] for p in out]
    if len(set(xs)) != len(xs):
        raise ConfigError(file, key, f"x values must be distinct, got {xs}")
    return tuple(sorted(out))


#: the kind (calibration_detail.LIMITS) of each summary key's numbers: (x, y) for a list of points
KINDS = {"grouped_gemm_tflops": ("tokens", "tflops"), "attention_tflops": "tflops", "attention_us_by_isl": ("tokens", "us"),
         "hbm_tbps": "tbps", "peer_copy_gbps": "gbps", "slice_efficiency": ("bytes", "fraction"), "all_to_all_gbps": "gbps",
         "interference": "slowdown", "contention_slowdown": "slowdown", "floor_tflops": "tflops",
         "engine_over_floor": "engine_over_floor"}


def calibration_from_dict(data: Any, *, file: str) -> Calibration:
    """Validate a calibration mapping (strict schema above)."""
    if not isinstance(data, dict):
        raise ConfigError(file, "", f"expected a JSON object, got {type(data).__name__}")
    for k in data:
        if k not in _KEYS:
            raise ConfigError(file, str(k), f"unknown key; expected one of {', '.join(_KEYS)}")
    kw: dict[str, Any] = {"sources": (file,), **parse_detail(data, file, _KEYS)}
    if "gpu" in data:
        if not isinstance(data["gpu"], str):
            raise ConfigError(file, "gpu", f"expected a string, got {data['gpu']!r}")
        kw["gpu"] = data["gpu"]
    if "grouped_gemm_tflops" in data:
        g = data["grouped_gemm_tflops"]
        if not isinstance(g, dict) or not g:
            raise ConfigError(file, "grouped_gemm_tflops", f"expected a mapping dtype -> [[tokens, tflops], ...], got {g!r}")
        for dt in g:
            if dt not in ("bf16", "fp8", "nvfp4"):
                raise ConfigError(file, f"grouped_gemm_tflops.{dt}", "unknown dtype; expected bf16, fp8 or nvfp4")
        kw["grouped_gemm_tflops"] = {dt: _points(file, f"grouped_gemm_tflops.{dt}", v, *KINDS["grouped_gemm_tflops"])
                                     for dt, v in g.items()}
    for k in ("attention_tflops", "hbm_tbps", "peer_copy_gbps", "all_to_all_gbps"):
        if k in data:
            kw[k] = _num(file, k, data[k], KINDS[k])
    for k in ("attention_us_by_isl", "slice_efficiency"):
        if k in data:
            kw[k] = _points(file, k, data[k], *KINDS[k])
    if "interference" in data:
        kw["interference"] = _num(file, "interference", data["interference"], "slowdown", lo=1.0, lo_incl=True)
    if "contention_slowdown" in data:
        c = data["contention_slowdown"]
        if not isinstance(c, dict) or not c or set(c) - {"sliced", "unsliced"}:
            raise ConfigError(file, "contention_slowdown", f"expected a mapping with keys sliced and/or unsliced, got {c!r}")
        kw["contention_slowdown"] = {k: _num(file, f"contention_slowdown.{k}", v, "slowdown", lo=1.0, lo_incl=True)
                                     for k, v in c.items()}
    if "moe_op" in data:
        kw["moe_op"] = parse_record(data["moe_op"], file)
    for k, allowed in (("floor_tflops", FLOOR_RATE_KEYS), ("engine_over_floor", ENGINE_PHASES)):
        if k in data:
            c = data[k]
            if not isinstance(c, dict) or not c or set(c) - set(allowed):
                raise ConfigError(file, k, f"expected a mapping with keys among {', '.join(allowed)}, got {c!r}")
            kw[k] = {n: _num(file, f"{k}.{n}", v, KINDS[k]) for n, v in c.items()}
    return Calibration(**kw)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number a measurement gives")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text} overflows a 64-bit float")
    return v


def read_json(path: Path) -> Any:
    """A calibration or results file parsed strictly: NaN, Infinity and numbers past a float's range (1e400) are
    refused (json.loads takes them), and so is nesting deeper than spec/json_values.MAX_DEPTH, as for a checkpoint's
    JSON (Python's reader raises RecursionError on a deep one); each as one ConfigError naming the file."""
    if not path.is_file():
        raise ConfigError(str(path), "", "file not found" if not path.exists() else "not a regular file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise ConfigError(str(path), "", f"not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(str(path), "", f"not UTF-8 text (byte {e.start}): a JSON file is expected") from None
    except RecursionError:
        raise ConfigError(str(path), "", f"nested deeper than Python's JSON reader allows; expected at most {MAX_DEPTH} "
                                         "levels of arrays and objects") from None
    except ValueError as e:  # _reject_constant, _finite_float
        raise ConfigError(str(path), "", f"not a finite number: {e}") from None
    except OSError as e:
        raise ConfigError(str(path), "", f"cannot read the file ({e.strerror or e})") from None
    if json_depth(data) > MAX_DEPTH:
        raise ConfigError(str(path), "", f"nested more than {MAX_DEPTH} levels deep; expected at most {MAX_DEPTH} "
                                         "levels of arrays and objects")
    return data


def load_calibration(path: str | Path, *, functional_ok: bool = False) -> Calibration:
    """A strict calibration file (schema in the module docstring). A CPU functional check's file (`dwdp calibrate
    --device cpu`) is refused unless `functional_ok` (its tests): its numbers describe no GPU."""
    data = read_json(Path(path))
    on = data.get("measured_on") if isinstance(data, dict) else None
    if isinstance(on, dict) and on.get("purpose") == FUNCTIONAL:
        if not functional_ok:
            raise ConfigError(str(path), "measured_on.purpose", f"{FUNCTIONAL} (written by `dwdp calibrate --device "
                                                                "cpu`): run `dwdp calibrate` on the GPU node to plan with it")
        with limits_off():  # a CPU's tiny-shape numbers lie outside a GPU's plausible ranges
            return calibration_from_dict(data, file=str(path))
    return calibration_from_dict(data, file=str(path))


def _walk(node: Any):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _device_name(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    runs = data.get("runs")
    if isinstance(runs, list) and runs and isinstance(runs[0], dict) and isinstance(runs[0].get("env"), dict):
        name = runs[0]["env"].get("device_name")
        if isinstance(name, str):
            return name
    for scope in (data, data.get("env"), data.get("environment"), data.get("meta")):
        if isinstance(scope, dict):
            for k in ("device", "gpu", "device_name"):
                if isinstance(scope.get(k), str):
                    return scope[k]
    return None


def calibration_from_bench(data: Any, *, file: str) -> Calibration:
    """Read the documented keys out of one benchmark JSON (tolerant: ignores everything else)."""
    gemm: dict[str, dict[float, float]] = {}
    slices: dict[float, float] = {}
    slices_gbps: dict[float, float] = {}
    bulk = peer = interference = None
    slowdowns: list[tuple[str, float]] = []  # (variant, gemm slowdown) of copy/compute overlap records
    for d in _walk(data):
        if _is_num(d.get("tokens")) and _is_num(d.get("tflops")) and d.get("dtype", "bf16") in ("bf16", "fp8", "nvfp4"):
            dt = d.get("dtype", "bf16")
            t = float(d["tokens"])
            gemm.setdefault(dt, {})[t] = max(gemm.get(dt, {}).get(t, 0.0), float(d["tflops"]))
        if _is_num(d.get("slice_bytes")):
            s = float(d["slice_bytes"])
            if _is_num(d.get("fraction_of_bulk")):
                slices[s] = max(slices.get(s, 0.0), float(d["fraction_of_bulk"]))
            elif _is_num(d.get("gbps")):
                slices_gbps[s] = max(slices_gbps.get(s, 0.0), float(d["gbps"]))
        if _is_num(d.get("bulk_gbps")):
            bulk = float(d["bulk_gbps"])
        for k in ("p2p_gbps", "peer_copy_gbps"):
            if _is_num(d.get(k)):
                peer = float(d[k])
        for k in ("gemm_slowdown", "interference"):
            if _is_num(d.get(k)) and d[k] >= 1.0:
                slowdowns.append((str(d.get("variant", "")), float(d[k])))
    if slowdowns:
        # bench_copy.py measures several copy methods; the engine's default issues copies as CUDA-graph
        # replays, so prefer those records (worst of them), else the worst of all.
        graph = [v for name, v in slowdowns if "graph" in name]
        interference = max(graph or [v for _, v in slowdowns])
    if bulk:
        for s, g in slices_gbps.items():
            slices.setdefault(s, g / bulk)
    return Calibration(
        sources=(file,), gpu=_device_name(data),
        grouped_gemm_tflops={dt: tuple(sorted(v.items())) for dt, v in gemm.items()},
        slice_efficiency=tuple(sorted(slices.items())), peer_copy_gbps=peer, interference=interference,
        floor=FloorCalibration(*map(tuple, points_from_bench(data, file=file))))


def device_matches(device_name: str, gpu: str) -> bool:
    """'NVIDIA H200' matches h200; 'NVIDIA GB200' matches gb200 but not b200; a GPU spec file's name of several
    words ('h200-copy') matches a device naming those words in order ('h200 copy'), the last one as a prefix."""
    dev = [t for t in re.split(r"[^a-z0-9]+", device_name.lower()) if t]
    want = [t for t in re.split(r"[^a-z0-9]+", gpu.lower()) if t]
    if not want:
        return False
    n = len(want)
    return any(dev[i:i + n - 1] == want[:-1] and dev[i + n - 1].startswith(want[-1]) for i in range(len(dev) - n + 1))


def load_bench_results(directory: str | Path, gpu: str) -> Calibration:
    """Merge every benchmark JSON under `directory` measured on `gpu`; skipped files are listed in notes."""
    d = Path(directory)
    cal = Calibration()
    if not d.is_dir():
        return cal
    notes = []
    for p in sorted(d.rglob("*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as e:  # unreadable, not UTF-8, not JSON, nested too deep
            notes.append(f"skipped {p}: not readable JSON ({e.__class__.__name__})")
            continue
        if json_depth(data) > MAX_DEPTH:  # _walk below recurses: a deep tree is no benchmark record
            notes.append(f"skipped {p}: nested more than {MAX_DEPTH} levels deep")
            continue
        c = calibration_from_bench(data, file=str(p))
        if not c.gpu or not device_matches(c.gpu, gpu):
            notes.append(f"skipped {p}: measured on {c.gpu or 'an unnamed device'}, not {gpu}")
            continue
        cal = cal.merged(c)
    return Calibration(**{**{f.name: getattr(cal, f.name) for f in fields(cal)}, "notes": cal.notes + tuple(notes)})
