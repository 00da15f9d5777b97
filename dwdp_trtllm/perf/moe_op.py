"""This project's whole routed-expert op as measured (ms per call), and how `dwdp plan` prices DWDP's routed experts
with it (pure: numpy and json only).

The op: engine/moe_compute.routed_experts_forward (sort, gather + quantisation, GEMM1, SwiGLU + quantisation, GEMM2,
weighted combine) on one rank holding all E experts in a DWDP rank's buffers ([local | slot]). The TensorRT-LLM
host runs it on DWDP layers with `gemm: multi_buffer` (integration/trtllm/moe_unit.py: the adapter's default for FP8
block scales on sm_90, integration/moe_evidence.default_gemm); with the composite view or merge the host runs
TensorRT-LLM's own CUTLASS MoE (docs/TRTLLM.md), priced from its kernel table (perf/kernel_tables.py) as before.

A measurement is one *record* (`dwdp calibrate` writes one as the calibration file's `moe_op` key; a shipped table
`dwdp_trtllm/data/moe_op/<gpu>.json` lists several under "records"; data/moe_op/README.md):

    {"gemm": "multi_buffer", "weight_dtype": "fp8",
     "model": {"name": "deepseek-r1", "hidden": 7168, "moe_inter": 2048, "experts": 256, "top_k": 8},
     "split": {"dwdp_size": 8, "local_experts": 32, "slot_experts": 224},
     "ms": {"balanced": [[4096, 5.36], [8192, 8.46], [16384, 15.14]], "power_law_1.01": [[4096, 6.04], ...]},
     "source": {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-07", "commit": "f9ac0a7", "command": "...",
                "how": "..."}}

`ms` rows: tokens entering the op on the rank (before top-k) -> ms per call, per routing (kernel_tables.DISTS names;
`balanced` required). Lookup (`curve_ms`): log-log interpolation between rows; past the last row the last row's rate
(constant ms per token, what the kernel tables do), marked with its doublings past the row so the planner's range
widens it (kernel_tables.EXTRAP_PER_DOUBLING); below the first row the first row's time, unmarked as the kernel
tables' latency floor is: an upper bound, since the op's time grows with its tokens (DWDP's worse side). A routing the record lacks is
its balanced row times TensorRT-LLM's own EP1 ratio of that routing to balanced (said in the label).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..spec.schema import ConfigError
from .calibration import device_matches
from .moe_op_record import GEMMS, mapping, model_dims, parse_record, record_json

FORMAT = "dwdp-moe-op/1"
#: gemm paths on which the TensorRT-LLM host runs this project's op on DWDP layers (integration/trtllm/moe_unit.py);
#: composite_view and merge feed TensorRT-LLM's CUTLASS MoE (integration/moe_evidence.VIEW, gemm_choice.MERGE_WHAT)
OUR_OP_GEMMS = ("multi_buffer",)


def curve_ms(rows, tokens) -> tuple[np.ndarray, np.ndarray]:
    """(ms, doublings past the last row) at `tokens` (elementwise): log-log between rows, the last row's rate past it
    (marked), the first row's time below it (an upper bound: not marked, as the kernel tables' latency floor)."""
    xs = np.log([r[0] for r in rows])
    ys = np.log([r[1] for r in rows])
    t = np.maximum(np.asarray(tokens, float), 1.0)
    lt = np.log(t)
    inside = np.exp(np.interp(lt, xs, ys))  # np.interp clamps: the first row's time below it
    x1, y1 = rows[-1][0], rows[-1][1]
    ms = np.where(t > x1, y1 * t / x1, inside)
    beyond = np.where(t > x1, np.log2(np.maximum(t, x1) / x1), 0.0)
    return ms, beyond


def same_shape(rec: dict, model) -> bool:
    """The record measured this model's expert shapes (the name is not compared: a config.json of R1's dims is R1)."""
    d = model_dims(model)
    return all(rec["model"][k] == d[k] for k in ("hidden", "moe_inter", "experts", "top_k"))


def gpu_matches(device_name: str, gpu: str) -> bool:
    """'NVIDIA H100 80GB HBM3' matches h100; 'NVIDIA GB200' matches gb200 but not b200 (calibration.device_matches)."""
    return device_matches(device_name, gpu)


# ---- shipped tables ------------------------------------------------------------------------------------------------
def package_table_path(gpu: str) -> Path | None:
    """The shipped table for `gpu` (h100, h200), or None."""
    p = resources.files("dwdp_trtllm") / "data" / "moe_op" / f"{gpu.lower()}.json"
    return Path(str(p)) if p.is_file() else None


def read_table(path: str | Path) -> dict:
    """A table file {"format", "gpu", "records": [...]}, every record validated."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(str(p), "", f"not a readable moe-op table JSON ({e.__class__.__name__}: {e})") from None
    return parse_table(data, str(p))


def parse_table(data: Any, file: str) -> dict:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(file, "format", f"expected {FORMAT!r} (dwdp_trtllm/data/moe_op/README.md)")
    mapping(file, "", data, ("format", "gpu", "about", "records"), need=("format", "gpu", "records"))
    if not isinstance(data["records"], list) or not data["records"]:
        raise ConfigError(file, "records", f"expected a non-empty list of records, got {data['records']!r}")
    recs = [parse_record(r, file, f"records[{i}]") for i, r in enumerate(data["records"])]
    for i, r in enumerate(recs):
        if not gpu_matches(r["source"]["gpu"], data["gpu"]):
            raise ConfigError(file, f"records[{i}].source.gpu", f"measured on {r['source']['gpu']}, in the "
                                                                f"{data['gpu']} table")
    return {**data, "records": recs}


