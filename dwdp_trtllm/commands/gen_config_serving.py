"""gen-config's serving settings: the ISL / OSL a deployment is sized for, MTP, generation batch, launch style.

What each derives (the formulas live in integration/gen_config.py, next to the keys they fill):
- --isl: the KV transfer buffer (cache_transceiver_config.max_tokens_in_buffer, `kv_transfer_tokens`);
- --isl + --osl: a request's tokens, which size the generation batch from the KV room (`gen_settings`);
- --mtp: speculative_config (one-model MTP) on every server, as upstream's DWDP recipe; by default 1 when the
  checkpoint has MTP layers (config.json `num_nextn_predict_layers`; the DeepSeek-V3 / R1 presets: 1), else 0;
- --launch: mpi (one `trtllm-serve disaggregated_mpi_worker` world) or rendezvous (one single-GPU `trtllm-serve` per
  context rank meeting at TRTLLM_DWDP_MASTER_ADDR:PORT, integration/group.py);
- --ctx-batch, --kv-dtype: the context servers' max_batch_size and KV cache (max_seq_len = ISL + 1024), their KV
  fraction from the one memory model (deploy/memory.context_kv), checked to fit;
- --mtp-key: the speculative_config key of the draft count (integration/gen_config.installed_mtp_key).
"""
from __future__ import annotations

from ..deploy import memory as mem
from ..integration.gen_config import CTX_BATCH  # the recipe's context max_batch_size
from ..spec.schema import ConfigError

#: the recipe's output length (examples/dwdp/dwdp_reproduce.yaml: osl 1024 in every end-to-end case)
DEFAULT_OSL = 1024
#: the rendezvous master's port (NVIDIA srt-slurm's DWDP_MASTER_PORT, src/srtctl/backends/trtllm.py)
RENDEZVOUS_PORT = 29600
LAUNCHES = ("mpi", "rendezvous")


def add_serving_args(p) -> None:
    p.add_argument("--isl", type=int, default=None,
                   help="the longest prompt (tokens) the deployment is sized for: the KV transfer buffer "
                        "(max_tokens_in_buffer = ISL + 1024 rounded up to 64, as upstream's DWDP recipe) and the "
                        "generation batch (default: --max-num-tokens, one context forward)")
    p.add_argument("--osl", type=int, default=DEFAULT_OSL,
                   help=f"output tokens per request, for the generation batch's KV cache (default {DEFAULT_OSL}, "
                        "upstream's DWDP recipe)")
    p.add_argument("--mtp", type=int, default=None,
                   help="MTP draft tokens (speculative_config on every server; 0: none). Default: 1 when the "
                        "checkpoint has MTP layers (config.json num_nextn_predict_layers), else 0")
    p.add_argument("--gen-batch", type=int, default=None,
                   help="generation servers' max_batch_size per rank (default: the requests of ISL + OSL tokens "
                        "whose KV cache fits, at most 256)")
    p.add_argument("--launch", choices=LAUNCHES, default="mpi",
                   help="mpi: one `trtllm-serve disaggregated_mpi_worker` MPI world (mpirun / srun); rendezvous: one "
                        "single-GPU `trtllm-serve` per context rank meeting through TRTLLM_DWDP_RANK / "
                        "TRTLLM_DWDP_MASTER_ADDR / TRTLLM_DWDP_MASTER_PORT (no MPI between context servers)")
    p.add_argument("--ctx-batch", type=int, default=None,
                   help=f"context servers' max_batch_size: their KV cache holds this many requests of ISL + 1024 "
                        f"tokens (max_seq_len), checked to fit (default: {CTX_BATCH}, upstream's DWDP recipe, or as "
                        "many as fit when fewer do)")
    p.add_argument("--chunked-prefill", action="store_true",
                   help="context servers run chunked prefill (enable_chunked_prefill: true), as `dwdp size` prices "
                        "them by default (default: off, whole prompts, as upstream's DWDP recipe and TensorRT-LLM)")
    p.add_argument("--kv-dtype", choices=("fp8", "auto"), default="fp8",
                   help="context servers' kv_cache_config.dtype (default fp8, upstream's DWDP recipe; auto: the "
                        "checkpoint's own, bf16 for the releases priced here)")
    p.add_argument("--mtp-key", choices=("auto", "max_draft_len", "num_nextn_predict_layers"), default="auto",
                   help="speculative_config key of the MTP draft count: max_draft_len (TensorRT-LLM llm_args.py @ "
                        "0004396 on) or num_nextn_predict_layers (versions before it); auto (default): read from the "
                        "TensorRT-LLM importable here, max_draft_len when there is none")


SERVING_BOUNDS = {"--isl": 1 << 22, "--osl": 1 << 22, "--mtp": 8, "--gen-batch": 1 << 16, "--ctx-batch": 1 << 16}


