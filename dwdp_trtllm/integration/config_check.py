"""One verdict per TensorRT-LLM server before launch (`dwdp check-config`): what the serving-feature matrix refuses,
what TensorRT-LLM would give its KV cache, whether the rank fits (pure, no tensorrt_llm; prices with deploy/memory).

Per server (server_configs.ServerConfig):
- refused: a context server (engine dwdp_trtllm) gets serving_features.check_serving_args, the check its ModelLoader
  would run first (with the checkpoint's MTP layer count, as upstream's spec_dec_mode reads it); a generation server
  only the value-type part (it runs no DWDP), so a string where a number belongs is named there too;
- memory: memory.rank_memory, THE price of a rank: a context server as one DWDP rank of the group given (--dwdp /
  --dwdp-size, else the file's own dwdp_config read as upstream's), a generation server as a DEP rank of its
  moe_expert_parallel_size (else tensor_parallel_size) GPUs, each at its own max_num_tokens;
- KV cache: TensorRT-LLM sizes it after the model is loaded and warmed up, as kv_cache_config.free_gpu_memory_fraction
  of the memory then free (KvCacheConfig.free_gpu_memory_fraction, default 0.9: tensorrt_llm/llmapi/llm_args.py @
  0004396720054fd8, "Default is 90%"). Free and the bytes per token in the cache's dtype are memory.context_kv's
  (the GPU's memory less the rank's parts other than the KV-cache floor; fp8 1 byte per value, else 2); the cache must
  hold max(max_num_tokens, max_seq_len) tokens (one full forward, and one request of the longest length), and how many
  of max_batch_size requests of max_seq_len it holds at once is said (fewer is not a load failure: TensorRT-LLM then
  schedules fewer at a time).
A server loads when nothing is refused, its rank fits the GPU and the KV cache holds what it needs.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from ..byte_units import fmt_bytes
from ..deploy import memory as mem
from ..spec.config import DwdpConfig
from ..spec.models import ModelSpec
from .serving_features import FRACTION_KEY, Refusal, check_serving_args, check_value_types
from .server_configs import ServerConfig

#: KvCacheConfig.free_gpu_memory_fraction when the YAML gives none (llm_args.py @ 0004396720054fd8)
KV_FRACTION_DEFAULT = 0.9
KV_FRACTION_SOURCE = "TensorRT-LLM's default, KvCacheConfig in llm_args.py @ 0004396720054fd8"
WIDTH = 80


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class KvCache:
    """What TensorRT-LLM would give the KV cache of one rank, and what the server needs (memory.context_kv's free
    and per-token bytes)."""

    fraction: float
    fraction_from: str
    free_bytes: int  # GPU memory less everything but the KV cache (estimate)
    need_tokens: int
    need_from: str
    dtype: str
    bytes_per_token: int  # in dtype
    max_batch_size: int | None = None
    max_seq_len: int | None = None

    @property
    def alloc_bytes(self) -> int:
        return int(max(self.free_bytes, 0) * self.fraction)

    @property
    def tokens(self) -> int:
        return self.alloc_bytes // self.bytes_per_token

    @property
    def fits(self) -> bool:
        return self.free_bytes > 0 and self.tokens >= self.need_tokens

    @property
    def requests_held(self) -> int | None:
        """Requests of max_seq_len tokens the cache holds at once (None: no max_seq_len in the YAML)."""
        return None if not self.max_seq_len else self.tokens // self.max_seq_len

    def text(self) -> str:
        need = f"needs {self.need_tokens:,} ({self.need_from}): " + ("fits" if self.fits else "does NOT fit")
        if self.free_bytes <= 0:
            return f"KV cache: nothing left for it after weights and activations; {need}"
        out = (f"KV cache: {self.fraction:g} ({self.fraction_from}) x {fmt_bytes(self.free_bytes, digits=1)} free after "
               f"weights and activations = {fmt_bytes(self.alloc_bytes, digits=2)}, {self.tokens:,} tokens in "
               f"{self.dtype}; {need}")
        if self.requests_held is not None and self.max_batch_size:
            out += (f"; holds {min(self.requests_held, self.max_batch_size):,} of max_batch_size "
                    f"{self.max_batch_size:,} requests of max_seq_len {self.max_seq_len:,}")
        return out


@dataclass(frozen=True)
class ServerVerdict:
    server: ServerConfig
    refused: list[Refusal]
    memory: mem.RankMemory | None
    kv: KvCache | None
    note: str | None = None  # why memory was not checked, or what it was priced as

    @property
    def loads(self) -> bool:
        return not self.refused and (self.memory is None or bool(self.memory.fits)) and \
            (self.kv is None or self.kv.fits)

    def lines(self, width: int = WIDTH) -> list[str]:
        s = self.server
        many = f" x{s.instances}" if s.instances > 1 else ""
        where = s.file if s.name == Path(s.file).name else f"{s.file} {s.name}"
        head = f"{where}: {s.role} server{many} (role from {s.role_from})"
        out = textwrap.wrap(head, width, subsequent_indent="    ", break_on_hyphens=False)
        body = [f"refused: {len(self.refused)} setting(s)" if self.refused else "refused: nothing"]
        body += [f"- {r.line()}" for r in self.refused]
        if self.note:
            body.append(self.note)
        if self.memory is not None:
            body.append("memory: " + self.memory.describe())
        if self.kv is not None:
            body.append(self.kv.text())
        verdict = "loads" if self.loads else ("refused at load" if self.refused else "does NOT fit")
        body.append(f"verdict: {verdict}")
        for b in body:
            ind = "    " if not b.startswith("- ") else "      "
            out += textwrap.wrap(b, width, initial_indent="  ", subsequent_indent=ind, break_on_hyphens=False)
        return out

    def to_dict(self) -> dict:
        kv = self.kv
        return {"file": self.server.file, "server": self.server.name, "role": self.server.role,
                "instances": self.server.instances, "loads": self.loads,
                "refused": [{"key": r.key, "value": r.value, "why": r.why, "instead": r.instead} for r in self.refused],
                "memory": self.memory and self.memory.to_dict(), "note": self.note,
                "kv_cache": kv and {"unit": mem.UNIT, "fraction": kv.fraction, "fraction_from": kv.fraction_from,
                                    "free_gb": mem.gb(kv.free_bytes), "alloc_gb": mem.gb(kv.alloc_bytes),
                                    "tokens": kv.tokens, "need_tokens": kv.need_tokens, "dtype": kv.dtype,
                                    "requests_held": kv.requests_held, "max_batch_size": kv.max_batch_size,
                                    "fits": kv.fits}}


def _section(args: dict, key: str) -> dict:
    v = args.get(key)
    return v if isinstance(v, dict) else {}


def _kv(args: dict, spec: ModelSpec, m: mem.RankMemory, max_num_tokens: int) -> KvCache:
    kvc = _section(args, "kv_cache_config")
    frac = kvc.get("free_gpu_memory_fraction")
    if isinstance(frac, (int, float)) and not isinstance(frac, bool) and 0 <= frac <= 1:
        fraction, where = float(frac), f"its {FRACTION_KEY}"
    else:
        fraction, where = KV_FRACTION_DEFAULT, KV_FRACTION_SOURCE
    seq, batch = _int(args.get("max_seq_len")), _int(args.get("max_batch_size"))
    need, need_from = (seq, "max_seq_len") if seq is not None and seq > max_num_tokens else \
        (max_num_tokens, "max_num_tokens")
    dtype = str(kvc.get("dtype", "auto"))
    priced = dtype.lower() if dtype.lower() in mem.KV_DTYPE_BYTES else "auto"
    ctx = mem.context_kv(spec, m, max_batch_size=1, max_seq_len=need, kv_dtype=priced)  # free, and need's bytes
    shown = dtype if priced == dtype.lower() and priced != "auto" else f"{dtype} (priced as bf16)"
    return KvCache(fraction, where, ctx.free, need, need_from, shown, ctx.need // need, batch, seq)


def check_server(server: ServerConfig, *, spec: ModelSpec, gpu_bytes: int, weight_dtype: str,
                 default_max_num_tokens: int, dwdp: DwdpConfig | None = None, gemm: str | None = None,
                 dwdp_from: str = "") -> ServerVerdict:
    """The verdict of one server (module docstring). dwdp: the DWDP group of a context server (None: the file's own
    dwdp_config where it has one, else memory is not checked); gemm: the adapter path whose slots are priced."""
    args = server.args
    if server.role == "context":
        refused = check_serving_args(args, {"checkpoint_mtp_layers": spec.mtp_layers})
    else:
        refused = check_value_types(args)
    bad = {r.key for r in refused}
    mnt = _int(args.get("max_num_tokens")) if "max_num_tokens" not in bad else None
    mnt = mnt if mnt is not None else default_max_num_tokens
    if server.role == "context":
        if dwdp is None and isinstance(args.get("dwdp_config"), dict):
            from .settings import from_upstream
            dwdp, dwdp_from = from_upstream(args["dwdp_config"], file=server.file), "its dwdp_config"
        if dwdp is None:
            return ServerVerdict(server, refused, None, None, "memory: not checked (no DWDP group: give --dwdp FILE "
                                                              "or --dwdp-size N)")
        m = mem.rank_memory(spec, "dwdp", dwdp=dwdp, weight_dtype=weight_dtype, max_num_tokens=mnt,
                            gpu_bytes=gpu_bytes, gemm=gemm)
        note = f"priced as one rank of DWDP{dwdp.dwdp_size} ({dwdp_from}), prefetch slots for gemm {gemm}" \
            if gemm else f"priced as one rank of DWDP{dwdp.dwdp_size} ({dwdp_from})"
    else:
        ep = next((v for v in (_int(args.get("moe_expert_parallel_size")), _int(args.get("tensor_parallel_size")))
                   if v is not None and v >= 1), 1)
        mtp = _int(args.get("moe_tensor_parallel_size"))
        if mtp is not None and mtp > 1:  # TP x EP experts: each GPU holds 1/(TP x EP) of the expert bytes
            ep *= mtp
        m = mem.rank_memory(spec, "dep", group_size=ep, weight_dtype=weight_dtype, max_num_tokens=mnt,
                            gpu_bytes=gpu_bytes)
        note = f"priced as one rank of DEP{ep} (experts over {ep} GPUs)"
    return ServerVerdict(server, refused, m, _kv(args, spec, m, mnt), note)