@functools.lru_cache(maxsize=16)
def _shipped(gpu: str) -> tuple[dict, ...]:
    p = package_table_path(gpu)
    return tuple(read_table(p)["records"]) if p is not None else ()


def table_with(record: dict, gpu: str, table: dict | None = None) -> dict:
    """The table `gpu`'s file should hold with `record` in it: `table`'s records (read_table's) with the one of the
    same (gemm, weight dtype, expert shapes) replaced, else appended. Raises ConfigError when the record was measured
    on another GPU. What scripts/moe_op_table.py writes from a calibration file's moe_op record."""
    if not gpu_matches(record["source"]["gpu"], gpu):
        raise ConfigError(None, "moe_op.source.gpu", f"measured on {record['source']['gpu']}, not {gpu}")
    key = lambda r: (r["gemm"], r["weight_dtype"], tuple(r["model"][k] for k in ("hidden", "moe_inter", "experts",  # noqa: E731
                                                                                  "top_k")))
    old = list((table or {}).get("records", ()))
    recs = [r for r in old if key(r) != key(record)] + [record]
    recs.sort(key=key)
    about = (table or {}).get("about", "This project's whole routed-expert op, ms per call; dwdp_trtllm/data/moe_op/"
                                        "README.md. Written by scripts/moe_op_table.py.")
    return {"format": FORMAT, "gpu": gpu.lower(), "about": about, "records": [record_json(r) for r in recs]}


def dumps_table(table: dict) -> str:
    """A table as its file holds it: indented JSON with each [tokens, ms] row on one line."""
    import re
    text = json.dumps(table, indent=1)
    return re.sub(r"\[\s+(\d+),\s+([-\d.eE+]+)\s+\]", r"[\1, \2]", text) + "\n"


# ---- the op that prices DWDP's routed experts ------------------------------------------------------------------------
@dataclass(frozen=True)
class DwdpExpertOp:
    """This project's op as one record prices it; `where`: the calibration file or the shipped table."""

    record: dict
    where: str

    @property
    def label(self) -> str:
        r, s = self.record, self.record["source"]
        sp = r["split"]
        return (f"this project's op ({r['gemm']}, {r['weight_dtype']}, [{sp['local_experts']} local | "
                f"{sp['slot_experts']} slot]; {self.where}: {s['gpu']}, {s['date']}, commit {s['commit']})")

    def ms(self, dist: str, tokens, ratio_to_balanced=None) -> tuple[np.ndarray, np.ndarray]:
        """(ms, doublings outside the rows) of one call at `tokens` with routing `dist`; a dist the record lacks is
        its balanced row x ratio_to_balanced(tokens) (TensorRT-LLM's EP1 ratio; 1 without one)."""
        rows = self.record["ms"].get(dist)
        if rows is not None:
            return curve_ms(rows, tokens)
        ms, b = curve_ms(self.record["ms"]["balanced"], tokens)
        return ms * (ratio_to_balanced(tokens) if ratio_to_balanced is not None else 1.0), b


@dataclass(frozen=True)
class ExpertPricing:
    """How DWDP's routed experts are priced: `op` None = TensorRT-LLM's table; `why` one short phrase."""

    op: DwdpExpertOp | None
    why: str


def dwdp_pricing(model, gpu: str, weight_dtype: str, gemm: str | None, calibration) -> ExpertPricing:
    """Which op prices DWDP's routed experts for the TensorRT-LLM host running `gemm` (None: not known, TensorRT-LLM's
    table): multi_buffer runs this project's op, from the calibration's `moe_op` record when it matches (gemm, dtype,
    shapes), else the shipped table for `gpu`; other paths, or no measurement, TensorRT-LLM's table. A record measured
    on another GPU than `gpu` is refused (ConfigError naming the file and key), never used."""
    if gemm not in OUR_OP_GEMMS:
        return ExpertPricing(None, "")  # the host runs TensorRT-LLM's CUTLASS MoE on this path (or it is not known)
    rec = getattr(calibration, "moe_op", None) or None
    skipped = ""
    if rec:
        file = next((f for f in reversed(calibration.sources) if f), "the calibration")
        dev = rec["source"]["gpu"]
        if not gpu_matches(dev, gpu):
            raise ConfigError(file, "moe_op.source.gpu", f"measured on {dev}, not this plan's --gpu {gpu}: calibrate "
                                                         "on the GPU you plan for, or leave this file out")
        if rec["gemm"] == gemm and rec["weight_dtype"] == weight_dtype and same_shape(rec, model):
            return ExpertPricing(DwdpExpertOp(rec, f"calibration {file}"), "")
        skipped = (f"the calibration's moe_op is {rec['weight_dtype']} {rec['gemm']} on {rec['model']['name']}'s "
                   f"shapes, not this plan's; ")
    for r in _shipped(gpu.lower()):
        if r["gemm"] == gemm and r["weight_dtype"] == weight_dtype and same_shape(r, model):
            return ExpertPricing(DwdpExpertOp(r, f"shipped table data/moe_op/{gpu.lower()}.json"), skipped)
    return ExpertPricing(None, f"{skipped}no measurement of this project's op ({weight_dtype}, {model.name}'s shapes) "
                               f"on {gpu}")


__all__ = ["DwdpExpertOp", "ExpertPricing", "FORMAT", "GEMMS", "OUR_OP_GEMMS", "curve_ms", "dwdp_pricing", "model_dims",
           "dumps_table", "package_table_path", "parse_record", "read_table", "record_json", "table_with"]
