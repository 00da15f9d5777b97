"""`dwdp size`: how many GPUs, in which shape, serve this traffic within these
SLOs: DWDP context servers beside DEP and TP ones.

Inputs: the model and GPU (as `dwdp plan`: a preset or config.json, a shipped
GPU or spec file, --calibration files loaded by plan's own code), traffic
(--rate, one or several comma-separated, or --concurrency, with ISL / OSL
distributions; or --trace, a Mooncake-format JSONL file), SLOs (TTFT p50 / p99,
TPS/user), a GPU budget and GPUs per node; the pricing flags `dwdp plan` has
(commands/pricing_flags.py) and MTP. Searches context servers (DWDP group size
and ranks, DEP or TP size and servers; max_num_tokens; redundancy) and, behind
each mode's own context side, generation servers (GPUs, batch, count) by
simulation (dwdp_trtllm/sizing/, docs/SIZING.md) and prints the best deployment
of each mode side by side; none at all exits 1 naming the binding constraint.
`--out DIR` writes the best DWDP deployment with `dwdp gen-config`'s own code
(its parser and run: the same files as the gen-config line printed); `--plot
DIR` writes the TTFT-vs-rate and TPS/GPU-vs-TPS/user plots; `--write-trace
FILE` the generated arrivals (Mooncake format).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from ..deploy import memory as mem
from ..spec.batching import SIZE_CONTEXT_BATCHING
from ..spec.models import PRESETS
from ..spec.schema import ConfigError

from . import pricing_flags as pf
from .size_inputs import _ints, _rates, check_lengths, mtp_setting

DEFAULTS = {"dwdp_size": "2,4,8,16", "dep_size": "4,8,16", "tp_size": "8", "mnt": "8192,16384,32768",
            "gen_tp": "4,8", "gen_batch": "8,16,32,64,128"}


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("size", help="size a disaggregated deployment (DWDP vs DEP context servers) for traffic and SLOs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("model and hardware")
    g.add_argument("--model", default=mem.DEFAULT_MODEL,
                   help=f"model preset ({', '.join(sorted(PRESETS))}) or a config.json (default deepseek-r1)")
    g.add_argument("--gpu", default=mem.DEFAULT_GPU, help="h100 | h200 | b200 | gb200 or a GPU spec file (default h200)")
    g.add_argument("--gpu-memory-gb", type=float, default=None, help="usable GB per GPU (default: the datasheet's)")
    g.add_argument("--weight-dtype", default=mem.DEFAULT_WEIGHT_DTYPE, help="bf16 | fp8 | nvfp4 (default fp8)")
    g.add_argument("--target", choices=("trtllm", "engine"), default="trtllm",
                   help="price context iterations with TensorRT-LLM's kernels (default) or our engine's calibration")
    g.add_argument("--calibration", action="append", default=None,
                   help="calibration JSON or `dwdp bench --floor` results.json, loaded as `dwdp plan --calibration`")
    g.add_argument("--accept-calibration-gpu", action="store_true",
                   help="use a --calibration file measured on another GPU than --gpu (refused otherwise)")
    g = p.add_argument_group("pricing (as `dwdp plan`: one parser, commands/pricing_flags.py)")
    pf.add_all(g)
    g.add_argument("--mtp", type=int, default=None,
                   help="MTP draft tokens per generation step, priced on the generation side and written by --out "
                        "(default: gen-config's: 1 when the checkpoint has an MTP layer, else 0)")
    g.add_argument("--mtp-acceptance", type=float, default=None,
                   help="acceptance rate of each MTP draft token (default 0.85: DeepSeek-V3 Technical Report, "
                        "section 5.4.3, 85-90%% for the second token)")
    g = p.add_argument_group("traffic")
    g.add_argument("--rate", default=None, help="requests/s, Poisson arrivals; several comma-separated: one answer each")
    g.add_argument("--concurrency", type=int, default=None, help="closed loop of this many users")
    g.add_argument("--trace", default=None, help="Mooncake-format JSONL: timestamp (ms), input_length, output_length")
    g.add_argument("--isl", type=int, default=8192, help="mean input length (default 8192)")
    g.add_argument("--isl-dist", default="uniform_ratio", help="fixed | uniform_ratio | normal (default uniform_ratio)")
    g.add_argument("--isl-ratio", type=float, default=0.8, help="uniform_ratio: lengths in [ratio x isl, isl]")
    g.add_argument("--isl-cv", type=float, default=0.0, help="normal: coefficient of variation")
    g.add_argument("--osl", type=int, default=1024, help="mean output length (default 1024)")
    g.add_argument("--osl-dist", default="fixed", help="fixed | uniform_ratio | normal (default fixed)")
    g.add_argument("--osl-ratio", type=float, default=0.8)
    g.add_argument("--osl-cv", type=float, default=0.0)
    g.add_argument("--duration", type=float, default=600.0, help="seconds of traffic (default 600)")
    g.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("SLOs and budget")
    g.add_argument("--ttft-p50", type=float, default=None, help="seconds")
    g.add_argument("--ttft-p99", type=float, default=None, help="seconds")
    g.add_argument("--tps-user", type=float, default=None, help="output tokens/s per user (median)")
    g.add_argument("--gpu-budget", type=int, default=64, help="GPUs at most (default 64)")
    g.add_argument("--gpus-per-node", type=int, default=8)
    g = p.add_argument_group("search space")
    for k, v in DEFAULTS.items():
        extra = " TP context servers (TP attention + EP experts); 0: none" if k == "tp_size" else ""
        g.add_argument("--" + k.replace("_", "-"), default=v, help=f"candidates{extra} (default {v})")
    g.add_argument("--gen-moe-tp", default="1",
                   help="generation servers' MoE tensor parallelism candidates: experts TP x EP (--gen-tp / TP), "
                        "TensorRT-LLM's moe_tensor_parallel_size (default 1: EP only)")
    g.add_argument("--gen-attn-tp", default="1",
                   help="generation servers' attention TP candidates: 1 (attention DP) or a --gen-tp size (attention "
                        "TP over the whole server, enable_attention_dp false) (default 1)")
    g.add_argument("--redundant-experts", default="0", help="DWDP redundancy candidates (default 0)")
    g.add_argument("--kv-gbps", type=float, default=None, help="context -> generation KV bandwidth, GB/s (default 50)")
    g.add_argument("--ctx-max-batch", type=int, default=SIZE_CONTEXT_BATCHING[1],
                   help="requests per context iteration per rank, TensorRT-LLM's max_batch_size (default 0: no limit)")
    g.add_argument("--no-chunked-prefill", dest="chunked_prefill", action="store_false",
                   default=SIZE_CONTEXT_BATCHING[0],
                   help="context servers run whole prompts (TensorRT-LLM's default; MNT >= every ISL)")
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true")
    g.add_argument("--out", default=None, help="write the best DWDP deployment with gen-config's files here")
    g.add_argument("--checkpoint", default=None, help="--out: the checkpoint path gen-config writes (default: the model)")
    g.add_argument("--plot", default=None, help="write ttft_vs_rate.png and pareto.png into this directory")
    g.add_argument("--write-trace", default=None, help="write the generated arrivals (first --rate) as a JSONL trace")
    return p


def plan_spec(args):
    """The planner's PlanSpec for the model / GPU / calibration, built by `dwdp plan`'s own argument handling."""
    from . import plan
    ap = argparse.ArgumentParser()
    plan.add_parser(ap.add_subparsers())
    argv = ["plan", "--model", args.model, "--gpu", args.gpu, "--weight-dtype", args.weight_dtype,
            "--target", args.target]
    if args.gpu_memory_gb is not None:
        argv += ["--gpu-memory-gb", str(args.gpu_memory_gb)]
    for c in args.calibration or ():
        argv += ["--calibration", c]
    if args.accept_calibration_gpu:
        argv.append("--accept-calibration-gpu")
    spec = plan.build_spec(ap.parse_args(argv + pf.plan_argv(args)))
    if len(spec.slice_bytes) != 1:
        raise ConfigError(None, "--slice-bytes", f"expected one slice size for dwdp size (0: unsliced), got "
                                                 f"{args.slice_bytes!r}")
    return spec


def problems(args):
    """(spec, [(rate or None, Problem)]) from the arguments; every refusal names its argument."""
    from ..sizing import traffic as tr
    from ..sizing.metrics import Slo
    from ..sizing.search import DEFAULT_KV_GBPS, Problem

    given = [a for a in ("rate", "concurrency", "trace") if getattr(args, a) is not None]
    if len(given) != 1:
        raise ConfigError(None, "--rate", "give exactly one of --rate (requests/s), --concurrency (users) or --trace "
                                          f"(a Mooncake-format JSONL file); got {', '.join('--' + g for g in given) or 'none'}")
    slo = Slo(args.ttft_p50, args.ttft_p99, args.tps_user)
    slo.check()
    if not 1 <= args.gpu_budget <= 4096:
        raise ConfigError(None, "--gpu-budget", f"expected GPUs in [1, 4096], got {args.gpu_budget}")
    if not 1 <= args.gpus_per_node <= 64:
        raise ConfigError(None, "--gpus-per-node", f"expected an integer in [1, 64], got {args.gpus_per_node}")
    kv = DEFAULT_KV_GBPS if args.kv_gbps is None else args.kv_gbps
    if not 0 < kv <= 1e4:
        raise ConfigError(None, "--kv-gbps", f"expected GB/s in (0, 10000], got {kv}")
    space = dict(dwdp_sizes=_ints(args.dwdp_size, "--dwdp-size", 1, 256), dep_sizes=_ints(args.dep_size, "--dep-size", 1, 256),
                 mnts=_ints(args.mnt, "--mnt", 256, 1 << 20), gen_tps=_ints(args.gen_tp, "--gen-tp", 1, 64),
                 gen_batches=_ints(args.gen_batch, "--gen-batch", 1, 4096),
                 redundant=_ints(args.redundant_experts, "--redundant-experts", 0, 256),
                 gen_moe_tps=_ints(args.gen_moe_tp, "--gen-moe-tp", 1, 64),
                 gen_attn_tps=_ints(args.gen_attn_tp, "--gen-attn-tp", 1, 64))
    wide = [t for t in space["gen_tps"] if t > args.gpus_per_node]
    if wide:  # a generation server is one node (gen-config lays servers out without straddling nodes)
        raise ConfigError(None, "--gen-tp", f"generation servers of at most --gpus-per-node {args.gpus_per_node} GPUs, "
                                            f"got {', '.join(map(str, wide))}")
    space["tp_sizes"] = tuple(t for t in _ints(args.tp_size, "--tp-size", 0, 256) if t)
    isl = tr.LengthDist(args.isl, args.isl_dist, args.isl_ratio, args.isl_cv)
    osl = tr.LengthDist(args.osl, args.osl_dist, args.osl_ratio, args.osl_cv)
    span = None
    if args.trace is not None:
        arrs = [(None, tr.read_trace(args.trace))]
    elif args.concurrency is not None:
        arrs = [(None, tr.generate(tr.Traffic(isl, osl, concurrency=args.concurrency, duration_s=args.duration,
                                              seed=args.seed)))]
    else:
        rates = _rates(args.rate)
        for r in rates:
            tr.Traffic(isl, osl, rate=r, duration_s=args.duration, seed=args.seed).check()
            if r * args.duration < 1:  # the simulation needs at least one request inside the traffic's span
                raise ConfigError(None, "--rate", f"at least one request in --duration {args.duration:g} s: expected "
                                                  f"--rate >= {1 / args.duration:.3g} requests/s, got {r:g}")
        arrs = [(r, tr.generate(tr.Traffic(isl, osl, rate=r, duration_s=args.duration, seed=args.seed)))
                for r in rates]
        span = float(args.duration)
    spec = plan_spec(args)
    for _, a in arrs:
        check_lengths(args, spec.model, a)
    if space["tp_sizes"] and spec.tables is None and args.tp_size == DEFAULTS["tp_size"]:
        space["tp_sizes"] = ()  # the default TP option needs the kernel tables: left out, said in the notes
    if space["tp_sizes"]:
        from ..sizing.tp_cost import check_tp
        check_tp(spec)
    if not 0 <= args.ctx_max_batch <= 4096:
        raise ConfigError(None, "--ctx-max-batch", f"expected requests in [0, 4096] (0: no limit), got "
                                                   f"{args.ctx_max_batch}")
    if not args.chunked_prefill:
        longest = max([int(a.isl.max()) for _, a in arrs if len(a)] + ([args.isl] if args.trace is None else []))
        if min(space["mnts"]) < longest:
            raise ConfigError(None, "--mnt", f"every MNT at least the longest ISL ({longest:,}) with "
                                             f"--no-chunked-prefill, got {args.mnt}")
    extra = dict(dep_variant=args.dep or "trtllm", slice_bytes=spec.slice_bytes[0], span_s=span,
                 ctx_max_batch=args.ctx_max_batch, chunked=args.chunked_prefill)
    return spec, [(r, Problem(spec, a, slo, args.gpu_budget, args.gpus_per_node, kv_gbps=kv, **space, **extra))
                  for r, a in arrs]


def gen_config_argv(args, d, min_isl: int | None = None) -> list[str]:
    """`dwdp gen-config`'s arguments for deployment `d` (a DWDP one); `min_isl`: the shortest prompt of the traffic
    it was sized for (without --ctx-max-batch the context servers' max_batch_size is what its iterations held)."""
    argv = ["gen-config", "--mode", "disaggregated", "--model", args.checkpoint or args.model,
            "--preset", args.model, "--weight-dtype", args.weight_dtype, "--dwdp-size", str(d.ctx_group),
            "--num-groups", str(d.ctx_servers // d.ctx_group), "--ctx-servers", str(d.ctx_servers),
            "--gen-servers", str(d.gen_servers), "--gen-tp", str(d.gen_tp), "--max-num-tokens", str(d.mnt),
            "--gpu", args.gpu, "--gpus-per-node", str(args.gpus_per_node),
            # the generation side as it was sized: its batch per rank, the traffic's output length, its MTP draft
            # tokens (priced by decode_cost), so the files deploy what the simulation ran
            "--gen-batch", str(d.gen_batch), "--osl", str(args.osl), "--mtp", str(mtp_setting(args, PRESETS.get(
                args.model) or _dims(args))[0])]
    if d.gen_attn_tp != 1 or d.gen_moe_tp != 1:  # the generation server's parallel shape, as priced
        argv += ["--gen-attn-tp", str(d.gen_attn_tp), "--gen-moe-tp", str(d.gen_moe_tp)]
    from .plan import size_list
    if size_list(args.slice_bytes, "--slice-bytes")[0] == 0:
        argv.append("--no-contention-opt")  # unsliced copies, as sized
    if args.gpu_memory_gb is not None:
        argv += ["--gpu-memory-gb", str(args.gpu_memory_gb)]
    if args.ctx_max_batch:  # the context servers' max_batch_size, as sized
        argv += ["--ctx-batch", str(args.ctx_max_batch)]
    elif min_isl:  # no cap was priced: as many requests as one iteration of MNT tokens can hold
        from ..spec.batching import max_requests_per_iteration
        argv += ["--ctx-batch", str(max_requests_per_iteration(d.mnt, int(min_isl), d.chunked))]
    if d.chunked:  # chunked prefill, as sized (gen-config writes whole prompts otherwise)
        argv.append("--chunked-prefill")
    return argv


def _dims(args):
    from ..spec.model_dims import dims_from_config_json
    return dims_from_config_json(args.model)


def write_deployment(args, d, out: str, min_isl: int | None = None) -> tuple[list[str], str]:
    """Write deployment `d` with gen-config's parser and run (one code path); the gen-config line it ran and what
    gen-config printed. min_isl: gen_config_argv's."""
    import contextlib
    import io

    from ..cli import build_parser
    if d.redundant:
        raise ConfigError(None, "--out", "gen-config writes derived placements only; rerun with --redundant-experts 0")
    argv = gen_config_argv(args, d, min_isl) + ["--out", out]
    ns = build_parser().parse_args(argv)
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        ns._run(ns)
    return argv, said.getvalue()


class _StageLines:
    """Progress where stderr is not a terminal (a log file, a pipe, CI), where rich draws nothing: one plain line
    on stderr each time the search moves to another stage (the text before a tick's first ':', e.g. "DWDP context",
    "DEP generation"), prefixed [n]: the candidates simulated so far; at most 80 columns. Counted, never timed."""

    def __init__(self):
        self.stage, self.done = None, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None and self.done:
            self._line(f"dwdp size: searched, {self.done} simulated")
        return False

    def tick(self, what: str) -> None:
        self.done += 1
        stage = what.split(":")[0]
        if stage != self.stage:
            self.stage = stage
            self._line(f"dwdp size [{self.done}]: {what}")

    @staticmethod
    def _line(text: str) -> None:
        from .terminal import MAX_WIDTH
        text = text if len(text) <= MAX_WIDTH else text[:MAX_WIDTH - 3] + "..."
        print(text, file=sys.stderr, flush=True)  # sys.stderr looked up now: redirections apply


def _progress():
    """Progress on stderr while the search runs, and the callback that advances it: a rich progress line on a
    terminal (transient: gone when it ends), else _StageLines' plain lines."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    con = Console(stderr=True)
    if not con.is_terminal:
        lines = _StageLines()
        return lines, lines.tick
    prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed} simulated"),
                    TimeElapsedColumn(), console=con, transient=True)
    task = prog.add_task("dwdp size", total=None)

    def tick(what: str) -> None:
        prog.update(task, description=f"dwdp size: {what}"[:60], advance=1)
    return prog, tick


def notes_lines(spec, probs, dc) -> list[str]:
    """What the numbers assume: pricing, the plan's inputs line (measured / given / prior), MTP, KV transfer."""
    from ..perf import inputs
    from ..sizing.tp_cost import ROWS as TP_ROWS
    p = probs[0][1]
    out = [f"priced: context iterations {spec.priced_as} (the planner, `dwdp plan`), DEP as --dep "
           f"{p.dep_variant}, DWDP copies {'unsliced' if p.slice_bytes == 0 else f'in {p.slice_bytes:,}-byte slices'}"
           f" (--slice-bytes); decode steps TensorRT-LLM's generation rows ({spec.gpu.name}"
           f"{'' if dc.routing == 'balanced' else ', routed experts at their ' + dc.routing + ' rows'}"
           f"), {dc.describe_mtp()}; "
           "not priced: CUDA-graph batch padding, host gaps between steps",
           inputs.line(spec)]
    if p.tp_sizes:
        out.append(TP_ROWS)
    elif spec.tables is None:
        out.append(f"TP context servers: not compared (priced from TensorRT-LLM's kernel tables, none for "
                   f"--target {spec.target} here)")
    out.append(f"KV transfer at {p.kv_gbps:g} GB/s per request (--kv-gbps); [low-high]: the nominal and the "
               "planner's uncertain inputs at DWDP's worse / better end")
    from ..integration.gen_config import CTX_BATCH
    from ..spec.batching import describe_context_batching
    out.append(f"context batching priced: {describe_context_batching(p.chunked, p.ctx_max_batch)} "
               f"(--no-chunked-prefill, --ctx-max-batch); gen-config run alone writes "
               f"{describe_context_batching(False, CTX_BATCH)}, --out writes what was priced")
    return out


def run(args) -> int:
    from ..deploy.out_path import check_out_dir, check_out_file
    from ..sizing import report, search as se
    from ..sizing.decode_cost import decode_cost, stated_pricing
    from ..sizing.traffic import write_trace

    for flag in ("out", "plot"):
        if getattr(args, flag) is not None:
            check_out_dir(getattr(args, flag), f"--{flag}")
    if args.write_trace is not None:  # checked before the search, which can take minutes
        if args.rate is None:
            raise ConfigError(None, "--write-trace", "writes generated Poisson arrivals: give --rate (a closed loop "
                                                     "or a --trace has none to write)")
        check_out_file(args.write_trace, "--write-trace")
    t0 = time.monotonic()
    spec, probs = problems(args)
    mtp, acc = mtp_setting(args, spec.model)
    dc = decode_cost(spec.model, spec.gpu.name, spec.weight_dtype, mtp, acc, **stated_pricing(spec))
    for _, p in probs:  # a generation shape the tables cannot price is refused before the minutes of search
        se.gen_shapes(p, dc)
    if args.write_trace:
        write_trace(probs[0][1].arrivals, args.write_trace)
    prog, tick = _progress()
    probs = [(r, dataclasses.replace(p, progress=tick)) for r, p in probs]
    with prog:
        results = [(r, p, se.search(p, dc)) for r, p in probs]
        pareto, ctxs = {}, {}
        if args.plot:  # the Pareto behind each mode's best context side at the highest rate
            _, p, out = results[-1]
            ctxs = {m: o.deployment for m, o in out.items() if o.deployment is not None}
            pareto = {m: se.pareto(p, d, dc) for m, d in ctxs.items()}
    notes = notes_lines(spec, probs, dc)
    notes.append(searched_sizes_note(probs[0][1]))
    written, said = None, ""
    best = results[0][2]["dwdp"].deployment
    if args.out and best is not None:
        written, said = write_deployment(args, best, args.out, int(results[0][1].arrivals.isl.min()))
    elapsed = time.monotonic() - t0
    if args.json:
        print(json.dumps({"runs": [{"rate": r, "traffic": p.arrivals.label, "slo": report.slo_text(p.slo),
                                    "budget": p.budget, **report.to_dict(out)} for r, p, out in results],
                          "notes": notes, "mtp": {"draft_tokens": mtp, "acceptance": acc},
                          "gen_config": written,
                          "gen_config_output": said.splitlines(), "seconds": round(elapsed, 2)}, indent=1))
    else:
        for r, p, out in results:
            for line in (f"{spec.model.name} {spec.weight_dtype} on {spec.gpu.name}: {p.arrivals.label}",
                         f"{report.slo_text(p.slo)}; budget {p.budget} GPUs, {p.gpus_per_node} per node"):
                print("\n".join(report.wrap(line, 80)))
            print(report.table(p, out))
            print()
        for n in notes:
            print("\n".join(report.wrap(n, 80)))
        if written:
            print("\n".join(report.wrap("wrote the DWDP deployment with: dwdp " + " ".join(written), 80)))
            print(said, end="")
        elif args.out:
            print("\n".join(report.wrap("--out: nothing written: no DWDP deployment meets the SLOs ("
                                         f"{results[0][2]['dwdp'].why_none})", 80)))
        if args.out and any(o.deployment is not None for k, o in results[0][2].items() if k != "dwdp"):
            print("\n".join(report.wrap("--out writes DWDP context servers (gen-config's); a DEP or TP deployment "
                                         "above is not written", 80)))
        print(f"searched in {elapsed:.1f} s")
    if args.plot:
        d = Path(args.plot)
        d.mkdir(parents=True, exist_ok=True)
        report.plot_rates([(r, out) for r, _, out in results if r is not None], d / "ttft_vs_rate.png",
                          probs[0][1].slo)
        rate = results[-1][0]
        report.plot_pareto(pareto, d / "pareto.png", f"{spec.model.name} {spec.weight_dtype} on {spec.gpu.name}"
                           + (f", {rate:g} req/s" if rate is not None else ""), probs[0][1].slo,
                           report.shared_note(pareto, ctxs))
    found = [o for _, _, out in results for o in out.values() if o.deployment is not None]
    if not found:  # nothing deployable: exit non-zero naming what binds
        r, _, out = results[0]
        at = f" at {r:g} req/s" if r is not None else ""
        lines = [f"dwdp size: no deployment meets the SLOs{at}:"]
        for k, o in out.items():
            lines += report.wrap(f"{report.LABELS[k]}: {o.why_none}", 78)
        print("\n  ".join(lines), file=sys.stderr)
        return 1
    return 0


def searched_sizes_note(p) -> str:
    """The context server sizes the search tried (Problem.dwdp_sizes / dep_sizes): why a deployment here can hold more
    GPUs than `dwdp plan-placement`'s smallest count that fits, which counts any GPU number."""
    return (f"context servers searched: DWDP groups of {', '.join(map(str, p.dwdp_sizes))} GPUs, DEP servers of "
            f"{', '.join(map(str, p.dep_sizes))} GPUs (--dwdp-size, --dep-size); `dwdp plan-placement` gives the "
            "smallest GPU count that fits, any count")
