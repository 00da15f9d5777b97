#!/usr/bin/env python3
"""Turn NVIDIA aiconfigurator's TensorRT-LLM per-op tables into the planner's kernel tables (package data).

Pinned source: aiconfigurator-core==0.12.0 (Apache-2.0), its parquet tables under
`aiconfigurator_core/systems/data/<system>/<family>/<framework>/<version>/`, read with pandas only (the package's
per-op query API changed in its last release and the distribution is being renamed: we read the raw tables, the
low-risk way; /work/shared/reference/aiconfigurator-crosscheck.md section 5). Not a project dependency: install it
in a throwaway environment and run this script there:

    python3 -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator-core==0.12.0
    /tmp/aic/bin/python scripts/extract_aiconfigurator.py --out dwdp_trtllm/data/kernel_tables

Writes one compact JSON per GPU (h100, h200, b200, gb200) with, per model shape the planner prices
(SHAPES below): the context attention core (MLA: context_mla_perf; GQA: context_attention_perf) by (batch, ISL);
for MLA the module rows' remainder over core + projections (norms, RoPE, KV write, quantisation) per token; the
dense GEMMs (projections, shared experts, dense MLP, router) by tokens (m) in fp8_block and bfloat16; the fused MoE
op by tokens entering it for every EP size and routing distribution (balanced, power_law_1.01, power_law_1.2);
and for DEP's communication NCCL all-gather / reduce-scatter (half, 2/4/8 GPUs, by elements) and TensorRT-LLM's
DeepEP high-throughput dispatch / combine (EP8, by tokens per rank). Every entry records the table path, the
framework and version it came from. Numbers are copied, never fitted: the planner interpolates and marks what it
extrapolates (docs/PLANNER.md). GEMM shapes off the table's (n, k) grid are interpolated linearly in n and k
(latency), as the entry's `nk_interpolated` says.

Generation rows (`--what generation`, written to dwdp_trtllm/data/generation_tables/<gpu>.json, read by
dwdp_trtllm/sizing/decode_cost.py for `dwdp size`): per MLA shape the whole MLA generation module
(mla_generation_module_perf: projections + core + BMMs of one decode step of one attention-DP rank) by (batch,
KV length) per (gemm_type, kv_cache_dtype); the LM head GEMM by tokens (bfloat16, off the table's (n, k) grid:
interpolated as above); and DeepEP low-latency dispatch / combine (trtllm_deepep_ll) by tokens per rank. The fused
MoE, shared-expert, router and dense-MLP rows a decode step also needs are the context tables' (their curves start
at 1 token). For generation servers with MoE tensor parallelism or attention TP (`dwdp size --gen-moe-tp`,
`--gen-attn-tp`): the fused MoE op at moe_tp_size > 1 (`moe_tp`: every TP x EP shape and routing the table has), the
module rows at 128 / a heads (one GPU of an attention-TP group of a, `mla_generation_module_by_heads`), the
shared-expert, dense-MLP and LM-head GEMMs split over a GPUs (`<op>/tp<a>`), and TensorRT-LLM's custom all-reduce
(custom_allreduce_perf, BF16, by GPUs) for attention TP's two all-reduces per layer. For TP context servers
(`dwdp size --tp-size`, sizing/tp_cost.py): the MLA context module rows (mla_context_module_perf) by (batch, ISL) at
128 heads and at 128 / a heads (`mla_context_module_by_heads`); the TP GEMM and all-reduce rows above serve them too.

Latencies: milliseconds (the DeepEP table's microseconds are converted).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

PINNED = "0.12.0"
SYSTEMS = {"h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "gb200": "gb200"}
MOE_DTYPES = {"fp8_block": "fp8", "bfloat16": "bf16", "nvfp4": "nvfp4"}  # table dtype -> planner weight dtype
DISTS = ("balanced", "power_law_1.01", "power_law_1.2")
# TensorRT-LLM version preference per family: the newest collection first, older ones fill shapes it lacks
MOE_VERSIONS = ("1.3.0rc20", "1.3.0rc10")


def mla_gemms(H, heads, q_lora, kv_lora, nope, rope, v):
    return {"q_a": (q_lora, H), "kv_a": (kv_lora + rope, H), "q_b": (heads * (nope + rope), q_lora),
            "kv_b": (heads * (nope + v), kv_lora), "o": (H, heads * v)}


#: model shapes priced from the tables (dims of the HF config.json; the planner matches a ModelSpec by these dims)
SHAPES = {
    "deepseek-v3": dict(
        hidden=7168, moe_inter=2048, experts=256, top_k=8, attention="mla", heads=128, kv_heads=128,
        gemms={**mla_gemms(7168, 128, 1536, 512, 128, 64, 128), "shared_fc1": (2 * 2048, 7168),
               "shared_fc2": (7168, 2048), "dense_fc1": (2 * 18432, 7168), "dense_fc2": (7168, 18432)},
        router=(256, 7168)),
    "qwen3-235b-a22b": dict(
        hidden=4096, moe_inter=1536, experts=128, top_k=8, attention="gqa", heads=64, kv_heads=4, head_dim=128,
        gemms={"qkv": ((64 + 2 * 4) * 128, 4096), "o": (4096, 64 * 128)}, router=(128, 4096)),
    "qwen3-30b-a3b": dict(
        hidden=2048, moe_inter=768, experts=128, top_k=8, attention="gqa", heads=32, kv_heads=4, head_dim=128,
        gemms={"qkv": ((32 + 2 * 4) * 128, 2048), "o": (2048, 32 * 128)}, router=(128, 2048)),
}


def newest(dirs):
    def key(p):
        return [int(x) if x.isdigit() else x for x in p.name.replace("rc", ".").split(".")]
    return sorted(dirs, key=key)[-1] if dirs else None


def meta(path: Path) -> dict:
    import yaml
    m = path.parent / "collection_meta.yaml"
    if not m.exists():
        return {}
    d = yaml.safe_load(m.read_text()) or {}
    out = {k: d[k] for k in ("provenance",) if k in d}
    rt = d.get("runtime") or {}
    out.update({f"runtime_{k}": v for k, v in rt.items() if isinstance(v, (str, int, float))})
    return out


def src(path: Path, root: Path, **select) -> dict:
    parts = path.relative_to(root).parts  # system/family/framework/version/table
    return {"table": "/".join(parts), "framework": parts[2], "version": parts[3], "select": select, **meta(path)}


def rnd(x: float) -> float:
    return float(f"{x:.5g}")


def gemm_curve(g, dtype: str, n: int, k: int):
    """[[m, ms]] of an (n, k) GEMM in `dtype`; off-grid n / k interpolated linearly in latency between the
    bracketing grid values (proportionally beyond the grid). Returns (points, nk_interpolated)."""
    d = g[g.gemm_dtype == dtype]
    if d.empty:
        return None, False
    ns, ks = sorted(d.n.unique()), sorted(d.k.unique())

    def bracket(grid, v):
        if v in grid:
            return [(v, 1.0)]
        lo = max([x for x in grid if x < v], default=None)
        hi = min([x for x in grid if x > v], default=None)
        if lo is None:
            return [(hi, v / hi)]
        if hi is None:
            return [(lo, v / lo)]
        w = (v - lo) / (hi - lo)
        return [(lo, 1 - w), (hi, w)]

    weights = bracket  # beyond the grid: the edge value scaled proportionally (a weight v / edge)
    acc: dict[int, float] = {}
    cnt: dict[int, float] = {}
    for nn, wn in weights(ns, n):
        for kk, wk in weights(ks, k):
            sub = d[(d.n == nn) & (d.k == kk)].groupby("m").latency.min()
            for m, lat in sub.items():
                acc[int(m)] = acc.get(int(m), 0.0) + wn * wk * float(lat)
                cnt[int(m)] = cnt.get(int(m), 0) + 1
    need = len(weights(ns, n)) * len(weights(ks, k))
    # keep m on the power-of-two-ish grid (the +1 rows are tile-boundary probes; they add noise, not reach)
    pts = [[m, rnd(acc[m])] for m in sorted(acc) if cnt[m] == need and (m & (m - 1) == 0 or m % 256 == 0)]
    return (pts or None), not (n in ns and k in ks)


def extract(system: str, root: Path) -> dict:
    import pandas as pd
    base = root / system
    out: dict = {"models": {}, "comm": {}}
    gemm_dir = newest([p for p in (base / "gemm" / "trtllm").glob("*") if (p / "gemm_perf.parquet").exists()])
    gemm = pd.read_parquet(gemm_dir / "gemm_perf.parquet") if gemm_dir else None
    mla_dir = base / "mla" / "trtllm" / "1.3.0rc20"
    att_dir = base / "attention" / "trtllm" / "1.3.0rc20"
    moe_tables = [(v, pd.read_parquet(base / "moe" / "trtllm" / v / "moe_perf.parquet"))
                  for v in MOE_VERSIONS if (base / "moe" / "trtllm" / v / "moe_perf.parquet").exists()]
    for name, s in SHAPES.items():
        m: dict = {"dims": {k: s[k] for k in ("hidden", "moe_inter", "experts", "top_k", "attention", "heads",
                                               "kv_heads") if k in s}}
        # ---- attention core ----
        core = {}
        if s["attention"] == "mla" and (mla_dir / "context_mla_perf.parquet").exists():
            p = mla_dir / "context_mla_perf.parquet"
            t = pd.read_parquet(p)
            for kv in ("fp8", "bfloat16"):
                q = t[(t.num_heads == s["heads"]) & (t.tp_size == 1) & (t.kv_cache_dtype == kv) & (t.mla_dtype == "bfloat16")]
                if len(q):
                    core[kv] = {**src(p, root, num_heads=s["heads"], tp_size=1, kv_cache_dtype=kv, mla_dtype="bfloat16"),
                                "rows": [[int(r.batch_size), int(r.isl), rnd(r.latency)] for r in
                                         q.sort_values(["batch_size", "isl"]).itertuples()]}
        elif s["attention"] == "gqa" and (att_dir / "context_attention_perf.parquet").exists():
            p = att_dir / "context_attention_perf.parquet"
            t = pd.read_parquet(p)
            for kv in ("fp8", "bfloat16"):
                q = t[(t.num_heads == s["heads"]) & (t.num_key_value_heads == s["kv_heads"]) & (t.head_dim == s["head_dim"])
                      & (t.window_size == 0) & (t.attn_dtype == "bfloat16") & (t.kv_cache_dtype == kv)]
                if len(q):
                    q = q.groupby(["batch_size", "isl"]).latency.min().reset_index()
                    core[kv] = {**src(p, root, num_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                                      head_dim=s["head_dim"], window_size=0, attn_dtype="bfloat16", kv_cache_dtype=kv),
                                "rows": [[int(r.batch_size), int(r.isl), rnd(r.latency)] for r in
                                         q.sort_values(["batch_size", "isl"]).itertuples()]}
        m["attention_core"] = core
        # ---- dense GEMMs ----
        gem: dict = {}
        if gemm is not None:
            p = gemm_dir / "gemm_perf.parquet"
            for dtype in ("fp8_block", "bfloat16"):
                ops = {}
                shapes = dict(s["gemms"])
                if dtype == "bfloat16":
                    shapes["router"] = s["router"]
                for op, (n, k) in shapes.items():
                    pts, interp = gemm_curve(gemm, dtype, n, k)
                    if pts:
                        ops[op] = {"n": n, "k": k, "nk_interpolated": interp, "points": pts}
                if ops:
                    gem[dtype] = {**src(p, root, gemm_dtype=dtype), "ops": ops}
        m["gemm"] = gem
        # ---- MLA module remainder: module - core - projections, per token ----
        if s["attention"] == "mla" and core and gem.get("fp8_block") and (mla_dir / "mla_context_module_perf.parquet").exists():
            m["mla_module_remainder"] = module_remainder(mla_dir / "mla_context_module_perf.parquet", root, s, core, gem)
        # ---- MoE ----
        moe: dict = {}
        for tdtype, wd in MOE_DTYPES.items():
            for v, t in moe_tables:
                q = t[(t.hidden_size == s["hidden"]) & (t.inter_size == s["moe_inter"]) & (t.num_experts == s["experts"])
                      & (t.topk == s["top_k"]) & (t.moe_tp_size == 1) & (t.moe_dtype == tdtype)]
                if q.empty or wd in moe:
                    continue
                p = base / "moe" / "trtllm" / v / "moe_perf.parquet"
                by_ep: dict = {}
                for (ep, dist), g in q.groupby(["moe_ep_size", "distribution"]):
                    if dist not in DISTS:
                        continue
                    g = g.groupby("num_tokens").latency.min()
                    by_ep.setdefault(str(int(ep)), {})[dist] = [[int(n), rnd(l)] for n, l in g.items()]
                moe[wd] = {**src(p, root, hidden_size=s["hidden"], inter_size=s["moe_inter"], num_experts=s["experts"],
                                 topk=s["top_k"], moe_tp_size=1, moe_dtype=tdtype),
                           "kernel_source": sorted(q.kernel_source.unique().tolist()), "ep": by_ep}
        m["moe"] = moe
        out["models"][name] = m
    # ---- communication ----
    nccl_dir = newest([p for p in (base / "comm" / "nccl").glob("*") if (p / "nccl_perf.parquet").exists()])
    if nccl_dir:
        p = nccl_dir / "nccl_perf.parquet"
        t = pd.read_parquet(p)
        t = t[t.nccl_dtype == "half"]
        ops = {}
        for op in ("all_gather", "reduce_scatter"):
            ops[op] = {str(int(g)): [[int(r.message_size), rnd(r.latency)] for r in
                                     t[(t.op_name == op) & (t.num_gpus == g)].sort_values("message_size").itertuples()]
                       for g in sorted(t.num_gpus.unique())}
        out["comm"]["nccl"] = {**src(p, root, nccl_dtype="half"), "x": "elements of the gathered buffer", **ops}
    a2a = sorted((base / "comm" / "trtllm").glob("*/moe_a2a_perf.parquet"))
    if a2a:
        p = a2a[-1]
        t = pd.read_parquet(p)
        t = t[(t.comm_backend == "trtllm_deepep_ht") & (t.node_num == 1) & (t.topk == 8) & (t.num_experts == 256)]
        by: dict = {}
        for (H, dtype, ep, phase), g in t.groupby(["hidden_size", "comm_dtype", "ep_size", "phase"]):
            g = g.groupby("num_tokens").latency.min()
            by.setdefault(str(int(H)), {}).setdefault(dtype, {}).setdefault(str(int(ep)), {})[phase] = \
                [[int(n), rnd(l / 1000.0)] for n, l in g.items()]
        out["comm"]["deepep_ht"] = {**src(p, root, comm_backend="trtllm_deepep_ht", node_num=1, topk=8, num_experts=256),
                                    "x": "tokens per rank", "by_hidden": by}
    return out


#: decode-step GEMMs beyond the context tables' (n, k): the LM head (vocab x hidden, BF16 in an FP8 checkpoint)
GEN_GEMMS = {"deepseek-v3": {"lm_head": (129280, 7168)}}
#: attention-TP sizes of a generation server whose split GEMMs are extracted (`<op>/tp<a>`: TensorRT-LLM's column /
#: row split of the shared experts, dense MLP and LM head over the attention-TP group)
GEN_ATTN_TPS = (2, 4, 8)
#: (op, weight dtype, split dim) of those GEMMs: n split for column-parallel, k for row-parallel
GEN_TP_GEMMS = {"deepseek-v3": (("shared_fc1", "fp8_block", "n"), ("shared_fc2", "fp8_block", "k"),
                                ("dense_fc1", "fp8_block", "n"), ("dense_fc2", "fp8_block", "k"),
                                ("lm_head", "bfloat16", "n"))}


def extract_generation(system: str, root: Path) -> dict:
    """The generation rows (module docstring) of `system`: {"models": {shape: {...}}, "comm": {"deepep_ll": ...}}."""
    import pandas as pd
    base = root / system
    out: dict = {"models": {}, "comm": {}}
    mods = sorted(base.glob("mla/trtllm/*/mla_generation_module_perf.parquet"))
    gemm_dir = newest([p for p in (base / "gemm" / "trtllm").glob("*") if (p / "gemm_perf.parquet").exists()])
    gemm = pd.read_parquet(gemm_dir / "gemm_perf.parquet") if gemm_dir else None
    for name, s in SHAPES.items():
        if s["attention"] != "mla" or not mods:
            continue
        p = mods[-1]
        t = pd.read_parquet(p)
        t = t[t.num_heads == s["heads"]]
        module = {}
        for (gt, kv), g in t.groupby(["gemm_type", "kv_cache_dtype"]):
            g = g.groupby(["batch_size", "step"]).latency.min().reset_index()
            module[f"{gt}/{kv}"] = {**src(p, root, num_heads=s["heads"], gemm_type=gt, kv_cache_dtype=kv),
                                    "rows": [[int(r.batch_size), int(r.step), rnd(r.latency)] for r in g.itertuples()]}
        m: dict = {"dims": {k: s[k] for k in ("hidden", "moe_inter", "experts", "top_k", "attention", "heads",
                                               "kv_heads") if k in s},
                   "mla_generation_module": module, "gemm": {}}
        if gemm is not None:
            for op, (n, k) in GEN_GEMMS.get(name, {}).items():
                pts, interp = gemm_curve(gemm, "bfloat16", n, k)
                if pts:
                    m["gemm"][op] = {**src(gemm_dir / "gemm_perf.parquet", root, gemm_dtype="bfloat16"), "n": n, "k": k,
                                     "nk_interpolated": interp, "points": pts}
            shapes = {**s["gemms"], **GEN_GEMMS.get(name, {})}
            for op, dtype, dim in GEN_TP_GEMMS.get(name, ()):
                for a in GEN_ATTN_TPS:
                    n, k = shapes[op]
                    n, k = (n // a, k) if dim == "n" else (n, k // a)
                    pts, interp = gemm_curve(gemm, dtype, n, k)
                    if pts:
                        m["gemm"][f"{op}/tp{a}"] = {**src(gemm_dir / "gemm_perf.parquet", root, gemm_dtype=dtype),
                                                    "n": n, "k": k, "nk_interpolated": interp, "points": pts}
        # attention TP: the module rows at 128 / a heads per GPU (one attention-TP rank of a's)
        by_heads = {}
        for a in GEN_ATTN_TPS:
            h = s["heads"] // a
            t2 = pd.read_parquet(p)
            t2 = t2[t2.num_heads == h]
            for (gt, kv), g in t2.groupby(["gemm_type", "kv_cache_dtype"]):
                g = g.groupby(["batch_size", "step"]).latency.min().reset_index()
                by_heads.setdefault(str(h), {})[f"{gt}/{kv}"] = {
                    **src(p, root, num_heads=h, gemm_type=gt, kv_cache_dtype=kv),
                    "rows": [[int(r.batch_size), int(r.step), rnd(r.latency)] for r in g.itertuples()]}
        m["mla_generation_module_by_heads"] = by_heads
        # TP context servers: the context module rows at every head count a TP rank holds, the whole model's
        # included (sizing/tp_cost.py prices a TP rank's attention by the rows' ratio of 128 / a heads to 128)
        ctx_mod = base / "mla" / "trtllm" / p.parent.name / "mla_context_module_perf.parquet"
        if ctx_mod.exists():
            t3 = pd.read_parquet(ctx_mod)
            ctx_heads = {}
            for h in (s["heads"], *(s["heads"] // a for a in GEN_ATTN_TPS)):
                for (gt, kv), g in t3[t3.num_heads == h].groupby(["gemm_type", "kv_cache_dtype"]):
                    g = g.groupby(["batch_size", "isl"]).latency.min().reset_index()
                    ctx_heads.setdefault(str(h), {})[f"{gt}/{kv}"] = {
                        **src(ctx_mod, root, num_heads=h, gemm_type=gt, kv_cache_dtype=kv),
                        "rows": [[int(r.batch_size), int(r.isl), rnd(r.latency)] for r in g.itertuples()]}
            m["mla_context_module_by_heads"] = ctx_heads
        m["moe_tp"] = moe_tp_rows(base, root, s)
        out["models"][name] = m
    ar = newest([q for q in (base / "comm" / "trtllm").glob("*") if (q / "custom_allreduce_perf.parquet").exists()])
    if ar:
        p = ar / "custom_allreduce_perf.parquet"
        t = pd.read_parquet(p)
        t = t[t.allreduce_dtype == "bfloat16"]
        out["comm"]["custom_allreduce"] = {
            **src(p, root, allreduce_dtype="bfloat16"), "x": "elements (BF16) reduced",
            "by_gpus": {str(int(g)): [[int(r.message_size), rnd(r.latency)] for r in
                                      q.groupby("message_size").latency.min().reset_index().itertuples()]
                        for g, q in t.groupby("num_gpus")}}
    a2a = sorted(base.glob("comm/trtllm/*/moe_a2a_perf.parquet"))
    if a2a:
        p = a2a[-1]
        t = pd.read_parquet(p)
        t = t[(t.comm_backend == "trtllm_deepep_ll") & (t.node_num == 1) & (t.topk == 8) & (t.num_experts == 256)]
        by: dict = {}
        for (H, dtype, ep, phase), g in t.groupby(["hidden_size", "comm_dtype", "ep_size", "phase"]):
            g = g.groupby("num_tokens").latency.min()
            by.setdefault(str(int(H)), {}).setdefault(dtype, {}).setdefault(str(int(ep)), {})[phase] = \
                [[int(n), rnd(l / 1000.0)] for n, l in g.items()]
        out["comm"]["deepep_ll"] = {**src(p, root, comm_backend="trtllm_deepep_ll", node_num=1, topk=8, num_experts=256),
                                    "x": "tokens per rank", "by_hidden": by}
    return out


def moe_tp_rows(base: Path, root: Path, s: dict) -> dict:
    """The fused MoE op with MoE tensor parallelism (moe_tp_size > 1) by tokens entering it, per planner weight dtype,
    `<moe_tp>x<moe_ep>` and routing distribution: what a generation server of TP x EP experts runs (the context
    tables hold moe_tp_size 1 only). Newest TensorRT-LLM collection first, as the context MoE rows."""
    import pandas as pd
    out: dict = {}
    for v in MOE_VERSIONS:
        p = base / "moe" / "trtllm" / v / "moe_perf.parquet"
        if not p.exists():
            continue
        t = pd.read_parquet(p)
        for tdtype, wd in MOE_DTYPES.items():
            q = t[(t.hidden_size == s["hidden"]) & (t.inter_size == s["moe_inter"]) & (t.num_experts == s["experts"])
                  & (t.topk == s["top_k"]) & (t.moe_tp_size > 1) & (t.moe_dtype == tdtype)]
            if q.empty or wd in out:
                continue
            shapes: dict = {}
            for (mtp, ep, dist), g in q.groupby(["moe_tp_size", "moe_ep_size", "distribution"]):
                if dist in DISTS:
                    g = g.groupby("num_tokens").latency.min()
                    shapes.setdefault(f"{int(mtp)}x{int(ep)}", {})[dist] = [[int(n), rnd(l)] for n, l in g.items()]
            out[wd] = {**src(p, root, hidden_size=s["hidden"], inter_size=s["moe_inter"], num_experts=s["experts"],
                             topk=s["top_k"], moe_dtype=tdtype),
                       "x": "tokens entering the op (every attention-DP rank's)", "by_shape": shapes}
    return out


def _interp(points, x):
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1] * x / xs[-1]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return ys[i - 1] + w * (ys[i] - ys[i - 1])
    return ys[-1]


def module_remainder(p: Path, root: Path, s: dict, core: dict, gem: dict) -> dict:
    """Per-token remainder of the MLA module rows over core + fp8_block projections (ms per 1,000 tokens), at
    4K-64K tokens per call; median and quartiles (the rows are noisy at the largest shapes)."""
    import pandas as pd
    t = pd.read_parquet(p)
    q = t[(t.num_heads == s["heads"]) & (t.gemm_type == "fp8_block") & (t.kv_cache_dtype == "fp8")]
    cm = {(b, i): l for b, i, l in core["fp8"]["rows"]}
    proj = ("q_a", "kv_a", "q_b", "kv_b", "o")
    vals = []
    for r in q.itertuples():
        tok = int(r.batch_size) * int(r.isl)
        if not 4096 <= tok <= 65536 or (r.batch_size, r.isl) not in cm:
            continue
        pr = sum(_interp(gem["fp8_block"]["ops"][o]["points"], tok) for o in proj)
        vals.append((float(r.latency) - cm[(r.batch_size, r.isl)] - pr) / tok * 1000.0)
    vals.sort()
    if not vals:
        return {}

    def qt(f):
        return rnd(vals[min(len(vals) - 1, int(f * len(vals)))])
    return {**src(p, root, num_heads=s["heads"], gemm_type="fp8_block", kv_cache_dtype="fp8"),
            "ms_per_1k_tokens": {"median": qt(0.5), "p25": qt(0.25), "p75": qt(0.75), "rows": len(vals)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="dwdp_trtllm/data/kernel_tables")
    ap.add_argument("--gpus", default=",".join(SYSTEMS))
    ap.add_argument("--what", choices=("context", "generation", "all"), default="all",
                    help="context: the planner's kernel tables (--out); generation: the decode rows (--generation-out)")
    ap.add_argument("--generation-out", default="dwdp_trtllm/data/generation_tables")
    a = ap.parse_args(argv)
    try:
        from importlib.metadata import version
        import aiconfigurator_core
    except ImportError:
        print(f"needs aiconfigurator-core=={PINNED} (pip install it in a throwaway venv, see the docstring)", file=sys.stderr)
        return 2
    ver = version("aiconfigurator-core")
    if ver != PINNED:
        print(f"aiconfigurator-core {ver} installed; this script is pinned to {PINNED}", file=sys.stderr)
        return 2
    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    jobs = [("dwdp-kernel-tables/1", Path(a.out), extract)] if a.what in ("context", "all") else []
    if a.what in ("generation", "all"):
        jobs.append(("dwdp-generation-tables/1", Path(a.generation_out), extract_generation))
    for fmt, out, fn in jobs:
        out.mkdir(parents=True, exist_ok=True)
        for gpu in a.gpus.split(","):
            system = SYSTEMS[gpu]
            data = {"format": fmt, "gpu": gpu, "system": system,
                    "source": {"package": "aiconfigurator-core", "version": ver, "license": "Apache-2.0 (NVIDIA aiconfigurator)",
                               "tables_root": "aiconfigurator_core/systems/data", "script": "scripts/extract_aiconfigurator.py",
                               "extracted_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")},
                    "units": {"latency": "ms"}, **fn(system, root)}
            tmp = out / f".{gpu}.json.tmp"
            tmp.write_text(json.dumps(data, separators=(",", ":"), sort_keys=False) + "\n")
            os.replace(tmp, out / f"{gpu}.json")
            n = sum(len(json.dumps(v)) for v in data["models"].values())
            print(f"{gpu}: {out / (gpu + '.json')} ({(out / (gpu + '.json')).stat().st_size / 1e3:.0f} kB; models {n / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
