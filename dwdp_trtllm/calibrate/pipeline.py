"""`dwdp calibrate`'s run: the steps for this node (what it can measure, what stays a prior and why), run in order
with progress, assembled into one calibration file (perf/calibration.py, schema 2) and written atomically.

The steps take their tools (copy timer, kernel timer, all-to-all timer, machine record) from a `Tools`, so the
whole pipeline runs on CPU with fakes in the tests; `real_tools` builds the ones that touch the devices. A step that
fails, or Ctrl-C, stops the run before anything is written: the file appears whole or not at all.
"""
from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import env
from ..byte_units import fmt_bytes
from ..core.expert_buffers import expert_layout
from ..spec.models import ModelSpec
from ..perf.calibration_detail import FUNCTIONAL, SCHEMA_VERSION
from ..perf.uncertainty import PRIOR_SOURCES
from . import dep_comm, interference, kernels, moe_op, peer

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
#: dispatch activations' bytes per element (FP8: `dwdp plan`'s default --dispatch-dtype; combine is BF16)
DISPATCH_BYTES = 1.0
#: the longest interference pull of --quick (the full run's: interference.MAX_PULL_BYTES)
QUICK_MAX_PULL_BYTES = 2 * GiB


@dataclass(frozen=True)
class Shapes:
    """The sizes measured: the planner's token counts, ISLs and slice sizes (fewer with --quick)."""

    tokens: tuple[int, ...]  # tokens per rank entering a layer (kernels, DEP dispatch at the last)
    isls: tuple[int, ...]  # one request's length (attention)
    slice_sizes: tuple[int, ...]  # copy slice sizes, 0 = one op per run (unsliced)
    pull_bytes: int  # bytes of one pair / many-to-one / interference pull
    max_pull_bytes: int  # the longest pull beside one compute call (interference)
    memory_bytes: int  # bytes of each operand of the memory-bound kernel (HBM, interference)
    group_experts: int  # routed experts of the group pull's layer
    reps: int
    moe_tokens: tuple[int, ...] = ()  # tokens per call of the whole routed-expert op (calibrate/moe_op.py)


def shapes_for(device: str, quick: bool, spec: ModelSpec) -> Shapes:
    if device == "cpu":  # a functional check: tiny sizes, the same code paths
        return Shapes((64, 128), (64, 128), (0, 64 * KiB), 1 * MiB, 4 * MiB, 1 * MiB, spec.num_experts, 2, (64, 128))
    if quick:
        return Shapes((8192,), (4096, 8192), (0, 2 * MiB), 256 * MiB, QUICK_MAX_PULL_BYTES,
                      interference.MEMORY_BOUND_BYTES, min(spec.num_experts, 64), 3, (8192, 16384))
    return Shapes((4096, 8192, 16384), (2048, 4096, 8192, 16384), (0, 512 * KiB, 2 * MiB, 8 * MiB), 1 * GiB,
                  interference.MAX_PULL_BYTES, interference.MEMORY_BOUND_BYTES, spec.num_experts, 5,
                  (4096, 8192, 16384, 32768))


def slice_text(sizes: tuple[int, ...]) -> str:
    """Slice sizes as a user reads them ('unsliced, 0.5 MiB, 2 MiB'): 0 is one op per run."""
    return ", ".join("unsliced" if s == 0 else fmt_bytes(s, "MiB", digits=None) for s in sizes)


