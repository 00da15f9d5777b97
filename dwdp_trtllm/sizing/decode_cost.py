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
  BF16 hidden states, else the planner's modelled all-to-all; on a GPU whose all-to-all is DeepEP's (not GB200's
  MNNVL) an EP size without rows (EP16, EP32 on H100/H200/B200) costs at least the largest smaller EP's DeepEP
  rows at the same tokens per rank (`_deepep_ll_floor`);
- the first_k_dense layers: attention + the dense MLP GEMMs; once per step the LM head GEMM (BF16).
Routing and DEP communication follow what the user states for the context side (`stated_pricing`): the fused
MoE rows of the stated table distribution (`--routing-skew power_law_1.01`: aiconfigurator's default, which prices
its decode MoE at those rows too), all-gather + reduce-scatter rows when `--dep-comm allgather_reducescatter`.
MoE tensor parallelism and attention TP (`dwdp size --gen-moe-tp`, `--gen-attn-tp`; TensorRT-LLM's
`moe_tensor_parallel_size` x `moe_expert_parallel_size` experts, `enable_attention_dp` false for attention TP): a
server of `tp` GPUs with attention TP `a` (1: attention DP over every GPU; `tp`: one attention-TP group) and MoE TP
`e` (EP `tp / e`) is priced from aiconfigurator's rows for that shape, composed as the DEP step above, per layer:
- attention: the MLA module rows at 128 / a heads (one GPU of the attention-TP group) at the group's `batch`;
- routed experts: the fused MoE op at (moe_tp e, moe_ep tp / e) with batch x (tp / a) tokens entering it (every
  attention-DP rank's), the rows `moe_tp` (e > 1) or the context tables' EP rows (e = 1);
- shared experts, dense MLP and LM head: their GEMMs split over the a GPUs (`<op>/tp<a>` rows), router whole;
- communication: attention DP (a = 1) all-gathers every rank's tokens before the experts and reduce-scatters after
  (NCCL all-gather + reduce-scatter rows at batch x tp x hidden elements): TensorRT-LLM uses no all-to-all there
  (tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py @ 7b437aaa, `select_alltoall_method_type`: none when
  moe_ep_size <= top_k, as every EP of a TP x EP server of 8-16 GPUs is for top-8 routing); attention TP (a = tp)
  all-reduces twice per layer (after the attention output projection and after the experts: TensorRT-LLM's
  custom all-reduce rows at batch x hidden BF16 elements). Attention TP below the server's size (1 < a < tp) is
  not priced (refused: `shape_why`).
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

import bisect
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
def load_tables(path: str) -> dict:
    """A generation-table JSON (scripts/extract_aiconfigurator.py --what generation), read once; ConfigError naming
    the file when it is unreadable or of another format."""
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
    routing: str = "balanced"  # the fused MoE rows' routing distribution (balanced, power_law_1.01, power_law_1.2)
    dep_comm: str | None = None  # DEP's stated communication (--dep-comm); None: DeepEP low-latency rows where shipped

    @functools.cached_property
    def module_grid(self):
        return _grid(self.gen["mla_generation_module"][MODULE_KEY[self.weight_dtype]]["rows"])

    def _module_grid(self, heads: int | None):
        if heads is None or heads == self.model.num_heads:
            return self.module_grid
        cache = self.__dict__.setdefault("_grids_by_heads", {})
        if heads not in cache:
            rows = self.gen.get("mla_generation_module_by_heads", {}).get(str(heads), {}).get(MODULE_KEY[self.weight_dtype])
            if rows is None:
                raise ConfigError(None, "--gen-attn-tp", f"MLA generation rows at {heads} heads per GPU on {self.gpu} "
                                                         f"(shipped: {self._heads_shipped()})")
            cache[heads] = _grid(rows["rows"])
        return cache[heads]

    def _heads_shipped(self) -> str:
        return ", ".join(sorted(self.gen.get("mla_generation_module_by_heads", {}), key=int, reverse=True)) or "none"

    def module_ms(self, batch: float, kv: float, heads: int | None = None) -> float:
        """The MLA generation module of one layer, bilinear in (log2 batch, log2 KV length), clamped to the grid
        in batch; past the longest KV length linear in it (the core reads every cached key). `heads`: per GPU
        (attention TP: num_heads / a; None: every head, one attention-DP rank)."""
        lb, lk, ms = self._module_grid(heads)
        # the batch's side of the interpolation, once per (heads, batch): the simulator prices a step per change of
        # a server's running set, hundreds of thousands of times per search, at few distinct batches (the same
        # arithmetic as one expression over the grid, in the same order: bit-identical results)
        memo = self.__dict__.setdefault("_module_by_batch", {})
        hit = memo.get((heads, batch))
        if hit is None:
            xb = float(np.clip(np.log2(max(batch, 1.0)), lb[0], lb[-1]))
            i = int(np.clip(np.searchsorted(lb, xb), 1, len(lb) - 1))
            wb = (xb - lb[i - 1]) / (lb[i] - lb[i - 1])
            scale = max(batch, 1.0) / 2 ** lb[-1] if batch > 2 ** lb[-1] else 1.0
            hit = memo[(heads, batch)] = (i, wb, scale)
        i, wb, scale = hit
        lists = self.__dict__.setdefault("_module_lists", {})  # the grid as Python floats, once per heads
        if heads not in lists:
            lists[heads] = (lk.tolist(), ms.tolist())
        lkl, msl = lists[heads]
        xk_raw = np.log2(max(kv, 1.0))
        xk = float(min(max(xk_raw, lkl[0]), lkl[-1]))  # np.clip of a scalar
        j = min(max(bisect.bisect_left(lkl, xk), 1), len(lkl) - 1)  # np.searchsorted (side left), clipped
        wk = (xk - lkl[j - 1]) / (lkl[j] - lkl[j - 1])
        v = ((1 - wb) * ((1 - wk) * msl[i - 1][j - 1] + wk * msl[i - 1][j])
             + wb * ((1 - wk) * msl[i][j - 1] + wk * msl[i][j]))
        return float(v * scale * (2 ** (xk_raw - lk[-1]) if xk_raw > lk[-1] else 1.0))

    def _gemm(self, op: str, m: float) -> float:
        ms, _ = self.tables.gemm_ms(op, "bf16" if op == "router" else self.weight_dtype, m)
        return 0.0 if ms is None else float(ms)

    def comm_ms(self, tp: int, batch: float) -> tuple[float, str]:
        """DEP dispatch + combine of one MoE layer at `batch` tokens per rank over `tp` ranks, and how it was priced."""
        if tp <= 1:
            return 0.0, "none (one GPU)"
        if self.dep_comm == "allgather_reducescatter":  # stated (--dep-comm): the NCCL rows, no DeepEP
            ag, _ = self.tables.comm_ms("all_gather", tp, batch * tp * self.model.hidden_size)
            rs, _ = self.tables.comm_ms("reduce_scatter", tp, batch * tp * self.model.hidden_size)
            if ag is not None and rs is not None:
                return float(ag + rs), f"NCCL all-gather + reduce-scatter rows ({tp} GPUs, --dep-comm)"
        ll = self._deepep_ll_ms(tp, batch)
        if ll is not None:
            return ll, f"DeepEP low-latency rows (EP{tp})"
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
        modelled = float(np.max(us)) * 1e-3
        floor = self._deepep_ll_floor(tp, batch)
        if floor is not None and floor[0] > modelled:
            return floor[0], f"DeepEP low-latency rows of EP{floor[1]} as a floor (EP{tp}: no rows)"
        return modelled, f"modelled all-to-all ({tp} GPUs, no rows)"

    def _deepep_ll_ms(self, ep: int, batch: float) -> float | None:
        """DeepEP low-latency dispatch (FP8) + combine (BF16) at `batch` tokens per rank over `ep` ranks, from the
        shipped rows; None where the GPU has none at that EP size."""
        by = self.comm.get("deepep_ll", {}).get("by_hidden", {}).get(str(self.model.hidden_size), {})
        d = by.get("fp8", {}).get(str(ep), {}).get("dispatch")
        c = by.get("bfloat16", {}).get(str(ep), {}).get("combine")
        return float(curve_ms(d, batch)[0] + curve_ms(c, batch)[0]) if d and c else None

    def _deepep_ll_floor(self, tp: int, batch: float) -> tuple[float, int] | None:
        """(ms, EP) of the DeepEP low-latency rows of the largest EP size below `tp` that has them, at the same
        `batch` tokens per rank, on a GPU whose decode all-to-all is DeepEP's (not an MNNVL GPU, where TensorRT-LLM
        runs its NVLink one-sided all-to-all: perf/phases.MNNVL_GPUS); None where there is none. A floor for an EP
        size without rows (module docstring): at small batches those kernels cost their launch and synchronisation
        latency, not bytes, and over more peers with the same tokens per rank they are not faster (the modelled
        all-to-all, bytes over bandwidth, prices EP16 at a fifth of the measured EP8 rows); aiconfigurator 0.12.0
        prices an EP16 decode the same way ("requested EP16/node2; using EP8/node1 silicon data")."""
        from ..perf.phases import MNNVL_GPUS
        if self.gpu in MNNVL_GPUS:
            return None
        by = self.comm.get("deepep_ll", {}).get("by_hidden", {}).get(str(self.model.hidden_size), {})
        eps = sorted((int(e) for e in by.get("fp8", {}) if int(e) < tp), reverse=True)
        for ep in eps:
            ms = self._deepep_ll_ms(ep, batch)
            if ms is not None:
                return ms, ep
        return None

    def shape_why(self, tp: int, attn_tp: int = 1, moe_tp: int = 1) -> tuple[str, str] | None:
        """Why a server of `tp` GPUs with attention TP `attn_tp` and MoE TP `moe_tp` cannot be priced here (None: it
        can): (the flag, what was expected)."""
        if attn_tp == 1 and moe_tp == 1:
            return None
        if tp % moe_tp:
            return "--gen-moe-tp", f"a divisor of the generation server's {tp} GPUs (--gen-tp), got {moe_tp}"
        if attn_tp not in (1, tp):
            return "--gen-attn-tp", (f"1 (attention DP) or the server's {tp} GPUs (attention TP over the whole "
                                     f"server; TP groups inside a server are not priced), got {attn_tp}")
        if self.model.num_heads % attn_tp or (attn_tp > 1 and str(self.model.num_heads // attn_tp) not in
                                             self.gen.get("mla_generation_module_by_heads", {})):
            return "--gen-attn-tp", (f"MLA generation rows at {self.model.num_heads} / {attn_tp} heads per GPU on "
                                     f"{self.gpu} (shipped: {self._heads_shipped()} heads)")
        if attn_tp > 1 and str(tp) not in self.comm.get("custom_allreduce", {}).get("by_gpus", {}):
            return "--gen-attn-tp", f"all-reduce rows over {tp} GPUs on {self.gpu} (attention TP {attn_tp})"
        if attn_tp == 1 and (self.tables.comm_ms("all_gather", tp, 1.0)[0] is None
                             or self.tables.comm_ms("reduce_scatter", tp, 1.0)[0] is None):
            return "--gen-moe-tp", (f"NCCL all-gather / reduce-scatter rows over {tp} GPUs on {self.gpu} (attention "
                                    f"DP with MoE TP {moe_tp})")
        ep = tp // moe_tp
        if moe_tp > 1 and self._moe_tp_curve(moe_tp, ep) is None:
            return "--gen-moe-tp", (f"fused MoE rows at MoE TP {moe_tp} x EP {ep} ({self.weight_dtype}, "
                                    f"{self.routing}) on {self.gpu}")
        return None

    def _moe_tp_curve(self, moe_tp: int, ep: int):
        t = self.gen.get("moe_tp", {}).get(self.weight_dtype, {}).get("by_shape", {}).get(f"{moe_tp}x{ep}", {})
        return t.get(self.routing)

    def _split_gemm(self, op: str, m: float, attn_tp: int) -> float:
        """A GEMM of the layer split over the attention-TP group (attn_tp 1: whole, the context tables' row)."""
        if attn_tp == 1:
            return self._gemm(op, m)
        g = self.gen.get("gemm", {}).get(f"{op}/tp{attn_tp}")
        if g is None:
            raise ConfigError(None, "--gen-attn-tp", f"{op} GEMM rows split over {attn_tp} GPUs on {self.gpu}")
        return float(curve_ms(g["points"], m)[0])

    def allreduce_ms(self, gpus: int, elements: float) -> float:
        """TensorRT-LLM's custom all-reduce of `elements` BF16 values over `gpus` GPUs (its rows)."""
        rows = self.comm["custom_allreduce"]["by_gpus"][str(gpus)]
        return float(curve_ms(rows, elements)[0])

    def shape_comm_ms(self, tp: int, attn_tp: int, moe_tp: int, b: float) -> tuple[float, str]:
        """Communication of one MoE layer of a server (module docstring) at `b` requests per attention group."""
        if attn_tp == 1 and moe_tp == 1:
            return self.comm_ms(tp, b)
        h = self.model.hidden_size
        if attn_tp > 1:
            return 2 * self.allreduce_ms(tp, b * h), f"2 custom all-reduces ({tp} GPUs)"
        ag, _ = self.tables.comm_ms("all_gather", tp, b * tp * h)
        rs, _ = self.tables.comm_ms("reduce_scatter", tp, b * tp * h)
        if ag is None or rs is None:
            raise ConfigError(None, "--gen-moe-tp", f"NCCL all-gather / reduce-scatter rows over {tp} GPUs on "
                                                    f"{self.gpu}")
        return float(ag + rs), f"NCCL all-gather + reduce-scatter rows ({tp} GPUs)"

    def moe_layer_ms(self, tp: int, b: float, kv: float, attn_tp: int = 1, moe_tp: int = 1) -> float:
        """One MoE layer of one rank at `b` tokens per attention group (DEP: per rank; module docstring)."""
        if attn_tp == 1 and moe_tp == 1:
            moe, other, comm = self._moe_parts(tp, b)
            return self.module_ms(b, kv) + moe + other + comm
        memo = self.__dict__.setdefault("_moe_shaped", {})
        key = (tp, b, attn_tp, moe_tp)
        if key not in memo:
            memo[key] = self._moe_shaped_parts(tp, b, attn_tp, moe_tp)
        moe, other, comm = memo[key]
        att = self.module_ms(b, kv, self.model.num_heads // attn_tp)
        return att + moe + other + comm

    def _moe_parts(self, tp: int, b: float) -> tuple[float, float, float]:
        """(routed experts, shared experts + router, communication) ms of one MoE layer of a DEP server (attention
        DP, MoE EP) at `b` tokens per rank: the layer's parts that do not depend on the KV length, once per (tp, b)."""
        memo = self.__dict__.setdefault("_moe_dep", {})
        hit = memo.get((tp, b))
        if hit is None:
            moe, _ = self.tables.moe_ms(self.weight_dtype, tp, self.routing, b * tp)
            if moe is None:  # no EP rows at this size: the EP1 op on this rank's share
                moe, _ = self.tables.moe_ms(self.weight_dtype, 1, self.routing, b)
            other = sum(self._gemm(op, b) for op in (("shared_fc1", "shared_fc2") if self.model.num_shared_experts
                                                     else ()))
            other += self._gemm("router", b)
            hit = memo[(tp, b)] = (float(moe), other, self.comm_ms(tp, b)[0])
        return hit

    def _moe_shaped_parts(self, tp: int, b: float, attn_tp: int, moe_tp: int) -> tuple[float, float, float]:
        """_moe_parts of a server with attention TP `attn_tp` / MoE TP `moe_tp` (module docstring)."""
        why = self.shape_why(tp, attn_tp, moe_tp)
        if why is not None:
            raise ConfigError(None, *why)
        tokens = b * (tp // attn_tp)  # every attention-DP rank's tokens enter the experts
        if moe_tp > 1:
            moe = float(curve_ms(self._moe_tp_curve(moe_tp, tp // moe_tp), tokens)[0])
        else:
            moe = float(self.tables.moe_ms(self.weight_dtype, tp, self.routing, tokens)[0])
        other = sum(self._split_gemm(op, b, attn_tp) for op in (("shared_fc1", "shared_fc2")
                                                                 if self.model.num_shared_experts else ()))
        other += self._gemm("router", b)
        return moe, other, self.shape_comm_ms(tp, attn_tp, moe_tp, b)[0]

    def forward_ms(self, tp: int, b: float, kv: float, attn_tp: int = 1, moe_tp: int = 1) -> float:
        """One target-model forward (ms) at `b` tokens per attention group: every layer and the LM head."""
        m = self.model
        heads = m.num_heads // attn_tp
        att = self.module_ms(b, kv, heads)  # first: a shape without module rows is refused naming them
        fc1, fc2, ar, head = self._dense_parts(tp, b, attn_tp)
        dense_layer = att + fc1 + fc2
        if attn_tp > 1:
            dense_layer += ar
        return (m.num_moe_layers * self.moe_layer_ms(tp, b, kv, attn_tp, moe_tp) + m.first_k_dense * dense_layer
                + head)

    def _dense_parts(self, tp: int, b: float, attn_tp: int) -> tuple[float, float, float, float]:
        """(dense fc1, dense fc2, the dense layer's 2 all-reduces under attention TP, LM head) ms at `b` tokens per
        attention group: forward_ms's parts that do not depend on the KV length, once per (tp, b, attn_tp)."""
        memo = self.__dict__.setdefault("_dense", {})
        hit = memo.get((tp, b, attn_tp))
        if hit is None:
            fc1, fc2 = self._split_gemm("dense_fc1", b, attn_tp), self._split_gemm("dense_fc2", b, attn_tp)
            if attn_tp > 1:
                ar = 2 * self.allreduce_ms(tp, b * self.model.hidden_size)
                lm = self.gen.get("gemm", {}).get(f"lm_head/tp{attn_tp}")
            else:
                ar, lm = 0.0, self.gen.get("gemm", {}).get("lm_head")
            head = float(curve_ms(lm["points"], b)[0]) if lm else 0.0
            hit = memo[(tp, b, attn_tp)] = (fc1, fc2, ar, head)
        return hit

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a request gains per step: 1 + a + ... + a^k (module docstring)."""
        return sum(self.acceptance ** i for i in range(self.mtp + 1))

    def step_ms(self, tp: int, batch: float, kv: float, attn_tp: int = 1, moe_tp: int = 1) -> float:
        """Time (ms) per generated token of a server of `tp` GPUs whose attention groups (DEP: ranks) each hold
        `batch` requests of mean KV length `kv`, attention TP `attn_tp`, MoE TP `moe_tp`: one decode step, with
        MTP its verify + draft passes over the expected tokens per step (module docstring)."""
        b = max(batch, 1.0)
        if self.mtp <= 0:
            return self.forward_ms(tp, b, kv, attn_tp, moe_tp)
        step = (self.forward_ms(tp, b * (1 + self.mtp), kv, attn_tp, moe_tp)
                + self.mtp * self.moe_layer_ms(tp, b, kv, attn_tp, moe_tp))
        return step / self.tokens_per_step

    def describe_mtp(self) -> str:
        if self.mtp <= 0:
            return "no MTP (--mtp 0)"
        return (f"MTP {self.mtp} draft token{'s' if self.mtp > 1 else ''} per step, acceptance {self.acceptance:g} "
                f"(--mtp-acceptance): {self.tokens_per_step:.3g} tokens per step")


def stated_pricing(spec) -> dict:
    """The decode step's share of what the user states for the context side (one fact, both sides): the routing as
    the fused MoE rows' distribution where the stated skew is one (`--routing-skew power_law_1.01`; other skews:
    balanced rows) and DEP's communication when `--dep-comm` names all-gather + reduce-scatter."""
    from ..perf.planner import routing_skew
    return {"routing": routing_skew(spec, 8, 1.0).dist if spec.tables is not None else "balanced",
            "dep_comm": spec.dep_comm}


def decode_cost(model: ModelSpec, gpu: str, weight_dtype: str, mtp: int = 0,
                acceptance: float = DEFAULT_MTP_ACCEPTANCE, routing: str = "balanced",
                dep_comm: str | None = None) -> DecodeCost:
    """The decode prices of `model` on `gpu` (with `mtp` draft tokens per step at `acceptance`); ConfigError naming
    --gpu / --model when the tables lack them."""
    path = package_path(gpu)
    t = shape_tables(model, gpu)
    if path is None or t is None or not t.moe_eps(weight_dtype):
        raise ConfigError(None, "--gpu", f"TensorRT-LLM decode tables for {model.name} ({weight_dtype}) on {gpu}; "
                                         "shipped: DeepSeek-V3/R1 shapes on h100, h200, b200, gb200")
    data = load_tables(str(path))
    gen = data["models"].get(t.name)
    if gen is None or MODULE_KEY.get(weight_dtype) not in gen.get("mla_generation_module", {}):
        raise ConfigError(None, "--model", f"generation rows for {model.name} ({weight_dtype}) on {gpu}: only MLA "
                                           "models (DeepSeek-V3/R1 shapes) have them")
    return DecodeCost(model, gpu.lower(), weight_dtype, t, gen, data.get("comm", {}), mtp, acceptance, routing, dep_comm)
