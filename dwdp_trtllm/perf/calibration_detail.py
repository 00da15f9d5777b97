"""The calibration file's schema-2 keys (`dwdp calibrate` writes them): where and when it was measured, what each key
is (measured on this node, or a prior and why), and the measurements behind the planner's summary keys.

perf/calibration.py owns the file (its docstring lists every key); this module validates the keys schema 2 added,
each error naming the file and the dotted key:

    "schema_version": 2,                   # files without it are schema 1 (the summary keys only); newer: refused
    "measured_on": {"host": "node-a", "at": "2026-12-05T07:00:00Z", "device": "cuda", "purpose": "calibration",
                    "gpu_name": "NVIDIA H200", "gpu_count": 8, "driver": "580.159.04", "torch": "2.11.0",
                    "cuda": "13.0", "topology": "<nvidia-smi topo -m>"},
    "provenance": {"<key>": {"measured": "node-a", "at": "<timestamp>", "how": "<what ran>"}
                   | {"prior": "<where the planner's prior comes from>", "why": "<why it was not measured>"}},
    "peer_pairs": [{"src": 0, "dst": 1, "gbps": 371.0}, ...],  # one-way pull GB/s per ordered GPU pair
    "slice_gbps": [[slice_bytes, gbps], ...],                   # one pair's pull cut into slices of that size
    "many_to_one": [{"slice_bytes": 0, "destinations": 7, "alone_gbps": 370, "together_gbps": 60, "slowdown": 6.2}],
                                                                # G-1 destinations pulling from one source at once
    "group_pull": [{"slice_bytes": 2097152, "ranks": 8, "bytes_per_rank": N, "max_ms": 30.1, "slowdown": 1.1}],
                                                                # every rank pulls its plan from its G-1 peers at once
    "interference_by_phase": {"attention_core": 1.1, "gemm": 1.05, "memory_bound": 1.2, "grouped_gemm": 1.0},
                                                                # compute slowdown with a peer pull beside it
    "copy_slowdown_by_phase": {...same phases...},              # the pull's slowdown beside that compute
    "dep_comm": {"nccl": {"ranks": 8, "bytes_per_rank": N, "ms": 1.2, "gbps": 300.0}}
                                                                # DEP dispatch all-to-all per backend

A prior is never written as a value: the planner treats an input as measured iff the file sets its key, so a key
whose provenance is a prior must be absent, and a key that is present must say it was measured. `measured_on.purpose`
"CPU: functional, not a calibration" marks a `dwdp calibrate --device cpu` file; `load_calibration` refuses it.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Any

from ..spec.schema import ConfigError

SCHEMA_VERSION = 2
#: measured_on.purpose of a `--device cpu` run (the file and the command's output say it; the planner refuses it)
FUNCTIONAL = "CPU: functional, not a calibration"
CALIBRATION = "calibration"
#: the interference phases; the same names as perf/uncertainty.PRIORS
PHASES = ("attention_core", "gemm", "memory_bound", "grouped_gemm")
DEP_BACKENDS = ("nccl", "deepep", "gloo")  # gloo: the CPU functional check only
MACHINE_KEYS = {"host": str, "at": str, "device": str, "purpose": str, "gpu_name": str, "gpu_count": int,
                "driver": str, "torch": str, "cuda": str, "topology": str}
DETAIL_KEYS = ("schema_version", "measured_on", "provenance", "peer_pairs", "slice_gbps", "many_to_one", "group_pull",
               "interference_by_phase", "copy_slowdown_by_phase", "dep_comm")

#: the plausible range of each kind of measured number, (lo, hi) inclusive: a value outside it is a unit error or a
#: broken measurement, never a GPU node's reading (the flags have theirs: --interference [1, 100), a GPU spec file's
#: peaks up to 1e6 TFLOP/s). TFLOP/s: 0.1 (a CPU) to 1e5 (10x the densest FP4 peak shipped, MI355X's 10 PFLOP/s);
#: GB/s one way: 0.1 (PCIe-class through host memory, far below) to 1e5 (55x NVLink 5's 1.8 TB/s); TB/s of HBM: 0.01
#: to 100 (12x HBM3E's 8 TB/s); slowdowns: 1 to 100 (--interference's bound; many-to-one pulls from 63 peers at most
#: make 63x); times in ms: up to 1e7 (almost 3 hours for one call); fractions of a bulk copy: up to 1.5 (noise above
#: 1; the planner caps them at 1).
LIMITS = {"tflops": (0.1, 1e5), "gbps": (0.1, 1e5), "tbps": (0.01, 100.0), "slowdown": (1.0, 100.0),
          "ms": (1e-6, 1e7), "us": (1e-3, 1e10), "fraction": (1e-6, 1.5), "tokens": (1.0, float(1 << 24)),
          "bytes": (0.0, float(1 << 44)), "engine_over_floor": (0.1, 100.0), "ratio": (0.01, 100.0)}
#: a record field's kind (LIMITS); a record's slowdown is a ratio of two timings (noise may put it just below 1)
FIELD_KIND = {"gbps": "gbps", "alone_gbps": "gbps", "together_gbps": "gbps", "slowdown": "ratio", "ms": "ms",
              "max_ms": "ms", "bytes_per_rank": "bytes", "slice_bytes": "bytes"}
#: the most GPUs a calibration can name (ranks, GPU indices below it)
MAX_GPUS = 1024


#: whether LIMITS hold (off only while a CPU functional check's file is read for its tests: tiny shapes on a CPU
#: measure no GPU, and the planner refuses such a file anyway)
_LIMITS_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("calibration_limits_on", default=True)


@contextlib.contextmanager
def limits_off():
    token = _LIMITS_ON.set(False)
    try:
        yield
    finally:
        _LIMITS_ON.reset(token)


def in_range(file: str, key: str, v: float, kind: str) -> float:
    """v when it lies in LIMITS[kind], else ConfigError naming the file and key with the range."""
    if not _LIMITS_ON.get():
        return v
    lo, hi = LIMITS[kind]
    if not lo <= v <= hi:
        raise ConfigError(file, key, f"expected a number in [{lo:g}, {hi:g}] (a plausible {kind.replace('_', ' ')} "
                                     f"value), got {v!r}")
    return v


def _pos(file: str, key: str, v: Any, *, integer: bool = False, zero: bool = False) -> float:
    """A finite number > 0 (>= 0 with `zero`), within LIMITS of its field's kind (FIELD_KIND, by the key's last part)."""
    kind = int if integer else (int, float)
    if (isinstance(v, bool) or not isinstance(v, kind) or (not integer and not math.isfinite(v))
            or not (v >= 0 if zero else v > 0)):
        raise ConfigError(file, key, f"expected {'an integer' if integer else 'a number'} {'>=' if zero else '>'} 0"
                                     f"{'' if integer else ' (finite)'}, got {v!r}")
    field = key.rsplit(".", 1)[-1]
    if field in FIELD_KIND:
        in_range(file, key, v, FIELD_KIND[field])
    return v if integer else float(v)


def _mapping(file: str, key: str, v: Any, fields: dict[str, type] | tuple[str, ...], *, need=()) -> dict:
    if not isinstance(v, dict):
        raise ConfigError(file, key, f"expected a mapping, got {v!r}")
    for k in v:
        if k not in fields:
            raise ConfigError(file, f"{key}.{k}", f"unknown key; expected one of {', '.join(fields)}")
    for k in need:
        if k not in v:
            raise ConfigError(file, f"{key}.{k}", "missing")
    return v


def _record(file: str, key: str, r: Any, fields: dict[str, tuple[bool, bool]]) -> dict:
    """A mapping with exactly `fields` (name -> (integer, zero allowed)), every value a number >= or > 0."""
    _mapping(file, key, r, tuple(fields), need=tuple(fields))
    return {k: _pos(file, f"{key}.{k}", r[k], integer=a, zero=z) for k, (a, z) in fields.items()}


def _records(file: str, key: str, v: Any, fields: dict[str, tuple[bool, bool]]) -> tuple[dict, ...]:
    """A non-empty list of _record mappings."""
    if not isinstance(v, list) or not v:
        raise ConfigError(file, key, f"expected a non-empty list of records, got {v!r}")
    return tuple(_record(file, f"{key}[{i}]", r, fields) for i, r in enumerate(v))


def _slice_points(file: str, v: Any) -> tuple[tuple[int, float], ...]:
    """[[slice_bytes (0: one op), gbps], ...], distinct sizes, sorted."""
    if not isinstance(v, list) or not v:
        raise ConfigError(file, "slice_gbps", f"expected a non-empty list of [slice_bytes, gbps] pairs, got {v!r}")
    out = []
    for i, p in enumerate(v):
        if not isinstance(p, list) or len(p) != 2:
            raise ConfigError(file, f"slice_gbps[{i}]", f"expected a pair [slice_bytes, gbps], got {p!r}")
        out.append((_pos(file, f"slice_gbps[{i}][0]", p[0], integer=True, zero=True),
                    in_range(file, f"slice_gbps[{i}][1]", _pos(file, f"slice_gbps[{i}][1]", p[1]), "gbps")))
    if len({s for s, _ in out}) != len(out):
        raise ConfigError(file, "slice_gbps", f"slice sizes must be distinct, got {[s for s, _ in out]}")
    return tuple(sorted(out))


def schema_version(data: dict, file: str) -> int:
    """The file's schema_version (1 when absent); a newer one than this package reads is refused."""
    v = data.get("schema_version", 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(file, "schema_version", f"expected an integer >= 1, got {v!r}")
    if v > SCHEMA_VERSION:
        raise ConfigError(file, "schema_version", f"{v} is newer than this dwdp_trtllm reads ({SCHEMA_VERSION}): "
                                                  "upgrade dwdp_trtllm, or calibrate again with this version")
    return v


def parse_detail(data: dict, file: str, known: tuple[str, ...]) -> dict:
    """Calibration fields of the schema-2 keys in `data` (already checked to be among `known`)."""
    kw: dict[str, Any] = {"schema_version": schema_version(data, file)}
    if kw["schema_version"] < 2:
        extra = [k for k in data if k in DETAIL_KEYS and k != "schema_version"]
        if extra:
            raise ConfigError(file, extra[0], "a schema_version 2 key in a schema_version 1 file: set schema_version 2")
    if "measured_on" in data:
        m = _mapping(file, "measured_on", data["measured_on"], MACHINE_KEYS, need=("host", "at", "device", "purpose"))
        for k, v in m.items():
            t = MACHINE_KEYS[k]
            if isinstance(v, bool) or not isinstance(v, t) or (t is int and not 1 <= v <= MAX_GPUS):
                raise ConfigError(file, f"measured_on.{k}", f"expected {f'an integer in [1, {MAX_GPUS}]' if t is int else 'a string'}, "
                                                           f"got {v!r}")
        if m["device"] not in ("cuda", "cpu"):
            raise ConfigError(file, "measured_on.device", f"expected cuda or cpu, got {m['device']!r}")
        if m["purpose"] not in (CALIBRATION, FUNCTIONAL):
            raise ConfigError(file, "measured_on.purpose", f"expected {CALIBRATION!r} or {FUNCTIONAL!r}, got {m['purpose']!r}")
        kw["measured_on"] = dict(m)
    if "provenance" in data:
        kw["provenance"] = _provenance(data, file, known)
    if "peer_pairs" in data:
        kw["peer_pairs"] = _records(file, "peer_pairs", data["peer_pairs"],
                                    {"src": (True, True), "dst": (True, True), "gbps": (False, False)})
        for i, r in enumerate(kw["peer_pairs"]):
            if r["src"] == r["dst"]:
                raise ConfigError(file, f"peer_pairs[{i}]", f"src and dst must differ, got {r['src']} twice")
    if "slice_gbps" in data:
        kw["slice_gbps"] = _slice_points(file, data["slice_gbps"])
    if "many_to_one" in data:
        kw["many_to_one"] = _records(file, "many_to_one", data["many_to_one"], {
            "slice_bytes": (True, True), "destinations": (True, False), "alone_gbps": (False, False),
            "together_gbps": (False, False), "slowdown": (False, False)})
    if "group_pull" in data:
        kw["group_pull"] = _records(file, "group_pull", data["group_pull"], {
            "slice_bytes": (True, True), "ranks": (True, False), "bytes_per_rank": (True, False),
            "max_ms": (False, False), "slowdown": (False, False)})
    for k in ("interference_by_phase", "copy_slowdown_by_phase"):
        if k in data:
            m = _mapping(file, k, data[k], PHASES)
            if not m:
                raise ConfigError(file, k, f"expected a mapping with keys among {', '.join(PHASES)}, got {{}}")
            kw[k] = {p: _pos(file, f"{k}.{p}", v) for p, v in m.items()}
            low = {p: v for p, v in kw[k].items() if v < 1}
            if low:  # a slowdown: copies beside compute cannot speed it up (a reading below 1 is noise)
                p, v = next(iter(low.items()))
                raise ConfigError(file, f"{k}.{p}", f"expected a slowdown >= 1, got {v:g}")
            for p, v in kw[k].items():
                in_range(file, f"{k}.{p}", v, "slowdown")
    if "dep_comm" in data:
        m = _mapping(file, "dep_comm", data["dep_comm"], DEP_BACKENDS)
        if not m:
            raise ConfigError(file, "dep_comm", f"expected a mapping with keys among {', '.join(DEP_BACKENDS)}, got {{}}")
        fields = {"ranks": (True, False), "bytes_per_rank": (True, False), "ms": (False, False), "gbps": (False, False)}
        kw["dep_comm"] = {b: _record(file, f"dep_comm.{b}", r, fields) for b, r in m.items()}
    _within_gpu_count(kw, file)
    if kw["schema_version"] >= 2:
        _every_key_has_provenance(data, file, kw.get("provenance", {}))
    return kw


#: keys that describe the file, not a measurement: no provenance entry
_DESCRIBE = ("schema_version", "measured_on", "provenance", "gpu")


def _every_key_has_provenance(data: dict, file: str, provenance: dict) -> None:
    """A schema-2 file (`dwdp calibrate` writes one provenance entry per key it handles) sets no value without
    saying where it was measured."""
    for k in data:
        if k not in _DESCRIBE and k not in provenance:
            raise ConfigError(file, f"provenance.{k}", f"missing: the file sets {k} but does not say where it was "
                                                       "measured (a schema_version 2 file has a provenance entry for "
                                                       "every key it sets)")


def _within_gpu_count(kw: dict, file: str) -> None:
    """GPU indices below, and rank counts at most, the GPUs the file was measured on (measured_on.gpu_count, else
    MAX_GPUS)."""
    count = kw.get("measured_on", {}).get("gpu_count")
    n = count or MAX_GPUS
    said = f"measured_on.gpu_count {count}" if count else f"at most {MAX_GPUS} GPUs"
    for i, r in enumerate(kw.get("peer_pairs", ())):
        for end in ("src", "dst"):
            if r[end] >= n:
                raise ConfigError(file, f"peer_pairs[{i}].{end}", f"expected a GPU index in [0, {n - 1}] ({said}), "
                                                                  f"got {r[end]}")
    checks = [(f"many_to_one[{i}].destinations", r["destinations"], n - 1) for i, r in enumerate(kw.get("many_to_one", ()))]
    checks += [(f"group_pull[{i}].ranks", r["ranks"], n) for i, r in enumerate(kw.get("group_pull", ()))]
    checks += [(f"dep_comm.{b}.ranks", r["ranks"], n) for b, r in kw.get("dep_comm", {}).items()]
    for key, v, hi in checks:
        if v > hi:
            raise ConfigError(file, key, f"expected at most {hi} ({said}), got {v}")


def _provenance(data: dict, file: str, known: tuple[str, ...]) -> dict:
    """Every entry names a key of the file format; a measured key is set in the file, a prior one is not."""
    p = _mapping(file, "provenance", data["provenance"], known)
    out = {}
    for k, v in p.items():
        key = f"provenance.{k}"
        if k in ("schema_version", "measured_on", "provenance", "gpu"):
            raise ConfigError(file, key, "provenance is for measured values; this key describes the file")
        if isinstance(v, dict) and "measured" in v:
            _mapping(file, key, v, ("measured", "at", "how"), need=("measured", "at", "how"))
            if k not in data:
                raise ConfigError(file, key, f"says measured, but the file does not set {k}")
        elif isinstance(v, dict) and "prior" in v:
            _mapping(file, key, v, ("prior", "why"), need=("prior", "why"))
            if k in data:
                raise ConfigError(file, key, f"says prior, but the file sets {k} (a prior is never written as a "
                                             "value: the planner treats a set key as measured)")
        else:
            raise ConfigError(file, key, f"expected {{measured, at, how}} or {{prior, why}}, got {v!r}")
        if not all(isinstance(x, str) and x for x in v.values()):
            raise ConfigError(file, key, f"expected non-empty strings, got {v!r}")
        out[k] = dict(v)
    return out