@dataclass(frozen=True)
class Tools:
    """What the steps measure with; fakes in the tests (tests/unit/test_calibrate.py)."""

    copy_timer: Callable[[], object]  # -> calibrate.copy_timer.CopyTimer on the run's ranks
    floor_timer: Callable[[str], object]  # weight dtype -> bench.floor_timer.FloorTimer on rank 0 (FP8 linear layers
    #                                       with fp8: the planned checkpoint's projections)
    a2a_timer: object  # calibrate.dep_comm.A2aTimer
    machine: Callable[[], dict]  # -> measured_on
    deepep: bool = False  # deep_ep importable
    trtllm: bool = False  # tensorrt_llm importable (found, not imported: only integration/trtllm/ imports it)
    memory_bound: Callable = interference.memory_bound_fn  # (device, bytes) -> the memory-bound kernel's closure
    #: (weight dtype, gemm, dwdp_size) -> calibrate/moe_op.MoeOpTimer of the whole routed-expert op; None: not timed
    moe_op: Callable | None = None
    commit: Callable[[], str] = lambda: code_commit()  # the package's commit (the moe_op record's source)
    #: gemm -> why the op timed here would not run the deployment's kernels ("" when it would): the record must
    #: describe the op a DWDP rank runs, not the torch reference the engine falls back to without dwdp ops
    moe_op_blocked: Callable[[str], str] = lambda gemm: ""


def real_tools(device: str, gpus: int, spec: ModelSpec, reps: int) -> Tools:
    import torch

    from ..bench.floor_timer import FloorTimer
    from .copy_timer import SchedulerCopyTimer
    from .machine import read_machine

    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    def moe_op_timer(wd, gemm, group):
        from .moe_op_timer import EngineMoeOp
        ft = FloorTimer(spec, torch.bfloat16, wd, dev, reps=reps)  # its time_ms: CUDA events, median after warm-up
        return EngineMoeOp(spec, wd, gemm, group, dev, ft.time_ms)

    def moe_op_blocked(gemm: str) -> str:
        from ..ops.grouped_gemm import why_unavailable
        if device != "cuda" or gemm not in OPS_PATHS:
            return ""
        why = why_unavailable()
        return f"dwdp ops unavailable here ({why}): gemm {gemm} would run the torch reference" if why else ""

    return Tools(copy_timer=lambda: SchedulerCopyTimer(device, gpus, reps=reps), moe_op=moe_op_timer,
                 moe_op_blocked=moe_op_blocked,
                 floor_timer=lambda wd: FloorTimer(spec, torch.bfloat16, wd, dev, reps=reps, fp8_linear=wd == "fp8"),
                 a2a_timer=dep_comm.SpawnA2aTimer(device, reps=reps),
                 machine=lambda: read_machine(device, gpus), deepep=dep_comm.deepep_installed(),
                 trtllm=importlib.util.find_spec("tensorrt_llm") is not None)


@dataclass(frozen=True)
class Step:
    name: str
    how: str  # provenance: what ran
    run: Callable[[], dict]  # -> {file key: value}


#: the gemm paths whose routed GEMMs are dwdp::grouped_gemm (engine/gemm_paths: multi_buffer, and composite_view's
#: FP8 experts; the BF16 composite view runs torch._grouped_mm, which needs no dwdp ops)
OPS_PATHS = ("multi_buffer", "composite_view")
PEER_KEYS = ("peer_copy_gbps", "slice_efficiency", "contention_slowdown", "peer_pairs", "slice_gbps", "many_to_one",
             "group_pull")
#: the prior of a key that only records a measurement (the planner reads the summary keys derived from it)
RECORD = "none: a measurement record, not a planner input"
PRIOR = {  # where the planner's value comes from when the file does not set the key
    "interference": "the per-phase priors (perf/uncertainty.PRIORS)",
    "peer_copy_gbps": "the GPU spec's NVLink bandwidth x efficiency (dwdp_trtllm/data/gpus/<gpu>.yaml, peer)",
    "slice_efficiency": "1.0: slices as fast as one bulk copy (perf/cost_model.prefetch_us)",
    "contention_slowdown": "the many-to-one model (perf/contention.expected_slowdown)",
    "interference_by_phase": "; ".join(f"{k}: {v}" for k, v in PRIOR_SOURCES.items()),
    "all_to_all_gbps": "the GPU spec's NVLink bandwidth x a2a efficiency (dwdp_trtllm/data/gpus/<gpu>.yaml)",
}


