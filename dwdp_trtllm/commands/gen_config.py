"""`dwdp gen-config`: ready-to-run TensorRT-LLM YAML for DWDP (aggregated, disaggregated, trtllm-bench).

Every server is sized before anything is written: each context server is one DWDP rank, each generation
server runs attention DP + expert parallelism over --gen-tp GPUs (default: the smallest power of two whose
rank fits); both are priced by memory.rank_memory (GB = 1e9 bytes) and a server that does not fit is refused
naming the numbers. The first output line says how many GPUs on how many nodes (--gpus-per-node); a
deployment over several nodes also gets an mpirun hostfile and a slurm script (launch.slurm, in the shape of
TensorRT-LLM's examples/disaggregated/slurm). A refused run writes nothing: all files are built first and
land in --out only once every check passed (written into a temporary directory, then renamed).

Writes into --out: the TensorRT-LLM YAML(s), for --engine dwdp_trtllm a dwdp.yaml with our settings
(DWDP_TRTLLM_CONFIG points at it) plus launch.env, and commands.sh with the launch lines (--launch mpi: one MPI
world; rendezvous: one single-GPU trtllm-serve per context server). The folder and the checkpoint must be on
storage every node sees. Serving settings (--isl, --osl, --mtp, --gen-batch, --ctx-batch, --kv-dtype,
--mtp-key): gen_config_serving.py. The printed report fits 80 columns (gen_config_text.py).
Keys and their TensorRT-LLM sources: dwdp_trtllm/integration/gen_config.py KEY_SOURCES, docs/TRTLLM.md.
"""
from __future__ import annotations

from .terminal import paragraphs

import argparse
import dataclasses
import json
import re

from ..deploy import memory as mem
from ..byte_units import fmt_bytes
from ..spec.config import DwdpConfig
from ..spec.models import PRESETS, ModelSpec
from ..deploy.node_layout import layout
from ..deploy.out_path import check_out_dir
from ..spec.schema import ConfigError
from . import gen_config_files as files
from . import gen_config_serving as serving
from . import gen_config_text as text
from .context_length import check_context_length
from .deploy_args import add_gpu_args, gpu_budget_bytes, gpu_label

