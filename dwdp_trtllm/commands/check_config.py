"""`dwdp check-config FILE...`: before launch, one verdict per TensorRT-LLM server of a deployment's YAML files.

Reads extra-llm-api YAML files (one server each) and disaggregated YAML files (context_servers / generation_servers),
as TensorRT-LLM does (integration/server_configs.py), and for every server prints within 80 columns: what the
serving-feature matrix refuses (context servers, engine dwdp_trtllm: the check its ModelLoader runs first), the
rank's memory (deploy/memory.rank_memory), what TensorRT-LLM would give its KV cache and whether it holds what the
server needs (integration/config_check.py), and a verdict. Exit 2 when a server would fail at load (refused, or
does not fit) or an argument / file is bad (one line naming it); 0 when every server loads.
"""
from __future__ import annotations

from .terminal import paragraphs

from ..byte_units import fmt_bytes

import argparse
import json
from pathlib import Path

from ..deploy import memory as mem
from ..spec.schema import ConfigError
from .deploy_args import add_gpu_args, gpu_budget_bytes, gpu_label

#: the most ranks a --dwdp-size may name (memory.MAX_DWDP_SIZE, the planner's largest group)
MAX_DWDP_SIZE = mem.MAX_DWDP_SIZE


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("check-config", help="check TensorRT-LLM server YAML files before launch: refusals, KV, fit",
                       description=paragraphs(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="extra-llm-api or disaggregated YAML files; a plain file is a generation server when its "
                        "name holds 'gen', else a context server (--ctx / --gen say otherwise)")
    p.add_argument("--ctx", action="append", default=[], metavar="FILE", help="also check FILE as a context server")
    p.add_argument("--gen", action="append", default=[], metavar="FILE", help="also check FILE as a generation server")
    p.add_argument("--model", default=mem.DEFAULT_MODEL,
                   help="the model's dims: a preset (deepseek-r1, ...), a config.json or a checkpoint directory "
                        f"(default {mem.DEFAULT_MODEL})")
    p.add_argument("--weight-dtype", choices=mem.WEIGHT_DTYPES, default=mem.DEFAULT_WEIGHT_DTYPE,
                   help=f"the checkpoint's weight format (default {mem.DEFAULT_WEIGHT_DTYPE})")
    add_gpu_args(p, what="every server")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--dwdp", metavar="FILE", help="the DWDP_TRTLLM_CONFIG file of the context servers (their group)")
    g.add_argument("--dwdp-size", type=int, help="ranks per DWDP group of the context servers (no --dwdp file)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of the text")
    return p


def _spec(model: str):
    from ..spec.model_dims import dims_from_config_json, is_config_path
    from ..spec.models import PRESETS

    if model in PRESETS:
        return PRESETS[model]
    path = Path(model)
    if path.is_dir() and (path / "config.json").is_file():
        return dims_from_config_json(path / "config.json")
    if is_config_path(model) and path.is_file():
        return dims_from_config_json(path)
    raise ConfigError(None, "--model", f"expected a preset ({', '.join(sorted(PRESETS))}), a config.json or a "
                                       f"checkpoint directory holding one, got {model!r}")


def _group(args):
    """(DwdpConfig or None, where it came from, the engine the --dwdp file names or None)."""
    from ..spec.config import DwdpConfig

    if args.dwdp is not None:
        from ..integration.settings import load_integration_config
        cfg = load_integration_config(args.dwdp)
        return cfg.dwdp, f"--dwdp {args.dwdp}", cfg.engine
    if args.dwdp_size is not None:
        if not 1 <= args.dwdp_size <= MAX_DWDP_SIZE:
            raise ConfigError(None, "--dwdp-size", f"expected an integer in [1, {MAX_DWDP_SIZE}], got {args.dwdp_size}")
        return DwdpConfig(dwdp_size=args.dwdp_size), f"--dwdp-size {args.dwdp_size}", None
    return None, "", None


def run(args) -> int:
    from ..integration.config_check import check_server
    from ..integration.moe_evidence import priced_gemm
    from ..integration.server_configs import read_servers
    from .gen_config import TRTLLM_DEFAULT_MAX_NUM_TOKENS

    if not (args.files or args.ctx or args.gen):
        raise ConfigError(None, "FILE", "expected at least one YAML file (or --ctx FILE / --gen FILE)")
    spec = _spec(args.model)
    gpu_bytes, gpu = gpu_budget_bytes(args.gpu, args.gpu_memory_gb), gpu_label(args.gpu)
    dwdp, dwdp_from, engine = _group(args)
    if engine == "upstream":
        raise ConfigError(args.dwdp, "engine", "check-config checks context servers for engine dwdp_trtllm (the "
                                               "Hopper engine); this file names engine: upstream")
    if dwdp is not None:
        dwdp.validate_for(spec.num_experts, None, file=args.dwdp, prefix="dwdp_config")
    gemm, _ = priced_gemm(args.weight_dtype, args.gpu)
    servers = [s for f in args.files for s in read_servers(f)]
    servers += [s for f in args.ctx for s in read_servers(f, "context")]
    servers += [s for f in args.gen for s in read_servers(f, "generation")]
    verdicts = [check_server(s, spec=spec, gpu_bytes=gpu_bytes, weight_dtype=args.weight_dtype,
                             default_max_num_tokens=TRTLLM_DEFAULT_MAX_NUM_TOKENS, dwdp=dwdp, gemm=gemm,
                             dwdp_from=dwdp_from) for s in servers]
    failed = [v for v in verdicts if not v.loads]
    if args.json:
        print(json.dumps({"model": spec.name, "weight_dtype": args.weight_dtype, "gpu": gpu,
                          "gpu_gb": mem.gb(gpu_bytes), "servers": [v.to_dict() for v in verdicts],
                          "loads": not failed}, indent=2))
        return 2 if failed else 0
    print(f"{spec.name}, {args.weight_dtype} weights, {gpu} ({fmt_bytes(gpu_bytes, digits=None)} per GPU); "
          f"{len(verdicts)} server kind(s)")
    for v in verdicts:
        print()
        print("\n".join(v.lines()))
    print()
    print(f"{len(failed)} of {len(verdicts)} server kind(s) would fail at load" if failed else
          "every server would load")
    return 2 if failed else 0