def code_commit() -> str:
    """$DWDP_COMMIT when set (a copied tree whose .git is stale: the caller knows the commit), else `git rev-parse
    --short HEAD` of the checkout this package runs from (bounded), else why it is not known."""
    import subprocess

    from .. import env

    if env.get(env.DWDP_COMMIT):
        return env.get(env.DWDP_COMMIT)
    repo = Path(__file__).resolve().parents[2]
    try:
        r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({type(e).__name__})"
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "unknown (not a git checkout)"


def plan_steps(tools: Tools, spec: ModelSpec, shapes: Shapes, device: str, gpus: int, *, gemm: str | None = None,
               dwdp_size: int = 8, command: str = "dwdp calibrate", machine: dict | None = None) -> tuple[list[Step], dict]:
    """(steps to run, {key: {prior, why}} for what this node cannot measure). gemm: the whole routed-expert op's
    path (commands/calibrate: --gemm, else moe_evidence.default_gemm for the weights and GPU); None: not timed.
    machine: the run's measured_on (the op's record names its GPU, time and host)."""
    steps, priors = [], {}
    one, many = ("one GPU", f"{gpus} GPUs") if device == "cuda" else ("the CPU", f"{gpus} logical ranks on the CPU")
    wdts = ("bf16", "fp8") if device == "cuda" else ("bf16",)
    main = wdts[-1]  # the planned dtype (dwdp plan's default --weight-dtype fp8); the CPU has no FP8 kernels
    state: dict = {}

    def kernels_step(wd):
        def run():
            ft = tools.floor_timer(wd)
            try:
                out = {"grouped_gemm_tflops": {wd: kernels.grouped_points(ft, shapes.tokens)}}
                if wd == main:
                    out.update(attention_us_by_isl=kernels.attention_points(ft, shapes.isls),
                               floor_tflops=kernels.floor_rates(ft, max(shapes.tokens)),
                               hbm_tbps=kernels.hbm_tbps(ft, tools.memory_bound(ft.device, shapes.memory_bytes),
                                                         shapes.memory_bytes))
                return out
            finally:
                ft.release()
        return run
    for wd in wdts:
        steps.append(Step(f"routed-expert GEMMs {wd}" + (", attention, dense GEMMs, HBM" if wd == main else ""),
                          f"bench/floor_timer.FloorTimer on {one} at tokens {list(shapes.tokens)}, ISLs "
                          f"{list(shapes.isls)} ({spec.name} shapes, {wd} experts"
                          + (", FP8 block-scale linear layers)" if wd == "fp8" else ")") + "; TensorRT-LLM's kernels "
                          + ("not timed by this version" if tools.trtllm else "not timed: tensorrt_llm not installed"),
                          kernels_step(wd)))
    blocked = tools.moe_op_blocked(gemm) if gemm is not None and tools.moe_op is not None else ""
    if gemm is not None and tools.moe_op is not None and not blocked:
        steps.append(_moe_op_step(tools, spec, shapes, one, main, gemm, dwdp_size, command, machine))
    else:
        priors["moe_op"] = {"prior": "TensorRT-LLM's CUTLASS MoE table, or the op's table shipped for the GPU "
                                     "(dwdp_trtllm/data/moe_op)",
                            "why": f"not timed: {blocked}; run `dwdp build-ops`" if blocked
                            else "no routed-expert op timer in this run"}
    if gpus < 2:
        alone = "one GPU" if device == "cuda" else "one rank"
        why = f"{alone}: no peer to copy from (a same-device copy is not a peer copy)"
        priors.update({k: {"prior": PRIOR.get(k, RECORD), "why": why}
                       for k in PEER_KEYS + ("interference", "interference_by_phase", "copy_slowdown_by_phase")})
        priors.update({k: {"prior": PRIOR.get(k, RECORD), "why": f"{alone}: no all-to-all"}
                       for k in ("all_to_all_gbps", "dep_comm")})
        return steps, priors

    def timer():
        if "copy" not in state:
            state["copy"] = tools.copy_timer()
        return state["copy"]

    def pairs_step():
        t = timer()
        state["pairs"] = peer.pair_bandwidth(t, shapes.pull_bytes)
        state["slices"] = peer.slice_sweep(t, shapes.pull_bytes, shapes.slice_sizes)
        return {"peer_pairs": state["pairs"], "slice_gbps": [list(p) for p in state["slices"]],
                **peer.summary_keys(state["pairs"], state["slices"], [])}  # peer_copy_gbps, slice_efficiency

    def contention_step():
        t, sl = timer(), dict(state["slices"])
        m2o = peer.many_to_one(t, shapes.pull_bytes, shapes.slice_sizes)
        pair = peer.summary_keys(state["pairs"], [], [])["peer_copy_gbps"]
        groups = peer.group_pull(t, expert_layout(spec, "fp8" if device == "cuda" else "bf16"), shapes.group_experts,
                                 shapes.slice_sizes, pair, {s: sl[s] * pair / sl[0] for s in sl if s})
        t.release()  # the whole layer's slots (GBs per GPU) are not needed by the later steps
        return {"many_to_one": m2o, "group_pull": groups,
                "contention_slowdown": peer.summary_keys([], [], groups)["contention_slowdown"]}

    def interference_step():
        ft = tools.floor_timer("bf16")
        try:
            T, I = max(shapes.tokens), spec.dense_intermediate or spec.moe_intermediate
            phases = {"attention_core": ft.attention_core_fn(((0, max(shapes.isls)),)),
                      "gemm": ft.op_fn("gemm", T, spec.hidden_size, I),
                      "memory_bound": tools.memory_bound(ft.device, shapes.memory_bytes),
                      "grouped_gemm": ft.grouped_fn(kernels.even_rows(spec, T))}
            comp, copy = interference.interference_by_phase(timer(), phases, shapes.pull_bytes, peer.PLANNER_SLICE,
                                                            shapes.max_pull_bytes)
            return {"interference_by_phase": comp, "copy_slowdown_by_phase": copy}
        finally:
            ft.release()
            timer().release()  # the pulls (up to max_pull_bytes) before the all-to-all's processes take the GPUs

    def dep_step():
        rec = dep_comm.a2a_record(tools.a2a_timer, gpus, dep_comm.dispatch_bytes(spec, max(shapes.tokens), DISPATCH_BYTES))
        return {"dep_comm": {tools.a2a_timer.backend: rec}, "all_to_all_gbps": rec["gbps"]}

    pull = fmt_bytes(shapes.pull_bytes, "MiB", digits=None)
    steps += [Step("peer bandwidth per pair, sliced and unsliced", f"calibrate/peer.py pair_bandwidth + slice_sweep: "
                   f"{pull} pulls, slices {slice_text(shapes.slice_sizes)} through copy_scheduler.CopyScheduler on {many}", pairs_step),
              Step(f"many-to-one and whole-group pulls ({gpus - 1} peer(s) at once)", "calibrate/peer.py many_to_one "
                   f"+ group_pull: a {shapes.group_experts}-expert {spec.name} layer over {many}", contention_step),
              Step("copies under compute, per phase", "calibrate/interference.py: rank 0 computes each phase while it "
                   f"pulls {pull} from rank 1", interference_step),
              Step(f"DEP dispatch all-to-all ({tools.a2a_timer.backend})", "calibrate/dep_comm.py: all_to_all_single "
                   f"of the dispatch of {max(shapes.tokens)} tokens per rank on {gpus} ranks ({tools.a2a_timer.backend}); "
                   + ("DeepEP installed but not timed by this version" if tools.deepep else "DeepEP not installed"), dep_step)]
    priors["interference"] = {"prior": PRIOR["interference"], "why": "measured per phase: interference_by_phase; "
                              "the one-number key is not set"}
    return steps, priors


