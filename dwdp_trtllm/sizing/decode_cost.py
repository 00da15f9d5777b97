"""One decode step of a generation server, priced from TensorRT-LLM's kernels (pure).

A generation server runs attention DP + expert parallelism over `tp` GPUs (what `dwdp gen-config` writes:
integration/gen_config.py `_gen_parallel`); every rank decodes its own `batch` requests, the MoE layers run over
all ranks' tokens in lock-step. One step of one rank, per layer (times from the shipped tables, ms):
- attention: the whole MLA generation module (projections + core + BMMs) at (batch, KV length), package data
  `data/generation_tables/<gpu>.json` (`scripts/extract_aiconfigurator.py --what generation`, aiconfigurator's
  mla_generation_module_perf rows: DeepSeek-V3 shapes, one attention-DP rank);
- routed experts: the fused MoE op at EP `tp` with batch x tp tokens entering it, shared experts and router at
  `batch` tokens (the context kernel tables, perf/kernel_tables.py, whose curves start at one token);
- DEP communication (tp > 1): DeepEP low-latency dispatch (FP8) + combine (BF16) at `batch` tokens per rank where
  the tables have the EP size (8 on H100/H200/B200, 4 on GB200), else NCCL all-gather + reduce-scatter of the
  BF16 hidden states;
- the first_k_dense layers: attention + the dense MLP GEMMs; once per step the LM head GEMM (BF16).
MTP (TensorRT-LLM's one-model MTP, `speculative_config` with `num_nextn_predict_layers` k, what gen-config writes):
a step verifies k draft tokens per request, so the target model runs 1 + k tokens per request (every part above
priced at batch x (1 + k) tokens, the attention module at batch x (1 + k) rows: an upper bound on its KV reads),
then the MTP layer (one MoE layer) drafts k tokens, one pass each at `batch`; the step yields 1 + a + ... + a^k
tokens per request on average (a: the acceptance rate of a draft given the previous one was accepted). The
simulator advances requests one token at a time, so `step_ms` is the step's time per expected token. Default
acceptance 0.85: DeepSeek-V3 Technical Report (arXiv:2412.19437, section 5.4.3, "Multi-Token Prediction
Evaluation"): "the acceptance rate of the second token prediction ranges between 85% and 90%" (the low end).
Not priced (named where a number is shown): CUDA-graph padding of the batch, the executor's host overhead between
steps, imbalance between attention-DP ranks (a step is priced at the mean batch), the variance of accepted tokens
(a request gains the mean per step).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ..spec.models import ModelSpec
from ..perf.kernel_tables import ShapeTables, curve_ms, shape_tables
from ..spec.schema import ConfigError

FORMAT = "dwdp-generation-tables/1"
#: acceptance rate of an MTP draft token (module docstring: DeepSeek-V3 Technical Report, section 5.4.3)
DEFAULT_MTP_ACCEPTANCE = 0.85
#: planner weight dtype -> the module rows' (gemm_type, kv_cache_dtype)
MODULE_KEY = {"fp8": "fp8_block/fp8", "bf16": "bfloat16/bfloat16", "nvfp4": "nvfp4/fp8", "mxfp4": "fp8_block/fp8"}


def package_path(gpu: str) -> Path | None:
    p = resources.files("dwdp_trtllm") / "data" / "generation_tables" / f"{gpu.lower()}.json"
    return Path(str(p)) if p.is_file() else None


@functools.lru_cache(maxsize=8)
def _load(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(path, "", f"a readable generation-table JSON ({e})") from None
    if data.get("format") != FORMAT:
        raise ConfigError(path, "format", f"expected {FORMAT!r} (scripts/extract_aiconfigurator.py --what generation)")
    return data


def _grid(rows):
    """(log2 batch [B], log2 kv [K], ms [B, K]) with holes filled from the nearest measured KV length."""
    bs = sorted({r[0] for r in rows})
    ks = sorted({r[1] for r in rows})
    ms = np.full((len(bs), len(ks)), np.nan)
    for b, k, v in rows:
        ms[bs.index(b), ks.index(k)] = v
    for i in range(len(bs)):  # a large batch lacks the longest KV rows (out of memory): extend at the last rate
        ok = np.flatnonzero(~np.isnan(ms[i]))
        for j in range(len(ks)):
            if np.isnan(ms[i, j]):
                last = ok[ok < j].max() if (ok < j).any() else ok.min()
                ms[i, j] = ms[i, last] * max(1.0, ks[j] / ks[last])
    return np.log2(bs), np.log2(ks), ms


@dataclass(frozen=True)
class DecodeCost:
    """Decode-step prices of one model on one GPU (module docstring)."""

    model: ModelSpec
    gpu: str
    weight_dtype: str
    tables: ShapeTables
    gen: dict  # the model's generation-table entry
    comm: dict  # the GPU's generation communication rows
    mtp: int = 0  # MTP draft tokens per step (0: none)
    acceptance: float = DEFAULT_MTP_ACCEPTANCE  # of each draft token, given the previous one was accepted

    @functools.cached_property
    def module_grid(self):
        return _grid(self.gen["mla_generation_module"][MODULE_KEY[self.weight_dtype]]["rows"])

    def module_ms(self, batch: float, kv: float) -> float:
        """The MLA generation module of one layer, bilinear in (log2 batch, log2 KV length), clamped to the grid
        in batch; past the longest KV length linear in it (the core reads every cached key)."""
        lb, lk, ms = self.module_grid
        xb = float(np.clip(np.log2(max(batch, 1.0)), lb[0], lb[-1]))
        xk_raw = np.log2(max(kv, 1.0))
        xk = float(np.clip(xk_raw, lk[0], lk[-1]))
        i = int(np.clip(np.searchsorted(lb, xb), 1, len(lb) - 1))
        j = int(np.clip(np.searchsorted(lk, xk), 1, len(lk) - 1))
        wb = (xb - lb[i - 1]) / (lb[i] - lb[i - 1])
        wk = (xk - lk[j - 1]) / (lk[j] - lk[j - 1])
        v = ((1 - wb) * ((1 - wk) * ms[i - 1, j - 1] + wk * ms[i - 1, j])
             + wb * ((1 - wk) * ms[i, j - 1] + wk * ms[i, j]))
        scale = max(batch, 1.0) / 2 ** lb[-1] if batch > 2 ** lb[-1] else 1.0
        return float(v * scale * (2 ** (xk_raw - lk[-1]) if xk_raw > lk[-1] else 1.0))

    def _gemm(self, op: str, m: float) -> float:
        ms, _ = self.tables.gemm_ms(op, "bf16" if op == "router" else self.weight_dtype, m)
        return 0.0 if ms is None else float(ms)

    def comm_ms(self, tp: int, batch: float) -> tuple[float, str]:
        """DEP dispatch + combine of one MoE layer at `batch` tokens per rank over `tp` ranks, and how it was priced."""
        if tp <= 1:
            return 0.0, "none (one GPU)"
        by = self.comm.get("deepep_ll", {}).get("by_hidden", {}).get(str(self.model.hidden_size), {})
        d = by.get("fp8", {}).get(str(tp), {}).get("dispatch")
        c = by.get("bfloat16", {}).get(str(tp), {}).get("combine")
        if d and c:
            return float(curve_ms(d, batch)[0] + curve_ms(c, batch)[0]), f"DeepEP low-latency rows (EP{tp})"
        el = batch * tp * self.model.hidden_size
        ag, _ = self.tables.comm_ms("all_gather", tp, el)
        rs, _ = self.tables.comm_ms("reduce_scatter", tp, el)
        if ag is not None and rs is not None:
            return float(ag + rs), f"NCCL all-gather + reduce-scatter rows ({tp} GPUs)"
        # no rows (e.g. GB200 past EP4): the planner's modelled NVLinkOneSided all-to-all (perf/phases.py)
        from ..perf import cost_model as cm
        from ..perf.hardware import get_gpu
        p = cm.CostParams(gpu=get_gpu(self.gpu), dispatch_dtype="nvfp4" if self.weight_dtype == "nvfp4" else "fp8",
                          a2a_dedup=True)
        us = cm.all_to_all_us(self.model, p, np.full((1, tp), float(batch)), tp)
        return float(np.max(us)) * 1e-3, f"modelled all-to-all ({tp} GPUs, no rows)"

    def moe_layer_ms(self, tp: int, b: float, kv: float) -> float:
        """One MoE layer of one rank at `b` tokens per rank (module docstring)."""
        moe, _ = self.tables.moe_ms(self.weight_dtype, tp, "balanced", b * tp)
        if moe is None:  # no EP rows at this size: the EP1 op on this rank's share
            moe, _ = self.tables.moe_ms(self.weight_dtype, 1, "balanced", b)
        other = sum(self._gemm(op, b) for op in (("shared_fc1", "shared_fc2") if self.model.num_shared_experts else ()))
        other += self._gemm("router", b)
        return self.module_ms(b, kv) + float(moe) + other + self.comm_ms(tp, b)[0]

    def forward_ms(self, tp: int, b: float, kv: float) -> float:
        """One target-model forward (ms) at `b` tokens per rank: every layer and the LM head."""
        m = self.model
        dense_layer = self.module_ms(b, kv) + self._gemm("dense_fc1", b) + self._gemm("dense_fc2", b)
        lm = self.gen.get("gemm", {}).get("lm_head")
        head = float(curve_ms(lm["points"], b)[0]) if lm else 0.0
        return m.num_moe_layers * self.moe_layer_ms(tp, b, kv) + m.first_k_dense * dense_layer + head

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a request gains per step: 1 + a + ... + a^k (module docstring)."""
        return sum(self.acceptance ** i for i in range(self.mtp + 1))

    def step_ms(self, tp: int, batch: float, kv: float) -> float:
        """Time (ms) per generated token of a server of `tp` GPUs whose ranks each hold `batch` requests of mean KV
        length `kv`: one decode step, with MTP its verify + draft passes over the expected tokens per step (module
        docstring)."""
        b = max(batch, 1.0)
        if self.mtp <= 0:
            return self.forward_ms(tp, b, kv)
        step = self.forward_ms(tp, b * (1 + self.mtp), kv) + self.mtp * self.moe_layer_ms(tp, b, kv)
        return step / self.tokens_per_step

    def describe_mtp(self) -> str:
        if self.mtp <= 0:
            return "no MTP (--mtp 0)"
        return (f"MTP {self.mtp} draft token{'s' if self.mtp > 1 else ''} per step, acceptance {self.acceptance:g} "
                f"(--mtp-acceptance): {self.tokens_per_step:.3g} tokens per step")


def decode_cost(model: ModelSpec, gpu: str, weight_dtype: str, mtp: int = 0,
                acceptance: float = DEFAULT_MTP_ACCEPTANCE) -> DecodeCost:
    """The decode prices of `model` on `gpu` (with `mtp` draft tokens per step at `acceptance`); ConfigError naming
    --gpu / --model when the tables lack them."""
    path = package_path(gpu)
    t = shape_tables(model, gpu)
    if path is None or t is None or not t.moe_eps(weight_dtype):
        raise ConfigError(None, "--gpu", f"TensorRT-LLM decode tables for {model.name} ({weight_dtype}) on {gpu}; "
                                         "shipped: DeepSeek-V3/R1 shapes on h100, h200, b200, gb200")
    data = _load(str(path))
    gen = data["models"].get(t.name)
    if gen is None or MODULE_KEY.get(weight_dtype) not in gen.get("mla_generation_module", {}):
        raise ConfigError(None, "--model", f"generation rows for {model.name} ({weight_dtype}) on {gpu}: only MLA "
                                           "models (DeepSeek-V3/R1 shapes) have them")
    return DecodeCost(model, gpu.lower(), weight_dtype, t, gen, data.get("comm", {}), mtp, acceptance)