def checkpoint_mtp_layers(args) -> int | None:
    """MTP layers of the checkpoint gen-config sizes: a preset's ModelSpec.mtp_layers (DeepSeek-V3 / R1: 1), a
    config.json's num_nextn_predict_layers (absent: 0; type and range by json_values); None without model dims
    (--num-experts)."""
    from ..spec.hf_config import read_config_json
    from ..spec.json_values import value
    from ..spec.model_dims import is_config_path
    from ..spec.models import PRESETS

    src = args.preset if args.preset is not None else (None if args.num_experts is not None else args.model)
    if src is None:
        return None
    if src in PRESETS:
        return PRESETS[src].mtp_layers
    if not is_config_path(src):
        return None
    data, f = read_config_json(src)
    return value(data, "num_nextn_predict_layers", f, 0)


def resolve(args) -> tuple[int, int]:
    """(isl, mtp) after the range checks; ConfigError naming the flag. --mtp > 0 on a checkpoint without MTP layers is
    refused (there is no MTP layer to run)."""
    for arg, hi in SERVING_BOUNDS.items():
        v = getattr(args, arg[2:].replace("-", "_"))
        lo = 0 if arg == "--mtp" else 1
        if v is not None and not lo <= v <= hi:
            raise ConfigError(None, arg, f"expected an integer in [{lo}, {hi:,}], got {v}")
    isl = args.isl if args.isl is not None else args.max_num_tokens
    layers = checkpoint_mtp_layers(args)
    mtp = args.mtp if args.mtp is not None else (1 if layers else 0)
    if mtp > 0 and layers == 0:
        raise ConfigError(None, "--mtp", f"{mtp} draft tokens, but the checkpoint has no MTP layer "
                                         "(num_nextn_predict_layers 0): use --mtp 0")
    if args.launch == "rendezvous" and args.mode != "disaggregated":
        raise ConfigError(None, "--launch", f"rendezvous starts the context servers of --mode disaggregated one by "
                                            f"one; --mode {args.mode} is one server: use --launch mpi")
    return isl, mtp


def context_kv(args, spec, sizing, isl: int) -> mem.ContextKv | None:
    """The context servers' KV cache (memory.context_kv of the priced DWDP rank: --ctx-batch requests of ISL + 1024
    tokens in --kv-dtype); None without model dims or outside --mode disaggregated. ConfigError naming --ctx-batch
    when it does not fit what the rank has left."""
    from ..integration.gen_config import SEQ_MARGIN_TOKENS
    if args.mode != "disaggregated" or spec is None or sizing.context is None:
        return None
    seq, batch = isl + SEQ_MARGIN_TOKENS, args.ctx_batch or CTX_BATCH
    kv = mem.context_kv(spec, sizing.context.dwdp, max_batch_size=batch, max_seq_len=seq, kv_dtype=args.kv_dtype)
    if not kv.fits and args.ctx_batch is None and kv.batch_that_fits >= 1:  # the default: as many as fit, at most 4
        kv = mem.context_kv(spec, sizing.context.dwdp, max_batch_size=kv.batch_that_fits, max_seq_len=seq,
                            kv_dtype=args.kv_dtype)
    if not kv.fits:
        flag = "--ctx-batch" if args.ctx_batch is not None else "--isl"
        raise ConfigError(None, flag, f"context servers' KV cache must fit what a rank has left: {kv.describe()}; "
                                      f"{kv.batch_that_fits} request(s) of {seq:,} tokens fit: lower --ctx-batch or "
                                      "--isl, use --kv-dtype fp8, or a larger --dwdp-size")
    return kv


def generation(args, spec, sizing, isl: int, mtp: int):
    """integration.gen_config.GenSettings of the generation servers (None unless --mode disaggregated). The KV room is
    what the generation rank memory.rank_memory prices leaves of the GPU besides its KV-cache floor."""
    from ..integration.gen_config import gen_settings
    if args.mode != "disaggregated":
        return None
    room = per_token = None
    g = sizing.generation
    if g is not None and spec is not None:
        room = max(sizing.gpu_bytes - (g.total - g.kv_cache_floor), 0)
        per_token = mem.kv_cache_floor_bytes(spec, 1)
    return gen_settings(isl=isl, osl=args.osl, mtp=mtp, kv_room_bytes=room, kv_bytes_per_token=per_token,
                        batch=args.gen_batch, max_num_tokens=args.gen_max_num_tokens)


def mtp_key(args) -> tuple[str, str]:
    """(speculative_config key of the draft count, why): --mtp-key, or auto:
    integration/gen_config_mtp.installed_mtp_key."""
    from ..integration.gen_config import installed_mtp_key
    if args.mtp_key != "auto":
        return args.mtp_key, "--mtp-key"
    return installed_mtp_key()


#: the aiconfigurator kernel source of the MoE rows the decode model priced -> TensorRT-LLM MoeConfig.backend
_KERNEL_BACKEND = {"moe_torch_flow_cutlass": "CUTLASS", "deepgemm": "DEEPGEMM", "moe_torch_flow_min_latency": "TRTLLM"}


