"""`dwdp calibrate`: measure on this node what `dwdp plan` assumes and write one calibration file (docs/CALIBRATION.md).

    dwdp calibrate [--out FILE] [--quick] [--gpus N] [--device cuda|cpu] [--model PRESET] [--gemm PATH] [--dwdp-size G]

On 2-8 GPUs it measures peer pulls (per pair, sliced and unsliced, many-to-one, the whole group at once), copies
beside each compute phase, one GPU's kernels at the planned shapes (and the whole routed-expert op a DWDP rank runs:
the `moe_op` record `dwdp plan` prices DWDP's experts with) and DEP's dispatch all-to-all (NCCL); on one GPU
the peer and all-to-all inputs stay priors and the file says so. `--device cpu` runs the same pipeline as a functional
check: its file is labelled "CPU: functional, not a calibration" and `dwdp plan --calibration` refuses it; a
model whose MoE layer this host cannot hold, or fill within 10 minutes, is refused before anything runs
(calibrate/footprint.py), naming the presets that fit.
The file is written only when every step finished (atomically: Ctrl-C or a failing step leaves no file).
"""
from __future__ import annotations

from .terminal import paragraphs

import argparse

from ..spec.models import PRESETS
from ..spec.schema import ConfigError

#: the largest node dwdp calibrate measures (one HGX board)
MAX_GPUS = 8
#: the engine's expert paths the whole routed-expert op is timed on (perf/moe_op.GEMMS; engine/moe_compute.PLUGIN_PATHS)
GEMMS = ("multi_buffer", "composite_view", "merge")
#: the DWDP group whose rank's buffers the op reads by default (the flagship 8-GPU group)
DEFAULT_DWDP_SIZE = 8


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("calibrate", help="measure this node's peer copies, interference, kernels and DEP "
                                                "all-to-all; write a calibration file for dwdp plan",
                              description=paragraphs(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="calibration.json", help="the calibration file to write (default calibration.json)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (one token count, two slice sizes)")
    p.add_argument("--gpus", type=int, default=None,
                   help=f"GPUs to use, 1-{MAX_GPUS}: cuda:0..N-1 of CUDA_VISIBLE_DEVICES (default: all visible, at "
                        f"most {MAX_GPUS}; --device cpu: 2 logical ranks)")
    p.add_argument("--device", default="cuda", help="cuda (a calibration) or cpu (a functional check of the pipeline)")
    p.add_argument("--model", default=None, help=f"shapes to measure at: a preset ({', '.join(sorted(PRESETS))}) "
                                                 "(default deepseek-r1; --device cpu: tiny)")
    p.add_argument("--gemm", default=None, help=f"the expert path the whole routed-expert op is timed on: "
                                                f"{' | '.join(GEMMS)} (default: the TensorRT-LLM adapter's for the "
                                                "weights and GPU, moe_evidence.default_gemm: multi_buffer for fp8 on "
                                                "sm_90; --device cpu: composite_view)")
    p.add_argument("--dwdp-size", type=int, default=DEFAULT_DWDP_SIZE,
                   help="G of the DWDP group whose rank 0's [local | slot] buffers the op reads (default "
                        f"{DEFAULT_DWDP_SIZE}: 32 local + 224 slot experts of DeepSeek-R1)")
    return p


def op_args(args, device: str, spec) -> dict:
    """run_calibration's gemm, dwdp_size and command for the whole routed-expert op; a bad --gemm / --dwdp-size
    raises ConfigError naming it. Default gemm: moe_evidence.default_gemm for the run's main weight dtype (fp8 on
    CUDA, bf16 on the CPU) and the GPU's compute capability."""
    if args.gemm is not None and args.gemm not in GEMMS:
        raise ConfigError(None, "--gemm", f"expected one of {', '.join(GEMMS)}, got {args.gemm!r}")
    if not 1 <= args.dwdp_size <= spec.num_experts:
        raise ConfigError(None, "--dwdp-size", f"expected an integer in [1, {spec.num_experts}] ({spec.name}'s "
                                               f"experts), got {args.dwdp_size}")
    gemm = args.gemm
    if gemm is None:
        from ..integration.moe_evidence import default_gemm
        sm = None
        if device == "cuda":
            import torch
            major, minor = torch.cuda.get_device_capability(0)
            sm = major * 10 + minor
        gemm = default_gemm("fp8" if device == "cuda" else "bf16", sm)
    cmd = ["dwdp calibrate", f"--device {device}", f"--model {spec.name}", f"--gemm {gemm}",
           f"--dwdp-size {args.dwdp_size}"] + (["--quick"] if args.quick else []) + (
        [f"--gpus {args.gpus}"] if args.gpus is not None else [])
    return {"gemm": gemm, "dwdp_size": args.dwdp_size, "command": " ".join(cmd)}


def check_args(args) -> tuple[str, int, object]:
    """(device, gpus, ModelSpec) from the arguments; a bad one raises ConfigError naming its flag."""
    if args.device not in ("cuda", "cpu"):
        raise ConfigError(None, "--device", f"expected cuda or cpu, got {args.device!r}")
    model = args.model or ("deepseek-r1" if args.device == "cuda" else "tiny")
    if model not in PRESETS:
        raise ConfigError(None, "--model", f"expected one of {', '.join(sorted(PRESETS))}, got {model!r}")
    if args.gpus is not None and not 1 <= args.gpus <= MAX_GPUS:
        raise ConfigError(None, "--gpus", f"expected an integer in [1, {MAX_GPUS}], got {args.gpus}")
    if args.device == "cpu":
        return "cpu", args.gpus or 2, PRESETS[model]
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        raise ConfigError(None, "--device", "cuda: no CUDA device is visible (torch.cuda.is_available() is False); "
                                            "run on the GPU node, or --device cpu for a functional check")
    if args.gpus is not None and args.gpus > visible:
        raise ConfigError(None, "--gpus", f"{args.gpus} GPUs asked, {visible} visible (CUDA_VISIBLE_DEVICES)")
    return "cuda", args.gpus or min(visible, MAX_GPUS), PRESETS[model]


def check_cpu_model(spec, ranks: int) -> str:
    """--device cpu: raise ConfigError naming --model when this host cannot hold or fill the run's buffers in
    reasonable time (calibrate/footprint.py); else the estimate the header prints."""
    from ..calibrate import footprint
    from ..deploy.host_resources import host_available

    available, why = host_available()
    bps = footprint.fill_rate()
    refusal = footprint.cpu_refusal(spec, ranks, available, why, bps, PRESETS)
    if refusal is not None:
        raise ConfigError(None, "--model", refusal)
    fp = footprint.cpu_footprint(spec, ranks)
    return f"fills at least {footprint.size(fp.filled_bytes)}: {footprint.duration(footprint.seconds(fp, bps))} here"


def run(args, tools=None) -> int:
    """tools: calibrate.pipeline.Tools (the tests' fakes); None = the real devices."""
    from rich.console import Console

    from ..calibrate.pipeline import StepFailed, real_tools, run_calibration, shapes_for, slice_text, write_file
    from ..deploy.out_path import check_out_file
    from ..perf.calibration_detail import FUNCTIONAL

    device, gpus, spec = check_args(args)
    out = check_out_file(args.out, "--out", suffixes=(".json",))
    estimate = check_cpu_model(spec, gpus) if device == "cpu" and tools is None else None
    op = op_args(args, device, spec)
    shapes = shapes_for(device, args.quick, spec)
    tools = tools or real_tools(device, gpus, spec, shapes.reps)
    con = Console(highlight=False, soft_wrap=True)
    what = f"{gpus} logical rank(s) on the CPU: {FUNCTIONAL}" if device == "cpu" else f"{gpus} GPU(s)"
    con.print(f"dwdp calibrate: {what}; {spec.name} shapes, {'quick' if args.quick else 'full'} "
              f"(tokens {list(shapes.tokens)}, ISLs {list(shapes.isls)}, slices {slice_text(shapes.slice_sizes)})"
              + (f"; {estimate}" if estimate else ""))

    live = []  # the running step's spinner (a terminal only; piped output gets the lines alone)

    def progress(i: int, n: int, name: str, seconds: float | None) -> None:
        while live:
            live.pop().stop()
        con.print(f"[{i}/{n}] {name} ..." if seconds is None else f"[{i}/{n}] {name}: done in {seconds:.1f} s")
        if seconds is None and con.is_terminal:
            live.append(con.status(f"measuring: {name}"))
            live[-1].start()
    try:
        data = run_calibration(tools, spec, shapes, device, gpus, progress, **op)
    except StepFailed as e:
        con.print(f"dwdp calibrate: measurement failed in step {e}; nothing written to {out}")
        return 1
    finally:
        while live:
            live.pop().stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    write_file(out, data)
    prov = data["provenance"]
    measured = sorted(k for k, v in prov.items() if "measured" in v)
    priors = sorted(k for k, v in prov.items() if "prior" in v)
    con.print(f"{'measured' if device == 'cuda' else 'ran (functional only)'}: {', '.join(measured) or 'nothing'}")
    for k in priors:
        con.print(f"prior: {k} ({prov[k]['why']})")
    tail = f" ({FUNCTIONAL}: dwdp plan refuses it)" if device == "cpu" else f"; use it: dwdp plan --calibration {out}"
    con.print(f"wrote {out}{tail}")
    return 0