#: TensorRT-LLM's max_num_tokens when a server's YAML gives none (llm_args.py BaseLlmArgs.max_num_tokens)
TRTLLM_DEFAULT_MAX_NUM_TOKENS = 8192
#: generation-server sizes (GPUs, attention DP + EP) tried when --gen-tp is not given
GEN_TPS = (1, 2, 4, 8, 16, 32, 64)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("gen-config", help="write TensorRT-LLM YAML for DWDP serving/benchmarking",
                       description=paragraphs(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("aggregated", "disaggregated", "bench"), default="disaggregated",
                   help="disaggregated: DWDP context servers + generation servers (default); aggregated: one "
                        "trtllm-serve (upstream engine only); bench: trtllm-bench options (upstream engine only)")
    p.add_argument("--model", required=True,
                   help="checkpoint path or HF name (written as `model:`); a local checkpoint directory or its "
                        "config.json also gives the model's dims when neither --preset nor --num-experts is given "
                        "(a config.json file is written as its directory)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--num-experts", type=int, help="routed experts per MoE layer (no model dims: give --gen-tp)")
    g.add_argument("--preset", help=f"the model's dims (size every server's memory): a dwdp_trtllm.spec.models preset "
                                    f"({', '.join(sorted(PRESETS))}) or a config.json / checkpoint directory, dims "
                                    "only (model_dims.py, as `dwdp plan --model`), any MoE family")
    p.add_argument("--engine", choices=("upstream", "dwdp_trtllm"), default=None,
                   help="default: upstream for --weight-dtype nvfp4, dwdp_trtllm otherwise")
    p.add_argument("--weight-dtype", choices=("bf16", "fp8", "nvfp4"), default=mem.DEFAULT_WEIGHT_DTYPE,
                   help=f"the checkpoint's expert weights (default {mem.DEFAULT_WEIGHT_DTYPE}; nvfp4: upstream engine)")
    p.add_argument("--dwdp-size", type=int, default=None,
                   help="ranks per DWDP group (default: with --preset the smallest power of two whose ranks fit the "
                        "GPU, as `dwdp plan` and plan-placement; with --num-experts 4)")
    p.add_argument("--num-groups", type=int, default=1, help="DWDP groups of --dwdp-size context servers (default 1)")
    p.add_argument("--num-experts-per-worker", type=int, default=0, help="0 = derived placement")
    p.add_argument("--num-prefetch-experts", type=int, default=0,
                   help="experts each rank prefetches per layer (upstream's dwdp_config key; 0 = derived)")
    p.add_argument("--no-contention-opt", action="store_true", help="unsliced peer copies")
    p.add_argument("--ctx-servers", type=int, default=None, help="default num_groups*dwdp_size")
    p.add_argument("--gen-servers", type=int, default=1, help="generation servers (default 1)")
    p.add_argument("--gen-tp", type=int, default=None,
                   help="GPUs per generation server (attention DP + expert parallel); default: the smallest power "
                        "of two up to 64 whose rank fits")
    p.add_argument("--gen-moe-tp", type=int, default=1,
                   help="generation servers' MoE tensor parallelism: experts moe_tensor_parallel_size x "
                        "moe_expert_parallel_size (--gen-tp / this) (default 1: EP only)")
    p.add_argument("--gen-attn-tp", type=int, default=1,
                   help="generation servers' attention TP: 1 (attention DP, default) or --gen-tp (attention TP over "
                        "the whole server, enable_attention_dp false; --gen-batch is then the server's)")
    p.add_argument("--max-num-tokens", type=int, default=mem.context_max_num_tokens(),
                   help="context servers' max_num_tokens (also the KV-cache floor of every server; default "
                        "%(default)s: memory.context_max_num_tokens, what `dwdp plan` prices "
                        "without --mnt)")
    p.add_argument("--gen-max-num-tokens", type=int, default=None,
                   help="generation servers' max_num_tokens (default: max_batch_size x (1 + --mtp); the rank is priced "
                        f"with TensorRT-LLM's {TRTLLM_DEFAULT_MAX_NUM_TOKENS} unless given)")
    serving.add_serving_args(p)
    add_gpu_args(p)
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs of one node (default 8)")
    p.add_argument("--hosts", default=None, help="comma-separated host of each node, in order (default: localhost on "
                                                 "one node, NODE<i>_HOST placeholders on several)")
    p.add_argument("--hostname", default="localhost", help="proxy host on one node")
    p.add_argument("--port", type=int, default=8000,
                   help="the proxy's port (default 8000); server i listens on port + 1 + i")
    p.add_argument("--json", action="store_true", help="print the deployment (servers, nodes, memory in GB) as JSON")
    p.add_argument("--out", required=True, help="output directory (created)")
    p.set_defaults(gen_config_parser=p)
    return p


#: upper bounds of the integer arguments (beyond them no deployment exists)
BOUNDS = {"--num-experts": 4096, "--dwdp-size": 1024, "--num-groups": 1024, "--num-experts-per-worker": 4096,
          "--num-prefetch-experts": 4096, "--ctx-servers": 4096, "--gen-servers": 4096, "--gen-tp": 1024,
          "--max-num-tokens": 1 << 20, "--gen-max-num-tokens": 1 << 20, "--gpus-per-node": 1024, "--port": 65535}
_HOSTNAME = re.compile(r"[A-Za-z0-9._:\[\]-]+")


def model_spec(args) -> ModelSpec | None:
    """The dims every server is sized with: --preset (a preset or a config.json), else --model when it is a local
    checkpoint directory or config.json; None with --num-experts (no dims). Errors name the flag or the file key."""
    from pathlib import Path

    from ..spec.model_dims import dims_from_config_json, is_config_path

    if args.preset is not None:
        if args.preset in PRESETS:
            return PRESETS[args.preset]
        if not is_config_path(args.preset):
            raise ConfigError(None, "--preset", f"expected one of {', '.join(sorted(PRESETS))} or a config.json path, "
                                                f"got {args.preset!r}")
        return dims_from_config_json(args.preset)
    if args.num_experts is not None:
        return None
    m = Path(args.model)
    if (m / "config.json").is_file() or (args.model.endswith(".json") and m.is_file()):
        if m.is_file():  # trtllm-serve takes the checkpoint directory
            args.model = str(m.parent)
        return dims_from_config_json(m)
    raise ConfigError(None, "--preset", "the model's dims are needed: give --preset (a preset or a config.json), "
                                        f"--num-experts, or --model as a local checkpoint directory (got {args.model!r})")


def check_args(args, num_experts: int) -> None:
    """Range checks naming the argument, before anything is built or written."""
    for arg, hi in BOUNDS.items():
        v = num_experts if arg == "--num-experts" else getattr(args, arg[2:].replace("-", "_"))
        lo = 0 if arg in ("--num-experts-per-worker", "--num-prefetch-experts") else 1
        if v is not None and not lo <= v <= hi:
            raise ConfigError(None, arg, f"expected an integer in [{lo}, {hi:,}], got {v}")
    if args.hosts is not None and not args.hosts.strip():
        raise ConfigError(None, "--hosts", "expected comma-separated host names, got an empty string (leave --hosts "
                                           "out for localhost / NODE<i>_HOST placeholders)")
    for arg, names in (("--hostname", [args.hostname]), ("--hosts", (args.hosts or "x").split(","))):
        for h in names:
            if not _HOSTNAME.fullmatch(h):
                raise ConfigError(None, arg, f"expected host names or addresses (letters, digits, . - : [ ]), got {h!r}")
    if not args.model.strip():
        raise ConfigError(None, "--model", "expected a checkpoint path or HF name, got an empty string")
    args.out = check_out_dir(args.out, "--out")  # empty, loops, dangling links, too long, a file in the way


def check_ports(args, num_servers: int) -> None:
    """The proxy listens on --port and server i on --port + 1 + i: the highest port used must be a port (<= 65535)."""
    top = args.port + num_servers
    if top > 65535:
        raise ConfigError(None, "--port", f"expected a port whose {num_servers} servers fit below 65536 (server i "
                                          f"listens on --port + 1 + i, the highest {top:,} here): use --port "
                                          f"{65535 - num_servers} or lower, got {args.port}")


@dataclasses.dataclass(frozen=True)
class Sizing:
    """Every server's memory (None: no model dims) and the generation parallelism chosen."""

    gpu: str
    gpu_bytes: int
    context: mem.DeploymentFit | None
    gen_tp: int
    generation: mem.RankMemory | None
    #: how the context rank's expert path was chosen for pricing (moe_evidence.priced_gemm); None: upstream's engine
    gemm_how: str | None = None
    #: the same rank on the adapter's merge fallback ([E, ...] slots), priced by memory.rank_memory too
    merge: mem.RankMemory | None = None

    def lines(self) -> list[str]:
        if self.context is None:
            return ["memory: not checked (--num-experts gives no model dims; pass --preset, a preset or a config.json)"]
        out = [f"context server (one DWDP rank): {self.context.dwdp.describe()}",
               f"  (DEP at the same size: {self.context.dep.describe()}; {self.context.smallest_line()})"]
        if self.gemm_how is not None:
            out.append(f"  (prefetch slots priced for gemm {self.context.dwdp.gemm}: {self.gemm_how}")
            if self.merge is not None:
                out[-1] += (f"; on the merge fallback, where the composite view and multi_buffer are both refused, "
                            f"every slot holds all experts: {self.merge.describe()})")
            else:
                out[-1] += ")"
        if self.generation is not None:
            out.append(f"generation server ({self.gen_tp} GPUs, attention DP + EP): {self.generation.describe()}")
        return out

    def to_dict(self) -> dict:
        c = self.context
        return {"unit": mem.UNIT, "gpu": self.gpu, "gpu_gb": self.gpu_bytes / mem.GB,
                "context_dwdp": c and c.dwdp.to_dict(), "context_dep_alternative": c and c.dep.to_dict(),
                "context_dwdp_merge_fallback": self.merge and self.merge.to_dict(), "gemm_priced_how": self.gemm_how,
                "smallest_fitting": c and {"dwdp": c.smallest_fitting_dwdp_size, "dep": c.smallest_fitting_dep_size},
                "generation": self.generation and self.generation.to_dict()}


def size_servers(args, dwdp: DwdpConfig, spec: ModelSpec | None, engine: str = "dwdp_trtllm") -> Sizing:
    """Price every server with memory.rank_memory; ConfigError naming the argument and the numbers if one does not fit.
    engine dwdp_trtllm: the context rank's slots are priced for the path the adapter takes first on --gpu
    (moe_evidence.priced_gemm), its merge fallback beside it (shown, not refused: the fallback is not chosen here)."""
    gpu_bytes, name = gpu_budget_bytes(args.gpu, args.gpu_memory_gb), gpu_label(args.gpu)
    disagg = args.mode == "disaggregated"
    if spec is None:
        if disagg and args.gen_tp is None:
            raise ConfigError(None, "--gen-tp", "without --preset there are no model dims to size a generation server: "
                                                "give --gen-tp (GPUs per generation server) or --preset")
        return Sizing(name, gpu_bytes, None, args.gen_tp or 1, None)
    wd, mnt = args.weight_dtype, args.max_num_tokens
    gemm, how, merge = None, None, None
    if engine == "dwdp_trtllm":
        from ..integration.moe_evidence import priced_gemm
        gemm, how = priced_gemm(wd, args.gpu)
        merge = mem.rank_memory(spec, "dwdp", dwdp=dwdp, weight_dtype=wd, max_num_tokens=mnt, gpu_bytes=gpu_bytes,
                                gemm="merge")
    fit = mem.fit_deployment(spec, dwdp, gpu_bytes, weight_dtype=wd, max_num_tokens=mnt, gemm=gemm)
    extra = dict(gemm_how=how, merge=merge)
    if not fit.fits:
        raise ConfigError(None, "--dwdp-size", f"a context server that fits {name} ({fmt_bytes(gpu_bytes, digits=None)}): "
                                               f"{fit.dwdp.describe()}; {fit.smallest_line()}")
    if not disagg:
        return Sizing(name, gpu_bytes, fit, 0, None, **extra)
    gen_mnt = args.gen_max_num_tokens or TRTLLM_DEFAULT_MAX_NUM_TOKENS

    def gen(tp: int) -> mem.RankMemory:
        return mem.rank_memory(spec, "dep", group_size=tp, weight_dtype=wd, max_num_tokens=gen_mnt, gpu_bytes=gpu_bytes,
                               kv_tokens=mnt)
    smallest = next((m for m in map(gen, GEN_TPS) if m.fits), None)  # the default, and the hint when --gen-tp misfits
    if args.gen_tp is not None:
        g = gen(args.gen_tp)
        if not g.fits:
            raise ConfigError(None, "--gen-tp", f"a generation server whose ranks fit {name} "
                                                f"({fmt_bytes(gpu_bytes, digits=None)}): {g.describe()}; "
                              + (f"--gen-tp {smallest.group_size} fits" if smallest else "no --gen-tp up to 64 fits"))
        return Sizing(name, gpu_bytes, fit, args.gen_tp, g, **extra)
    if smallest is not None:
        return Sizing(name, gpu_bytes, fit, smallest.group_size, smallest, **extra)
    raise ConfigError(None, "--gen-tp", f"a generation server that fits {name}: {gen(GEN_TPS[-1]).describe()}, "
                                        "and no smaller power of two fits either")


def run(args) -> int:
    from ..integration import gen_config as gc

    from ..spec.model_dims import dims_only_reason

    spec = model_spec(args)
    num_experts = args.num_experts if spec is None else spec.num_experts
    check_args(args, num_experts)
    isl, mtp = serving.resolve(args)
    if spec is not None:  # the stated lengths (an --isl not given is --max-num-tokens, one forward, not a prompt)
        check_context_length(args.preset or args.model, spec, args.isl or 0, (args.isl or 0) + args.osl)
    size = args.dwdp_size
    if size is None:  # the default every deployment command shares (memory.default_dwdp_size); no dims: 4
        size = 4 if spec is None else mem.default_dwdp_size(
            spec, gpu_budget_bytes(args.gpu, args.gpu_memory_gb), weight_dtype=args.weight_dtype,
            max_num_tokens=args.max_num_tokens)
    dims_only = spec and dims_only_reason(spec)  # a family the embedded engine does not run
    engine = args.engine or ("upstream" if args.weight_dtype == "nvfp4" or dims_only else "dwdp_trtllm")
    if engine == "upstream" and args.launch == "rendezvous":
        raise ConfigError(None, "--launch", "rendezvous with --engine upstream: upstream's DWDP group forms over MPI "
                                            "only (tensorrt_llm/_torch/pyexecutor/dwdp.py _create_dwdp_comm: "
                                            "COMM_WORLD.Create_group), which single-GPU trtllm-serve context servers "
                                            "cannot form; use --launch mpi")
    if engine == "dwdp_trtllm" and dims_only:
        raise ConfigError(None, "--engine", f"dwdp_trtllm cannot serve it: {dims_only}; use --engine upstream "
                                            "(NVFP4 only)")
    if dims_only and args.weight_dtype != "nvfp4":  # upstream DWDP runs NVFP4 only (integration/gen_config.py)
        raise ConfigError(None, "--weight-dtype", f"no engine serves it with {args.weight_dtype}: {dims_only}, and "
                                                  "upstream DWDP runs only NVFP4; use --weight-dtype nvfp4 (`dwdp plan` "
                                                  "and plan-placement price it in any dtype)")
    dwdp_kw = dict(dwdp_size=size, num_groups=args.num_groups, num_experts_per_worker=args.num_experts_per_worker,
                   num_prefetch_experts=args.num_prefetch_experts, contention_opt=not args.no_contention_opt)
    if engine == "dwdp_trtllm":
        if args.weight_dtype == "nvfp4":
            raise ConfigError(None, "--weight-dtype", "nvfp4 runs on the upstream engine only; use bf16 or fp8 with dwdp_trtllm")
        # no gemm: the engine's default path is decided on the GPU it runs on (integration/moe_evidence.default_gemm:
        # FP8 block scales on sm_90 multi_buffer, by measurement, else the composite view); the runtime falls back
        # (integration/gemm_choice.py choose_gemm) and logs why
        dwdp_kw.update(weight_dtype=args.weight_dtype)
    try:
        dwdp = DwdpConfig(**dwdp_kw)
        dwdp.validate_for(num_experts, None, prefix="")
    except ConfigError as e:
        src = "--num-experts" if args.num_experts is not None else f"--preset {args.preset or args.model}"
        raise ConfigError(None, "--" + e.key.replace("_", "-"), e.expected.replace(
            "the model's", f"the model's ({src})")) from None
    ctx_servers = args.ctx_servers or dwdp.world_size
    check_ports(args, ctx_servers + args.gen_servers if args.mode == "disaggregated" else 0)
    # engine / dtype / mode combinations are refused before any sizing
    early = gc.Deployment(model=args.model, num_experts=num_experts, dwdp=dwdp, engine=engine, weight_dtype=args.weight_dtype)
    if args.mode != "disaggregated":
        gc.aggregated(early, args.mode)
    sizing = size_servers(args, dwdp, spec, engine)
    ctx_kv = serving.context_kv(args, spec, sizing, isl)  # the context servers first, as they are laid out
    gen = serving.generation(args, spec, sizing, isl, mtp)
    key = serving.mtp_key(args) if mtp else ("max_draft_len", "")
    gen_backend = None
    if args.mode == "disaggregated":
        priced = serving.priced_moe_backend(spec, args.gpu, args.weight_dtype)
        gen_backend = ((priced, f"the fused-MoE kernels `dwdp size` prices its decode steps with "
                                f"(perf/kernel_tables.py, {args.gpu} {args.weight_dtype})") if priced else
                       (early.moe_backend, "the context servers' (no shipped kernel table prices this GPU / model / "
                                           "dtype)"))
    if args.mode == "disaggregated":
        servers = [("context", 1)] * ctx_servers + [("generation", sizing.gen_tp)] * args.gen_servers
    else:
        servers = [("aggregated", dwdp.world_size)]
    try:
        nodes = layout(servers, args.gpus_per_node)
    except ValueError as e:
        # disaggregated: only a generation server can exceed a node; otherwise the one server of dwdp_size x num_groups
        flag = "--gen-tp" if args.mode == "disaggregated" else "--dwdp-size"
        raise ConfigError(None, flag, f"{e} (--gpus-per-node {args.gpus_per_node})") from None
    try:
        hosts = nodes.hosts(tuple(args.hosts.split(",")) if args.hosts else None) if nodes.num_nodes > 1 else (args.hostname,)
    except ValueError as e:
        raise ConfigError(None, "--hosts", str(e)) from None
    d = gc.Deployment(model=args.model, num_experts=num_experts, dwdp=dwdp, engine=engine, ctx_servers=ctx_servers,
                      gen_servers=args.gen_servers, gen_tp=sizing.gen_tp or 1, max_num_tokens=args.max_num_tokens,
                      gen_max_num_tokens=gen.max_num_tokens if gen else args.gen_max_num_tokens,
                      weight_dtype=args.weight_dtype, hostname=hosts[0], port=args.port, isl=isl, mtp=mtp,
                      gen_batch=gen and gen.batch, gen_kv_fraction=gen and gen.kv_fraction,
                      server_hosts=tuple(hosts[s.node] for s in nodes.servers) if nodes.num_nodes > 1 else None,
                      mtp_key=key[0],
                      ctx_batch=ctx_kv.max_batch_size if ctx_kv else (args.ctx_batch or serving.CTX_BATCH),
                      ctx_kv_dtype=args.kv_dtype, ctx_chunked_prefill=args.chunked_prefill,
                      ctx_kv_fraction=ctx_kv and ctx_kv.fraction, gen_moe_backend=gen_backend and gen_backend[0],
                      gen_attn_tp=args.gen_attn_tp, gen_moe_tp=args.gen_moe_tp)
    out = args.out.resolve()
    docs, cmds = files.build(args, d, nodes, hosts, out)  # every document in memory: nothing written yet
    written = files.write_all(out, docs)
    groups = f" x {dwdp.num_groups} groups" if dwdp.num_groups > 1 else ""
    gens = f"{args.gen_servers} generation server{'s' * (args.gen_servers > 1)}"
    head = (f"{nodes.summary()}: " + (f"{ctx_servers} context servers (DWDP{dwdp.dwdp_size}{groups}, 1 GPU each) + {gens} "
            f"of {sizing.gen_tp} GPU{'s' * (sizing.gen_tp > 1)}" if args.mode == "disaggregated"
            else f"one {args.mode} server of {dwdp.world_size} GPUs (DWDP{dwdp.dwdp_size}{groups})")
            + f", {sizing.gpu}, {args.gpus_per_node} GPUs per node")
    storage = serving.storage_line(f"{out} (this folder)", args.model, nodes.num_nodes)
    settings = serving.settings_lines(args, isl, mtp, gen, key=key, ctx_kv=ctx_kv, gen_backend=gen_backend)
    if args.json:
        print(json.dumps({"summary": head, "args": files.argv_of(args), "num_gpus": nodes.num_gpus, "num_nodes": nodes.num_nodes, "hosts": list(hosts),
                          "engine": engine, "gen_tp": sizing.gen_tp, "memory": sizing.to_dict(),
                          "context_kv": ctx_kv and ctx_kv.to_dict(),
                          "isl": isl, "mtp": mtp, "launch": args.launch, "settings": settings, "storage": storage,
                          "nodes": nodes.node_lines(hosts), "written": [str(w) for w in written]}, indent=1))
        return 0
    lines = [head, f"engine: {engine} ({args.weight_dtype}, {num_experts} experts, dwdp_size {dwdp.dwdp_size}{groups})"]
    lines += sizing.lines() + settings + (nodes.node_lines(hosts) if nodes.num_nodes > 1 else []) + [storage]
    lines.append(f"wrote into {out}: " + ", ".join(w.name for w in written))
    for line in lines:
        print("\n".join(text.prose(line)))
    print("launch lines (commands.sh):")
    for c in cmds:
        print("\n".join(text.shell(c)))
    return 0