def _moe_op_step(tools: Tools, spec: ModelSpec, shapes: Shapes, one: str, wd: str, gemm: str, dwdp_size: int,
                 command: str, machine: dict | None) -> Step:
    """The whole routed-expert op (calibrate/moe_op.py) at shapes.moe_tokens, balanced and power_law_1.01."""
    sp = moe_op.split_record(spec, dwdp_size)
    bufs = ("one [E, ...] range (the composite view)" if gemm == "composite_view" else
            f"[{sp['local_experts']} local | {sp['slot_experts']} slot] as DWDP rank 0 of {dwdp_size} holds them")
    how = (f"calibrate/moe_op.py: engine/moe_compute.routed_experts_forward (sort, gather + quantisation, GEMM1, "
           f"SwiGLU + quantisation, GEMM2, combine), gemm {gemm}, {wd} experts of {spec.name} over {bufs}, on {one} "
           f"at tokens {list(shapes.moe_tokens)}, routing {' and '.join(moe_op.ROUTINGS)}; one untimed pass over every "
           f"point, then each point's median of {moe_op.ROUNDS} interleaved rounds")
    if wd == "fp8":  # which FP8 mainloop ran moves the op's time (engine/gemm_paths._auto_mlp)
        how += f"; FP8 mainloop {env.moe_mainloop()} ({env.DWDP_MOE_MAINLOOP})"

    def run():
        m = machine or tools.machine()
        timer = tools.moe_op(wd, gemm, dwdp_size)
        try:
            src = {"gpu": m.get("gpu_name", "unknown"), "date": m["at"], "commit": tools.commit(), "command": command,
                   "how": how, "host": m["host"]}
            return {"moe_op": moe_op.moe_op_record(timer, spec, tokens=shapes.moe_tokens, gemm=gemm, weight_dtype=wd,
                                                   dwdp_size=dwdp_size, source=src)}
        finally:
            timer.release()
    return Step(f"whole routed-expert op ({gemm}, {wd})", how, run)


