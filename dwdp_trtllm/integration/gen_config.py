"""Ready-to-run TensorRT-LLM YAML for DWDP deployments (pure: dicts in, dicts out).

Every key we emit is in KEY_SOURCES with the TensorRT-LLM file it was read from and the commit/version
of that reading; `emitted_keys()` flattens a generated document so tests can check it against the table.
Our engine's DWDP settings never go into TensorRT-LLM YAML (strict schema, and dwdp_config would turn
on upstream's engine too): they go into a separate dwdp.yaml named by DWDP_TRTLLM_CONFIG.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..byte_units import fmt_bytes
from ..deploy.memory import GEN_KV_FRACTION, kv_batch_fit
from ..spec.config import DwdpConfig
from ..spec.schema import ConfigError
from .gen_config_mtp import MTP_KEY_AT, MTP_KEYS, installed_mtp_key, mtp_key_of, speculative_config  # noqa: F401
from .settings import to_upstream

_LLM_ARGS = "tensorrt_llm/llmapi/llm_args.py"
_LLM_ARGS_AT = "commit 0004396720054fd8 (newest stored; TorchLlmArgs fields read in full)"
_DISAGG = "tensorrt_llm/llmapi/disagg_utils.py (extract_disagg_cfg / extract_ctx_gen_cfgs)"
_DISAGG_AT = "stored versions read via code search (2 versions, one with **kwargs passthrough); examples/disaggregated/README.md"
#: upstream's DWDP reproduction recipe: the experiment matrix and the script that turns it into server configs
RECIPE = "examples/dwdp/dwdp_reproduce.yaml @ 6ed140e9"
RECIPE_SCRIPT = "examples/dwdp/reproduce.py @ 1f939488 (build_worker_config)"
#: the same script at the commit whose context-server settings (KV cache, max_batch_size, max_seq_len) and generation
#: CUDA graphs gen-config follows (build_worker_config, _cuda_graph_batch_sizes, calc_seq_lens)
RECIPE_SCRIPT_CTX = "examples/dwdp/reproduce.py @ 4400b395 (build_worker_config)"
#: the recipe's context max_batch_size (ctx_max_bs default in build_worker_config)
CTX_BATCH = 4

#: tokens a request carries beyond its ISL in upstream's recipe (reproduce.py calc_seq_lens: ctx_max_seq_len = isl + 1024)
SEQ_MARGIN_TOKENS = 1024
#: generation servers' kv_cache_config.free_gpu_memory_fraction (reproduce.py build_worker_config's gen_cfg)
#: the largest generation batch (max_batch_size per attention-DP rank) in upstream's recipe (dwdp_reproduce.yaml)
GEN_BATCH_CAP = 256

#: dotted key -> (source file in TensorRT-LLM, version/commit it was read from). Sub-keys of
#: context_servers/generation_servers other than num_instances/urls are LlmArgs keys (other_args).
KEY_SOURCES: dict[str, tuple[str, str]] = {
    # LlmArgs (trtllm-serve / trtllm-bench --extra_llm_api_options, per-server sections of disagg configs)
    "model": (_LLM_ARGS + " BaseLlmArgs.model", _LLM_ARGS_AT),
    "backend": (_LLM_ARGS + " BaseLlmArgs.backend (Optional[str], deprecated)", "newest stored (id 55143598664)"),
    "tensor_parallel_size": (_LLM_ARGS + " BaseLlmArgs.tensor_parallel_size", "TorchLlmArgs docs signature 1.4.0rc4"),
    "enable_attention_dp": (_LLM_ARGS + " BaseLlmArgs.enable_attention_dp", "TorchLlmArgs docs signature 1.4.0rc4"),
    "moe_expert_parallel_size": (_LLM_ARGS + " BaseLlmArgs.moe_expert_parallel_size",
                                 "examples/disaggregated/slurm/gen_yaml.py @ 1bafaa46bf71 (generation_servers "
                                 "tensor_parallel_size = moe_expert_parallel_size with enable_attention_dp)"),
    "moe_tensor_parallel_size": (_LLM_ARGS + " BaseLlmArgs.moe_tensor_parallel_size (\"The tensor parallel size for "
                                 "MoE models's expert weights\"; written only with --gen-moe-tp > 1)", _LLM_ARGS_AT),
    "max_num_tokens": (_LLM_ARGS + " BaseLlmArgs.max_num_tokens", "research notes (reference/trtllm-integration.md), not re-read"),
    "disable_overlap_scheduler": (_LLM_ARGS + " TorchLlmArgs.disable_overlap_scheduler", _LLM_ARGS_AT),
    "cuda_graph_config": (_LLM_ARGS + " TorchLlmArgs.cuda_graph_config (Optional; null disables)", _LLM_ARGS_AT),
    "moe_config": (_LLM_ARGS + " TorchLlmArgs.moe_config", _LLM_ARGS_AT),
    "moe_config.backend": (_LLM_ARGS + " MoeConfig.backend (Literal incl. CUTLASS, CUTEDSL)", "research notes, newest llm_args"),
    "kv_cache_config": (_LLM_ARGS + " BaseLlmArgs.kv_cache_config", "TorchLlmArgs docs signature 1.4.0rc4"),
    "cache_transceiver_config": (_LLM_ARGS + " BaseLlmArgs.cache_transceiver_config", "examples/disaggregated/README.md + research notes"),
    "cache_transceiver_config.backend": (_LLM_ARGS + " CacheTransceiverConfig.backend", "examples/disaggregated/README.md + research notes"),
    "cache_transceiver_config.max_tokens_in_buffer": (_LLM_ARGS + " CacheTransceiverConfig.max_tokens_in_buffer",
                                                      RECIPE_SCRIPT + ": ceil((isl + 1024) / 64) * 64"),
    "max_batch_size": (_LLM_ARGS + " BaseLlmArgs.max_batch_size", RECIPE_SCRIPT + ": gen_cfg max_batch_size = batch"),
    "kv_cache_config.free_gpu_memory_fraction": (_LLM_ARGS + " KvCacheConfig.free_gpu_memory_fraction",
                                                 RECIPE_SCRIPT + ": 0.75 on generation servers"),
    "speculative_config": (_LLM_ARGS + " TorchLlmArgs.speculative_config",
                           RECIPE_SCRIPT + ": ctx_cfg and gen_cfg speculative_config when mtp > 0"),
    "speculative_config.decoding_type": (_LLM_ARGS + " MTPDecodingConfig (decoding_type MTP)", RECIPE_SCRIPT),
    "speculative_config.num_nextn_predict_layers": (_LLM_ARGS + " MTPDecodingConfig.num_nextn_predict_layers",
                                                    RECIPE_SCRIPT + ": = the recipe's mtp (1 or 3); versions before "
                                                    "0004396720054fd8 only (--mtp-key)"),
    "speculative_config.max_draft_len": (_LLM_ARGS + " DecodingBaseConfig.max_draft_len", MTP_KEY_AT),
    "max_seq_len": (_LLM_ARGS + " BaseLlmArgs.max_seq_len", RECIPE_SCRIPT_CTX + ": ctx max_seq_len = isl + 1024"),
    "enable_chunked_prefill": (_LLM_ARGS + " BaseLlmArgs.enable_chunked_prefill (default False)",
                               "dwdp size: context iterations priced with chunked prefill (--no-chunked-prefill: "
                               "whole prompts, the key not written)"),
    "kv_cache_config.enable_block_reuse": (_LLM_ARGS + " KvCacheConfig.enable_block_reuse (default True)",
                                           RECIPE_SCRIPT_CTX + ": false on context servers"),
    "kv_cache_config.dtype": (_LLM_ARGS + " KvCacheConfig.dtype (default 'auto')", RECIPE_SCRIPT_CTX + ": fp8"),
    "cuda_graph_config.enable_padding": (_LLM_ARGS + " BaseCudaGraphConfig.enable_padding (default False)",
                                         RECIPE_SCRIPT_CTX + ": gen_cfg enable_padding true"),
    "cuda_graph_config.batch_sizes": (_LLM_ARGS + " BaseCudaGraphConfig.batch_sizes (max_batch_size = their max)",
                                      RECIPE_SCRIPT_CTX + " _cuda_graph_batch_sizes, up to the server's "
                                      "max_batch_size"),
    "dwdp_config": (_LLM_ARGS + " TorchLlmArgs.dwdp_config (Optional[DwdpConfig], prototype)", _LLM_ARGS_AT),
    "dwdp_config.dwdp_size": (_LLM_ARGS + " DwdpConfig", "usage in _torch/pyexecutor/dwdp.py @ 198af0453 (config.dwdp_size)"),
    "dwdp_config.num_groups": (_LLM_ARGS + " DwdpConfig", "usage in _torch/pyexecutor/dwdp.py @ 198af0453"),
    "dwdp_config.num_experts_per_worker": (_LLM_ARGS + " DwdpConfig", "usage in _torch/pyexecutor/dwdp.py @ 198af0453"),
    "dwdp_config.num_prefetch_experts": (_LLM_ARGS + " DwdpConfig", "usage in _torch/pyexecutor/dwdp.py @ 198af0453"),
    "dwdp_config.contention_opt": (_LLM_ARGS + " DwdpConfig", "usage in _torch/pyexecutor/dwdp.py @ 198af0453"),
    # disaggregated proxy / worker top level (disagg_utils)
    "hostname": (_DISAGG, _DISAGG_AT),
    "port": (_DISAGG, _DISAGG_AT),
    "context_servers": (_DISAGG, _DISAGG_AT),
    "generation_servers": (_DISAGG, _DISAGG_AT),
    "context_servers.num_instances": (_DISAGG, _DISAGG_AT),
    "context_servers.urls": (_DISAGG, _DISAGG_AT),
    "generation_servers.num_instances": (_DISAGG, _DISAGG_AT),
    "generation_servers.urls": (_DISAGG, _DISAGG_AT),
}
_SERVER_SECTIONS = ("context_servers", "generation_servers")


def kv_transfer_tokens(isl: int) -> int:
    """cache_transceiver_config.max_tokens_in_buffer for prompts of up to `isl` tokens: the context sequence (ISL +
    SEQ_MARGIN_TOKENS) rounded up to 64, as upstream's recipe sizes it (RECIPE_SCRIPT: max_tokens_in_buffer =
    ceil(ctx_max_seq_len / 64) * 64). A request longer than the buffer is sent in several transfers."""
    return math.ceil((isl + SEQ_MARGIN_TOKENS) / 64) * 64


#: the recipe's CUDA-graph ladder (RECIPE_SCRIPT_CTX _cuda_graph_batch_sizes): 1, 2, 4, then steps of 8 to 1024 and
#: of 16 to 2048
_GRAPH_STAGES = ((8, 1024, 8), (1040, 2048, 16))


def cuda_graph_batch_sizes(max_batch: int) -> list[int]:
    """CUDA-graph batch sizes of a generation server whose ranks run up to `max_batch` requests: the recipe's ladder
    (RECIPE_SCRIPT_CTX _cuda_graph_batch_sizes) cut at max_batch, max_batch itself last (upstream's
    BaseCudaGraphConfig takes max(batch_sizes) as its max_batch_size; with enable_padding a batch rounds up to the
    next size)."""
    sizes = [b for b in (1, 2, 4) if b < max_batch]
    for start, limit, step in _GRAPH_STAGES:
        sizes += [b for b in range(start, min(max_batch, limit + 1), step) if b < max_batch]
    return sizes + [max_batch]


@dataclass(frozen=True)
class GenSettings:
    """A generation server's sizing: max_batch_size per rank, its max_num_tokens, the KV-cache fraction, and one line
    per setting saying why (printed by gen-config)."""

    batch: int
    max_num_tokens: int
    kv_fraction: float
    reasons: tuple[str, ...]


def gen_settings(*, isl: int, osl: int, mtp: int, kv_room_bytes: int | None, kv_bytes_per_token: int | None,
                 batch: int | None = None, max_num_tokens: int | None = None) -> GenSettings:
    """Size a generation rank. batch (None: sized): the requests of ISL + OSL tokens whose KV cache fits
    GEN_KV_FRACTION of the memory the rank has left (kv_room_bytes, after weights and activations), at most
    GEN_BATCH_CAP; max_num_tokens (None: batch x (1 + mtp), every request's token and its draft tokens in one step, as
    the recipe's gen_max_tokens). Without model dims (kv_room_bytes None) a sized batch is GEN_BATCH_CAP, said so.
    ConfigError naming --gen-batch / --gen-tp when not one request fits."""
    seq = isl + osl
    why: list[str] = []
    if batch is None:
        if kv_room_bytes is None or kv_bytes_per_token is None:
            batch = GEN_BATCH_CAP
            why.append(f"max_batch_size {batch}: the largest batch of upstream's recipe ({RECIPE}); no model dims to "
                       "check its KV cache (give --preset)")
        else:
            fit = kv_batch_fit(kv_room_bytes, kv_bytes_per_token, seq)
            if fit < 1:
                raise ConfigError(None, "--gen-tp", f"a generation rank has KV room for no request of {seq:,} tokens "
                                                    f"(--isl {isl} + --osl {osl}): use a larger --gen-tp")
            batch = min(fit, GEN_BATCH_CAP)
            why.append(f"max_batch_size {batch}: " + (
                f"the requests of {seq:,} tokens (--isl {isl} + --osl {osl}) whose KV cache fits "
                f"{GEN_KV_FRACTION:g} of the {fmt_bytes(kv_room_bytes, digits=1)} a rank has left" if fit < GEN_BATCH_CAP else
                f"upstream's largest recipe batch ({RECIPE}); KV room for {fit:,} requests of {seq:,} tokens"))
    else:
        why.append(f"max_batch_size {batch}: --gen-batch")
    if max_num_tokens is None:
        max_num_tokens = batch * (1 + mtp)
        why.append(f"max_num_tokens {max_num_tokens}: max_batch_size x (1 + {mtp} MTP draft tokens), one step of every "
                   f"request (the recipe's gen_max_tokens, {RECIPE})")
    else:
        why.append(f"max_num_tokens {max_num_tokens}: --gen-max-num-tokens")
    why.append(f"kv_cache_config.free_gpu_memory_fraction {GEN_KV_FRACTION:g}: upstream's generation servers "
               f"({RECIPE_SCRIPT})")
    return GenSettings(batch, max_num_tokens, GEN_KV_FRACTION, tuple(why))


def emitted_keys(doc: dict, prefix: str = "") -> set[str]:
    """Dotted keys of a generated document; LlmArgs keys inside server sections are reported without the section."""
    out: set[str] = set()
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if prefix.rstrip(".") in _SERVER_SECTIONS and k not in ("num_instances", "urls"):
            key = k
        out.add(key)
        if isinstance(v, dict):
            out |= emitted_keys(v, f"{key}.")
    return out


@dataclass(frozen=True)
class Deployment:
    """Inputs of gen-config (validated in __post_init__; errors name the CLI argument)."""

    model: str
    num_experts: int
    dwdp: DwdpConfig
    engine: str = "dwdp_trtllm"  # upstream | dwdp_trtllm
    ctx_servers: int = 4
    gen_servers: int = 1
    gen_tp: int = 1
    max_num_tokens: int = 16384
    gen_max_num_tokens: int | None = None  # None: not written (TensorRT-LLM's default)
    weight_dtype: str = "fp8"
    hostname: str = "localhost"
    port: int = 8000
    #: the longest prompt the deployment is sized for (KV transfer buffer: kv_transfer_tokens)
    isl: int = 16384
    #: MTP draft tokens (speculative_config on every server; 0: none)
    mtp: int = 0
    #: generation servers' max_batch_size and KV fraction (None: not written)
    gen_batch: int | None = None
    gen_kv_fraction: float | None = None
    #: host of every server in MPI rank order (context servers, then generation servers); None: `hostname` for all
    server_hosts: tuple[str, ...] | None = None
    #: speculative_config's draft-count key (MTP_KEYS)
    mtp_key: str = "max_draft_len"
    #: context servers: max_batch_size, kv_cache_config.dtype and free_gpu_memory_fraction (None: not computed, no
    #: model dims); max_seq_len is isl + SEQ_MARGIN_TOKENS
    ctx_batch: int = CTX_BATCH
    #: context servers: enable_chunked_prefill true (what `dwdp size` prices by default; upstream's recipe and
    #: TensorRT-LLM's default run whole prompts, BaseLlmArgs.enable_chunked_prefill = False)
    ctx_chunked_prefill: bool = False
    ctx_kv_dtype: str = "fp8"
    ctx_kv_fraction: float | None = None
    #: generation servers' moe_config.backend (None: the context servers' backend)
    gen_moe_backend: str | None = None
    #: generation servers' attention TP (1: attention DP over gen_tp; gen_tp: attention TP over the whole server) and
    #: MoE tensor parallelism (experts moe_tensor_parallel_size x moe_expert_parallel_size = gen_tp / gen_moe_tp)
    gen_attn_tp: int = 1
    gen_moe_tp: int = 1

    def __post_init__(self) -> None:
        for arg, v in (("--ctx-servers", self.ctx_servers), ("--gen-servers", self.gen_servers),
                       ("--gen-tp", self.gen_tp), ("--max-num-tokens", self.max_num_tokens)):
            if v < 1:
                raise ConfigError(None, arg, f"expected an integer >= 1, got {v}")
        if self.gen_moe_tp < 1 or self.gen_tp % self.gen_moe_tp:
            raise ConfigError(None, "--gen-moe-tp", f"a divisor of --gen-tp {self.gen_tp}, got {self.gen_moe_tp}")
        if self.gen_attn_tp not in (1, self.gen_tp):
            raise ConfigError(None, "--gen-attn-tp", f"1 (attention DP) or --gen-tp {self.gen_tp} (attention TP over "
                                                     f"the whole server), got {self.gen_attn_tp}")
        if self.engine not in ("upstream", "dwdp_trtllm"):
            raise ConfigError(None, "--engine", f"expected upstream or dwdp_trtllm, got {self.engine!r}")
        if self.engine == "upstream" and self.weight_dtype != "nvfp4":
            raise ConfigError(None, "--weight-dtype", "upstream DWDP runs only NVFP4 (CuteDSL, Blackwell); "
                              f"got {self.weight_dtype}: use --engine dwdp_trtllm")
        self.dwdp.validate_for(self.num_experts, None, prefix="--dwdp-size")

    @property
    def moe_backend(self) -> str:
        return "CUTEDSL" if self.engine == "upstream" else "CUTLASS"

    def upstream_dwdp(self) -> dict:
        return to_upstream(self.dwdp, self.num_experts)[0]


def _ctx_common(d: Deployment) -> dict[str, Any]:
    out: dict[str, Any] = {"disable_overlap_scheduler": True, "cuda_graph_config": None,
                           "moe_config": {"backend": d.moe_backend}, "max_num_tokens": d.max_num_tokens}
    if d.engine == "upstream":
        out["dwdp_config"] = d.upstream_dwdp()
    if d.mtp > 0:
        out["speculative_config"] = speculative_config(d.mtp, d.mtp_key)
    return out


def _ctx_serving(d: Deployment) -> dict[str, Any]:
    """A context server's batch, sequence and KV cache as RECIPE_SCRIPT_CTX sets them (max_batch_size, max_seq_len =
    ISL + SEQ_MARGIN_TOKENS, kv_cache_config with block reuse off and the recipe's dtype), the KV fraction the one
    memory model budgets (deploy/memory.context_kv_fraction; absent without model dims)."""
    kv: dict[str, Any] = {"enable_block_reuse": False, "dtype": d.ctx_kv_dtype}
    if d.ctx_kv_fraction is not None:
        kv["free_gpu_memory_fraction"] = d.ctx_kv_fraction
    out = {"max_batch_size": d.ctx_batch, "max_seq_len": d.isl + SEQ_MARGIN_TOKENS, "kv_cache_config": kv}
    if d.ctx_chunked_prefill:  # as priced (`dwdp size` without --no-chunked-prefill); absent: whole prompts
        out["enable_chunked_prefill"] = True
    return out


def aggregated(d: Deployment, mode: str = "aggregated") -> dict[str, Any]:
    """`trtllm-serve MODEL --extra_llm_api_options x.yaml`: attention DP over dwdp_size ranks, DWDP on the MoE
    (upstream engine).
    `mode`: the --mode asking (bench: trtllm-bench runs aggregated), named in a refusal."""
    if d.engine != "upstream":
        via = " (trtllm-bench runs aggregated)" if mode == "bench" else ""
        raise ConfigError(None, "--mode", f"{mode}{via}: aggregated attention-DP serving needs the MoE communication "
                          "path that only upstream DWDP disables; with --engine dwdp_trtllm use --mode disaggregated "
                          "(TP1 context servers)")
    return {"tensor_parallel_size": d.dwdp.world_size, "enable_attention_dp": True, **_ctx_common(d)}


def bench_options(d: Deployment) -> dict[str, Any]:
    """`trtllm-bench ... throughput --extra_llm_api_options extra.yaml` (aggregated only, like trtllm-bench itself)."""
    doc = aggregated(d, "bench")
    doc.pop("tensor_parallel_size")  # given as trtllm-bench --tp
    return doc


def _urls(d: Deployment, n: int, first_port: int, first_server: int) -> list[str]:
    hosts = d.server_hosts or (d.hostname,) * (d.ctx_servers + d.gen_servers)
    return [f"{hosts[first_server + i]}:{first_port + i}" for i in range(n)]


def _gen_parallel(d: Deployment) -> dict[str, Any]:
    """A generation server of gen_tp GPUs: attention DP + expert parallelism over them (DEP), as upstream's
    examples/disaggregated/slurm configs run DeepSeek-R1 generation; TP1 is a single GPU. With MoE TP
    (gen_moe_tp > 1) the experts are moe_tensor_parallel_size x moe_expert_parallel_size (TensorRT-LLM's
    llm_args.py fields; their product is tensor_parallel_size); with attention TP (gen_attn_tp = gen_tp)
    enable_attention_dp is false: one attention-TP group runs max_batch_size requests."""
    out: dict[str, Any] = {"tensor_parallel_size": d.gen_tp}
    if d.gen_tp > 1:
        out.update(moe_expert_parallel_size=d.gen_tp // d.gen_moe_tp, enable_attention_dp=d.gen_attn_tp == 1)
        if d.gen_moe_tp > 1:
            out["moe_tensor_parallel_size"] = d.gen_moe_tp
    if d.gen_batch is not None:
        out["max_batch_size"] = d.gen_batch
        # the batch sizes the ranks run, padded up to the next graph (RECIPE_SCRIPT_CTX gen_cfg cuda_graph_config)
        out["cuda_graph_config"] = {"enable_padding": True, "batch_sizes": cuda_graph_batch_sizes(d.gen_batch)}
    out["moe_config"] = {"backend": d.gen_moe_backend or d.moe_backend}
    if d.gen_max_num_tokens is not None:
        out["max_num_tokens"] = d.gen_max_num_tokens
    if d.gen_kv_fraction is not None:
        out["kv_cache_config"] = {"free_gpu_memory_fraction": d.gen_kv_fraction}
    if d.mtp > 0:
        out["speculative_config"] = speculative_config(d.mtp, d.mtp_key)
    return out


def disaggregated(d: Deployment) -> tuple[dict[str, Any], dict[str, Any]]:
    """(proxy config, worker config). Context servers: TP1 instances forming the DWDP group(s), placed first in the
    MPI world, batch / sequence / KV cache as _ctx_serving; generation servers: gen_tp GPUs each with attention DP +
    EP (_gen_parallel), overlap scheduler default, CUDA graphs padded to the batch sizes they run. URLs name each
    server's node (server_hosts) when given."""
    if d.ctx_servers != d.dwdp.world_size:
        raise ConfigError(None, "--ctx-servers", f"{d.ctx_servers} context servers but num_groups*dwdp_size = "
                          f"{d.dwdp.world_size}: every context server is one DWDP rank")
    ctx_urls = _urls(d, d.ctx_servers, d.port + 1, 0)
    gen_urls = _urls(d, d.gen_servers, d.port + 1 + d.ctx_servers, d.ctx_servers)
    proxy = {"hostname": d.hostname, "port": d.port, "backend": "pytorch",
             "context_servers": {"num_instances": d.ctx_servers, "urls": ctx_urls},
             "generation_servers": {"num_instances": d.gen_servers, "urls": gen_urls}}
    xfer = {"backend": "UCX", "max_tokens_in_buffer": kv_transfer_tokens(d.isl)}
    worker = {"model": d.model, "backend": "pytorch", "hostname": d.hostname, "port": d.port,
              "context_servers": {"num_instances": d.ctx_servers, "urls": ctx_urls, "tensor_parallel_size": 1,
                                  **_ctx_common(d), **_ctx_serving(d), "cache_transceiver_config": dict(xfer)},
              "generation_servers": {"num_instances": d.gen_servers, "urls": gen_urls, **_gen_parallel(d),
                                     "cache_transceiver_config": dict(xfer)}}
    return proxy, worker


def mpi_world(d: Deployment) -> int:
    return d.ctx_servers + d.gen_servers * d.gen_tp
