"""TensorRT-LLM's measured kernel times (NVIDIA aiconfigurator's per-op tables), as shipped package data (pure).

`scripts/extract_aiconfigurator.py` (pinned aiconfigurator-core) writes `dwdp_trtllm/data/kernel_tables/<gpu>.json`;
this module reads one, matches a ModelSpec to a shape in it by dims, and answers lookups. Each answer comes with
how far it reaches past the table (`beyond`, in doublings of the last row; 0 inside): a table never extrapolates
silently. Rules (docs/PLANNER.md "Kernel tables"):

- curves [x, ms] (GEMM by tokens m, MoE by tokens entering the op, NCCL by elements): linear interpolation inside;
  below the first row the first row's time (a latency floor); past the last row the last row's time per unit
  (constant rate: what aiconfigurator itself does, e.g. a DEP8 MoE op at 131K tokens = 8 x its 16K row), and the
  cell is marked. The planner's range widens such a cell by EXTRAP_PER_DOUBLING per doubling.
- the attention core [batch, isl, ms]: a rate (causal FLOPs / time) interpolated bilinearly in log2(batch),
  log2(isl), clamped to the measured grid (ISL past the last row: marked).

Legend: arrays of any shape (tokens_SR: per sample and rank); times in ms here, us at the cost-model boundary.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..spec.models import ModelSpec
from ..spec.schema import ConfigError

FORMAT = "dwdp-kernel-tables/1"
#: planner weight dtype -> the table's dtype for dense GEMMs / the attention core's KV cache
GEMM_DTYPE = {"fp8": "fp8_block", "bf16": "bfloat16", "mxfp4": "fp8_block", "nvfp4": "fp8_block"}
KV_DTYPE = {"fp8": "fp8", "bf16": "bfloat16", "mxfp4": "fp8", "nvfp4": "fp8"}
#: routing distributions the MoE rows are measured at (scripts/extract_aiconfigurator.py keeps the same three)
DISTS = ("balanced", "power_law_1.01", "power_law_1.2")
#: range of an extrapolated cell: its time may be this much lower or higher per doubling past the last row
#: (the rate over the tables' last doubling moved -6% .. +3% for the fused MoE, <= 5% for GEMMs; assumption)
EXTRAP_PER_DOUBLING = 0.05


def package_table_path(gpu: str) -> Path | None:
    """The shipped table for `gpu` (h100, h200, b200, gb200), or None."""
    p = resources.files("dwdp_trtllm") / "data" / "kernel_tables" / f"{gpu.lower()}.json"
    return Path(str(p)) if p.is_file() else None


def curve_ms(points, x) -> tuple[np.ndarray, np.ndarray]:
    """(ms, doublings past the last row) of a [[x, ms], ...] curve at x (elementwise)."""
    xs = np.array([p[0] for p in points], float)
    ys = np.array([p[1] for p in points], float)
    x = np.maximum(np.asarray(x, float), 0.0)
    inside = np.interp(x, xs, ys)
    over = x > xs[-1]
    out = np.where(over, ys[-1] * x / xs[-1], inside)
    beyond = np.where(over, np.log2(np.maximum(x, xs[-1]) / xs[-1]), 0.0)
    return out, beyond


@dataclass(frozen=True)
class ShapeTables:
    """One model shape's tables from one GPU's file."""

    name: str
    gpu: str
    data: dict
    source: dict

    # ---- lookups ------------------------------------------------------------------------------------
    def gemm_ms(self, op: str, dtype: str, m):
        """(ms, beyond) of dense GEMM `op` (q_a, kv_a, q_b, kv_b, o, qkv, shared_fc1/2, dense_fc1/2, router) at m
        tokens; (None, None) when the table lacks it."""
        g = self.data["gemm"].get(GEMM_DTYPE.get(dtype, dtype), {}).get("ops", {}).get(op)
        if g is None:
            return None, None
        return curve_ms(g["points"], m)

    def moe_ms(self, weight_dtype: str, ep: int, dist: str, tokens):
        """(ms, beyond) of the fused MoE op at EP `ep` with `tokens` entering it (DEP: all attention-DP ranks'
        tokens); None when the table lacks this dtype / EP."""
        t = self.data["moe"].get(weight_dtype)
        if t is None or str(ep) not in t["ep"] or dist not in t["ep"][str(ep)]:
            return None, None
        return curve_ms(t["ep"][str(ep)][dist], tokens)

    def moe_eps(self, weight_dtype: str) -> tuple[int, ...]:
        t = self.data["moe"].get(weight_dtype)
        return tuple(sorted(int(e) for e in t["ep"])) if t else ()

    @functools.cached_property
    def _core_grids(self) -> dict:
        return {}

    def core_grid(self, kv: str):
        """(log2 batch [B], log2 isl [I], rate FLOP/ms [I, B]) of the attention core, or None."""
        if kv in self._core_grids:
            return self._core_grids[kv]
        t = self.data["attention_core"].get(kv)
        if not t:
            self._core_grids[kv] = None
            return None
        rows = [(b, i, ms) for b, i, ms in t["rows"] if i >= 128 and ms > 0]
        bs = sorted({r[0] for r in rows})
        isls = sorted({r[1] for r in rows})
        rate = np.full((len(isls), len(bs)), np.nan)
        for b, i, ms in rows:
            rate[isls.index(i), bs.index(b)] = b * float(i) * float(i) / ms  # x heads*(d_qk+d_v)/1: scaled by caller
        for r in range(len(isls)):  # fill batches a grid row lacks with the nearest measured batch's rate
            row = rate[r]
            ok = np.flatnonzero(~np.isnan(row))
            if ok.size:
                rate[r] = row[ok[np.abs(np.arange(len(bs))[:, None] - ok[None, :]).argmin(1)]]
        keep = ~np.isnan(rate).all(1)
        grid = (np.log2(bs), np.log2(np.array(isls, float))[keep], rate[keep])
        self._core_grids[kv] = grid
        return grid

    def core_ms(self, kv: str, flops, per_request_flops_at, isl, tokens):
        """(ms, beyond) of the attention core doing `flops` for requests of length `isl` packed `tokens` per rank.
        per_request_flops_at(isl) gives one whole request's causal FLOPs (the table's rate is computed with it)."""
        grid = self.core_grid(kv)
        if grid is None:
            return None, None
        lb, li, rate = grid
        isl = np.maximum(np.asarray(isl, float), 1.0)
        x_b = np.clip(np.log2(np.maximum(np.asarray(tokens, float) / isl, 1.0)), lb[0], lb[-1])
        x_i = np.clip(np.log2(isl), li[0], li[-1])
        # bilinear in (log2 isl, log2 batch)
        i1 = np.clip(np.searchsorted(li, x_i), 1, len(li) - 1)
        b1 = np.clip(np.searchsorted(lb, x_b), 1, len(lb) - 1)
        wi = (x_i - li[i1 - 1]) / (li[i1] - li[i1 - 1])
        wb = (x_b - lb[b1 - 1]) / (lb[b1] - lb[b1 - 1])
        r = ((1 - wi) * ((1 - wb) * rate[i1 - 1, b1 - 1] + wb * rate[i1 - 1, b1])
             + wi * ((1 - wb) * rate[i1, b1 - 1] + wb * rate[i1, b1]))
        # rate was stored as b*isl^2/ms; convert to FLOP/ms with the model's FLOPs of one request at that isl
        scale = per_request_flops_at(np.exp2(x_i)) / np.exp2(2 * x_i)
        ms = np.asarray(flops, float) / (r * scale)
        beyond = np.maximum(np.log2(isl) - li[-1], 0.0)
        return ms, beyond

    def module_remainder_ms_per_token(self) -> float:
        """MLA module rows over core + projections (norms, RoPE, KV write, quantisation), ms per token (>= 0)."""
        r = self.data.get("mla_module_remainder") or {}
        v = (r.get("ms_per_1k_tokens") or {}).get("median", 0.0)
        return max(0.0, float(v)) / 1000.0

    def comm_ms(self, op: str, group: int, elements):
        """(ms, beyond) of NCCL `op` (all_gather, reduce_scatter; half) over `group` GPUs moving `elements`."""
        t = self.source.get("comm", {}).get("nccl", {}).get(op, {})
        g = str(group) if str(group) in t else None
        if g is None:
            return None, None
        return curve_ms(t[g], elements)

    def deepep_ms(self, hidden: int, group: int, tokens_per_rank, dtype: str = "bfloat16"):
        """(ms, beyond) of DeepEP high-throughput dispatch + combine (`dtype` dispatch: bfloat16 | nvfp4; combine
        BF16) at `tokens_per_rank`, or (None, None).
        A hidden size between the table's is interpolated linearly in it (the bytes moved are proportional to it);
        outside them the nearest row is scaled by hidden / its hidden."""
        by = self.source.get("comm", {}).get("deepep_ht", {}).get("by_hidden", {})
        rows = {int(h): v.get(dtype, {}).get(str(group)) for h, v in by.items()}
        rows = {h: v for h, v in rows.items() if v and "dispatch" in v and "combine" in v}
        if not rows:
            return None, None

        def at(h: int):
            d, bd = curve_ms(rows[h]["dispatch"], tokens_per_rank)
            c, bc = curve_ms(rows[h]["combine"], tokens_per_rank)
            return d + c, np.maximum(bd, bc)
        hs = sorted(rows)
        if hidden in rows:
            return at(hidden)
        lo = max((h for h in hs if h < hidden), default=None)
        hi = min((h for h in hs if h > hidden), default=None)
        if lo is None or hi is None:
            near = hi if lo is None else lo
            ms, b = at(near)
            return ms * hidden / near, b
        (ml, bl), (mh, bh) = at(lo), at(hi)
        w = (hidden - lo) / (hi - lo)
        return (1 - w) * ml + w * mh, np.maximum(bl, bh)

    def describe(self, weight_dtype: str | None = None) -> str:
        """Which tables price this shape (for `weight_dtype`'s rows only when given)."""
        s = self.source["source"]
        moe = {k: v for k, v in self.data["moe"].items() if weight_dtype in (None, k)}
        core = {k: v for k, v in self.data["attention_core"].items() if weight_dtype is None or k == KV_DTYPE[weight_dtype]}
        vers = sorted({v["version"] for v in moe.values()} | {v["version"] for v in core.values()})
        return (f"TensorRT-LLM kernel tables {self.gpu}/{self.name} (aiconfigurator-core {s['version']}, "
                f"trtllm {', '.join(vers)}; {s['script']})")


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(str(path), "", f"not a readable kernel-table JSON ({e.__class__.__name__}: {e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(str(path), "format", f"expected {FORMAT!r} (written by scripts/extract_aiconfigurator.py)")
    return data


@functools.lru_cache(maxsize=16)
def load_tables(path: str) -> dict:
    return _read(Path(path))


def _dims(spec: ModelSpec) -> dict[str, Any]:
    return {"hidden": spec.hidden_size, "moe_inter": spec.moe_intermediate, "experts": spec.num_experts,
            "top_k": spec.top_k, "attention": spec.attention, "heads": spec.num_heads, "kv_heads": spec.num_kv_heads}


def shape_tables(spec: ModelSpec, gpu: str, path: str | Path | None = None) -> ShapeTables | None:
    """The tables of the shape in `gpu`'s file (or `path`) whose dims equal `spec`'s; None if there is none."""
    return _shape_tables(tuple(sorted(_dims(spec).items())), gpu.lower(), str(path) if path else None)


@functools.lru_cache(maxsize=64)  # one ShapeTables (and its interpolation grids) per (shape, GPU, file)
def _shape_tables(dims: tuple, gpu: str, path: str | None) -> ShapeTables | None:
    p = Path(path) if path else package_table_path(gpu)
    if p is None:
        return None
    data = load_tables(str(p))
    want = dict(dims)
    for name, m in data["models"].items():
        if all(m["dims"].get(k) == v for k, v in want.items() if k in m["dims"]):
            return ShapeTables(name, data["gpu"], m, data)
    return None


def beyond_range(beyond, per_doubling: float = EXTRAP_PER_DOUBLING) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) multipliers of an extrapolated cell's time: (1 -/+ per_doubling) ** doublings."""
    b = np.asarray(beyond, float)
    return (1 - per_doubling) ** b, (1 + per_doubling) ** b


__all__ = ["EXTRAP_PER_DOUBLING", "ShapeTables", "beyond_range", "curve_ms", "load_tables", "package_table_path",
           "shape_tables"]