def priced_moe_backend(spec, gpu: str, weight_dtype: str) -> str | None:
    """The MoE backend whose kernels price a generation server's routed experts on `gpu` (sizing/decode_cost.py reads
    the fused-MoE rows of perf/kernel_tables.py; their first `kernel_source` named as MoeConfig.backend); None where
    no shipped table has the shape (no model dims, a GPU spec file, a dtype without rows)."""
    from ..perf.kernel_tables import shape_tables
    if spec is None:
        return None
    try:
        t = shape_tables(spec, gpu)
    except Exception:  # noqa: BLE001 - an unreadable table prices nothing; the caller falls back and says so
        return None
    src = t and t.data.get("moe", {}).get(weight_dtype, {}).get("kernel_source")
    return _KERNEL_BACKEND.get(src[0]) if src else None


def settings_lines(args, isl: int, mtp: int, gen, *, key: tuple[str, str] = ("max_draft_len", ""),
                   ctx_kv=None, gen_backend: tuple[str, str] | None = None) -> list[str]:
    """The serving settings gen-config wrote, each with its reason (printed and in --json). ctx_kv: the context
    servers' memory.ContextKv (None: no model dims); gen_backend: (moe_config.backend, why) of generation servers."""
    from ..integration import gen_config as gc
    disagg = args.mode == "disaggregated"
    out = [f"KV transfer: max_tokens_in_buffer {gc.kv_transfer_tokens(isl)} (--isl {isl} + {gc.SEQ_MARGIN_TOKENS}, "
           f"rounded up to 64, as {gc.RECIPE_SCRIPT})"] if disagg else []
    out.append(f"MTP: {mtp} draft token{'s' * (mtp != 1)}" + (
        f" (speculative_config.{key[0]} on every server, as {gc.RECIPE}; key: {key[1]})" if mtp
        else " (no speculative_config)"))
    if disagg:
        seq = isl + gc.SEQ_MARGIN_TOKENS
        batch = ctx_kv.max_batch_size if ctx_kv is not None else (args.ctx_batch or CTX_BATCH)
        why = ("--ctx-batch" if args.ctx_batch is not None else "upstream's recipe" if batch == CTX_BATCH
               else f"the requests whose KV cache fits, fewer than the recipe's {CTX_BATCH}")
        out.append(f"context server max_batch_size {batch} ({why}), max_seq_len {seq} (--isl {isl} + "
                   f"{gc.SEQ_MARGIN_TOKENS}), block reuse off, as {gc.RECIPE_SCRIPT_CTX}")
        out.append(context_batching_line(args.chunked_prefill, batch))
        out.append(f"context server kv_cache_config.free_gpu_memory_fraction {ctx_kv.fraction:g}: {ctx_kv.describe()}"
                   if ctx_kv is not None else "context server kv_cache_config.free_gpu_memory_fraction: not written "
                   "(no model dims: TensorRT-LLM's default 0.9 applies; give --preset)")
    if gen_backend is not None:
        out.append(f"generation server moe_config.backend {gen_backend[0]}: {gen_backend[1]}")
    if gen is not None:
        out.append(f"generation server cuda_graph_config: enable_padding, batch sizes up to max_batch_size "
                   f"{gen.batch} (examples/dwdp/reproduce.py @ 4400b395 _cuda_graph_batch_sizes)")
    return out + [f"generation server {line}" for line in (gen.reasons if gen else ())]


def context_batching_line(chunked: bool, batch: int) -> str:
    """What the context servers' iterations hold as written, beside what `dwdp size` prices unless told (the two
    differ by default: spec/batching.SIZE_CONTEXT_BATCHING), in spec/batching's words."""
    from ..spec.batching import SIZE_CONTEXT_BATCHING, describe_context_batching
    size_chunked, size_cap = SIZE_CONTEXT_BATCHING
    flags = ([] if chunked == size_chunked else ["--chunked-prefill" if chunked else "--no-chunked-prefill"]) + \
        ([] if batch == size_cap else [f"--ctx-max-batch {batch}"])
    return (f"context batching written: {describe_context_batching(chunked, batch)} (--chunked-prefill, "
            f"--ctx-batch); `dwdp size` prices "
            + (f"{describe_context_batching(*SIZE_CONTEXT_BATCHING)} unless given {' '.join(flags)}" if flags else
               "the same by default")
            + " (its --out writes what it priced)")


def storage_line(folder: str, model: str, num_nodes: int) -> str:
    """What every node must see: the deploy folder (as the caller names it) and the checkpoint, at the same path."""
    where = (f"on all {num_nodes} nodes" if num_nodes > 1 else
             "on every node that runs a server (one node here: nothing to share unless you move servers)")
    return (f"shared storage: {folder} and the checkpoint {model} must be readable at the same path {where}; "
            "every server reads its YAML from this folder and loads the checkpoint itself")