class StepFailed(RuntimeError):
    def __init__(self, step: str, exc: BaseException):
        super().__init__(f"{step}: {type(exc).__name__}: {exc}")
        self.step = step


def run_calibration(tools: Tools, spec: ModelSpec, shapes: Shapes, device: str, gpus: int,
                    progress: Callable[[int, int, str, float | None], None], **op) -> dict:
    """The calibration file's data. progress(i, n, name, seconds): seconds None when step i starts. op: plan_steps'
    gemm, dwdp_size and command of the whole routed-expert op."""
    machine = tools.machine()
    steps, priors = plan_steps(tools, spec, shapes, device, gpus, machine=machine, **op)
    values: dict = {}
    provenance: dict = {}
    for i, step in enumerate(steps, 1):
        progress(i, len(steps), step.name, None)
        t0 = time.perf_counter()
        try:
            got = step.run()
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - any measurement's failure names its step; nothing is written
            raise StepFailed(step.name, e) from e
        for k, v in got.items():
            values[k] = {**values[k], **v} if isinstance(v, dict) and k in values else v  # e.g. one dtype per step
            provenance[k] = {"measured": machine["host"], "at": machine["at"], "how": step.how}
        progress(i, len(steps), step.name, time.perf_counter() - t0)
    data = {"schema_version": SCHEMA_VERSION, "measured_on": machine, "provenance": {**priors, **provenance}, **values}
    if machine["purpose"] != FUNCTIONAL:
        data["gpu"] = machine["gpu_name"]
    return data


def write_file(path: Path, data: dict) -> None:
    """The file whole or not at all (bench/report.write_atomic: a temporary beside `path`, flushed, renamed over it)."""
    from ..bench.report import write_atomic

    write_atomic(path, json.dumps(data, indent=1) + "\n")
