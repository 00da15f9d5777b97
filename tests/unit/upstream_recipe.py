"""Upstream's DWDP recipe, as its own script writes each server's TensorRT-LLM YAML (tests only).

`worker_config(row)` is `build_worker_config` of examples/dwdp/reproduce.py @ 4400b395 (NVIDIA/TensorRT-LLM),
transcribed line for line for the keys it writes: the generation server (`gen`) and the context server (`ctx`) of
one experiment row, with `calc_seq_lens`, `max_tokens_in_buffer` and `_cuda_graph_batch_sizes` as there. `ROWS` are
the experiment rows of examples/dwdp/dwdp_reproduce.yaml @ d897f44d with DWDP on (their `experiment_defaults`:
ratio 0.8, enable_dp true, folded in). `hopper(cfg)` is the Hopper variant of a context server: `moe_config.backend`
CUTLASS (the recipe's CUTEDSL is Blackwell NVFP4) and the recipe's `dwdp_config` moved out of the TensorRT-LLM YAML
into the DWDP_TRTLLM_CONFIG file (returned beside it; in the TensorRT-LLM YAML it would start upstream's engine).
The weights (FP8 on Hopper) are the checkpoint's, not a key of these files."""
from __future__ import annotations

import copy
import math

TOTAL_EXPERTS = 256
DEFAULTS = {"ratio": 0.8, "isl_std": 0, "enable_dp": True}
_COMMON = {"dataset_key": "e2e_ratio_08", "isl": 8192, "osl": 1024, "num_gen_servers": 1, "ctx_max_bs": 4,
           "ctx_max_num_tokens": 33000, "prefetch": 64, "dwdp": True}
ROWS = {
    "context_only_dwdp": {**_COMMON, "dataset_key": "context_only_ratio_08", "osl": 1, "num_ctx_servers": 4,
                          "ctx_tp": 1, "gen_tp": 4, "batch": 64, "gen_max_tokens": 256, "ctx_max_bs": 64, "mtp": 0,
                          "eplb": 0, "dwdp_group": 1},
    "e2e_20_40_dwdp_minus_1": {**_COMMON, "num_ctx_servers": 16, "ctx_tp": 1, "gen_tp": 8, "batch": 256,
                               "gen_max_tokens": 512, "mtp": 1, "eplb": 256, "dwdp_group": 4},
    "e2e_40_60_dwdp_minus_1": {**_COMMON, "num_ctx_servers": 12, "ctx_tp": 1, "gen_tp": 8, "batch": 128,
                               "gen_max_tokens": 256, "mtp": 1, "eplb": 0, "dwdp_group": 3},
    "e2e_80_100_dwdp_minus_1": {**_COMMON, "num_ctx_servers": 12, "ctx_tp": 1, "gen_tp": 16, "batch": 32,
                                "gen_max_tokens": 128, "mtp": 3, "eplb": 256, "dwdp_group": 3},
    "e2e_160_180_dwdp": {**_COMMON, "num_ctx_servers": 8, "ctx_tp": 1, "gen_tp": 32, "batch": 2,
                         "gen_max_tokens": 8, "mtp": 3, "eplb": 0, "dwdp_group": 2},
}


def _cuda_graph_batch_sizes(gen_max_num_tokens: int) -> list[int]:
    sizes = [1, 2, 4]
    for start, limit, step in [(8, 1024, 8), (1040, 2048, 16)]:
        if gen_max_num_tokens >= start:
            sizes.extend(range(start, min(gen_max_num_tokens, limit) + 1, step))
    if gen_max_num_tokens > 2048:
        sizes.append(gen_max_num_tokens)
    return sizes


def _calc_seq_lens(isl: int, osl: int, ratio: float) -> list[int]:
    if ratio != 0 and isl == 1024:
        return [1044, 2068]
    return [isl + 1024, isl + 1024 + osl]


def worker_config(row: str) -> dict:
    """{"gen": ..., "ctx": ...}: the two servers' TensorRT-LLM YAML of one experiment row, as build_worker_config."""
    e = {**DEFAULTS, **ROWS[row]}
    isl, osl, ratio = int(e["isl"]), int(e["osl"]), float(e["ratio"])
    ctx_tp, gen_tp, mtp, eplb, prefetch = e["ctx_tp"], e["gen_tp"], e["mtp"], e["eplb"], e["prefetch"]
    ctx_max_seq_len, gen_max_seq_len = _calc_seq_lens(isl, osl, ratio)
    max_tokens_in_buffer = math.ceil(ctx_max_seq_len / 64) * 64
    dwdp_size = e["num_ctx_servers"] // e["dwdp_group"]
    gen = {"tensor_parallel_size": gen_tp, "moe_expert_parallel_size": gen_tp, "enable_attention_dp": True,
           "enable_lm_head_tp_in_adp": True, "pipeline_parallel_size": 1, "context_parallel_size": 1,
           "max_batch_size": e["batch"], "max_num_tokens": e["gen_max_tokens"], "max_seq_len": gen_max_seq_len,
           "cuda_graph_config": {"enable_padding": True, "batch_sizes": _cuda_graph_batch_sizes(e["gen_max_tokens"])},
           "print_iter_log": True, "trust_remote_code": True,
           "kv_cache_config": {"enable_block_reuse": False, "dtype": "fp8", "free_gpu_memory_fraction": 0.75},
           "stream_interval": 100, "moe_config": {"backend": "CUTEDSL"},
           "cache_transceiver_config": {"backend": "UCX", "max_tokens_in_buffer": max_tokens_in_buffer},
           "num_postprocess_workers": 4}
    if mtp > 0:
        gen["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": mtp}
    if eplb > 0:
        gen["moe_config"]["load_balancer"] = {"num_slots": eplb, "layer_updates_per_iter": 1}
    ctx = {"max_batch_size": e["ctx_max_bs"], "max_num_tokens": e["ctx_max_num_tokens"], "max_seq_len": ctx_max_seq_len,
           "tensor_parallel_size": ctx_tp, "context_parallel_size": 1, "moe_expert_parallel_size": ctx_tp,
           "enable_attention_dp": e["enable_dp"], "pipeline_parallel_size": 1, "print_iter_log": True,
           "trust_remote_code": True, "cuda_graph_config": None, "disable_overlap_scheduler": True,
           "kv_cache_config": {"enable_block_reuse": False, "dtype": "fp8", "free_gpu_memory_fraction": 0.3},
           "cache_transceiver_config": {"backend": "UCX", "max_tokens_in_buffer": max_tokens_in_buffer},
           "moe_config": {"backend": "CUTEDSL"}}
    ctx["dwdp_config"] = {"dwdp_size": dwdp_size, "num_groups": e["dwdp_group"],
                          "num_experts_per_worker": int(TOTAL_EXPERTS - (dwdp_size - 1) * prefetch),
                          "num_prefetch_experts": prefetch}
    if mtp > 0:
        ctx["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": mtp}
    return {"gen": gen, "ctx": ctx}


def hopper(ctx: dict) -> tuple[dict, dict]:
    """(the context server's TensorRT-LLM YAML on Hopper, the DWDP_TRTLLM_CONFIG file): backend CUTLASS, the recipe's
    dwdp_config moved into our file; nothing else changes."""
    cfg = copy.deepcopy(ctx)
    cfg["moe_config"]["backend"] = "CUTLASS"
    return cfg, {"engine": "dwdp_trtllm", "dwdp_config": cfg.pop("dwdp_config")}
