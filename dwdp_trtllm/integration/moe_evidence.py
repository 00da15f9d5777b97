"""The dwdp_trtllm engine's default expert path per weight dtype and GPU (default_gemm: what the adapter tries
first when the integration YAML names no gemm; gen-config writes none; gemm_order: what `dwdp check-trtllm` prints),
and the measurement the FP8 default rests on: our routed-expert op
against TensorRT-LLM's Hopper FP8 block-scale MoE (the reason gemm_choice.choose_gemm logs, the comparison table
scripts/bench_moe_op_vs_trtllm.py prints). Pure: no torch, no tensorrt_llm.

Theirs (never run here: no tensorrt_llm wheel runs on our machines): TensorRT-LLM's fp8_block CUTLASS fused MoE
(`moe_torch_flow_cutlass`, what the composite view feeds), one GPU holding all 256 DeepSeek experts (moe_tp 1, EP 1),
sort to finalize, from NVIDIA aiconfigurator's H200 table `h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet`
(TensorRT-LLM 1.3.0rc20), read from the package's extracted copy (dwdp_trtllm/data/kernel_tables/h200.json) through
perf.kernel_tables, the one reader of it. Routing: the table's `balanced` row for our uniform routing and its
`power_law_1.01` row for power-law routing (routing_skew's power_law shape is aiconfigurator's).
Ours: the whole op the multi_buffer unit runs (sort, gather + 1x128 quantisation, both FP8 grouped GEMMs, SwiGLU +
quantisation, combine) over a [32 local | 224 slot] split, measured on an H200 by scripts/bench_moe_op_vs_trtllm.py
(the `moeop` step of scripts/gpu_check.sh) at 4K / 8K / 16K tokens, uniform and power-law routing (OUR_OP_H200
below: docs/BENCHMARKS.md "Routed-expert op (FP8, Hopper)", RESULTS). It is ahead of the table at 5 of the 6 points
(1.21-1.48x at 8K and 16K tokens, 1.25x at 4K power-law) and about even at 4K tokens with uniform routing (0.98x:
5.49 vs 5.40 ms); fp8_sm90_reason says so, from the numbers.

Legend: T tokens entering the op, K top-k, H hidden, I moe intermediate, E experts.
"""
from __future__ import annotations

from dataclasses import dataclass

#: the model and GPU of the comparison (the table's shape is DeepSeek-V3/R1: H 7168, I 2048, E 256, top-8)
MODEL, GPU = "deepseek-r1", "h200"
#: TensorRT-LLM's table dtype key for FP8 block scales in kernel_tables (moe_dtype fp8_block)
TABLE_DTYPE = "fp8"
#: our routing name -> the table's routing row
TABLE_ROUTING = {"uniform": "balanced", "power_law": "power_law_1.01"}
TOKENS = (4096, 8192, 16384)


@dataclass(frozen=True)
class Measured:
    """A measurement of our whole routed-expert op: ms per call {routing: {T tokens: ms}}, the GPU it ran on (as
    torch.cuda.get_device_name says it), where it is recorded."""

    ms: dict[str, dict[int, float]]
    device: str
    source: str


#: the run OUR_OP_H200 is read from (repository path; the multi_buffer rows of its "rows", ours_ms): the latest
#: measurement of our op, the one docs/BENCHMARKS.md shows
RESULTS = "docs/bench_results/moeop_deepgemm_2026-12-03/moe_op_vs_trtllm.json"

#: our op on the H200, multi_buffer over [32 local | 224 slot]: the run of 2026-12-03 22:31-22:37 UTC (the tree of
#: commit 5da8eaa; the file's "commit" names the device copy's git head, not the tree measured), the values of RESULTS
#: as written (ms, triton.testing.do_bench median per call, the median of 3 interleaved rounds). An earlier run of the
#: same day (docs/history/benchmarks-2026-12.md section 12) measured 5.10 ms at 4K uniform: run to run, 4K tokens is
#: about even with the table.
OUR_OP_H200 = Measured(
    ms={"uniform": {4096: 5.486400127410889, 8192: 8.574111938476562, 16384: 15.580672264099121},
        "power_law": {4096: 5.547135829925537, 8192: 8.948287963867188, 16384: 15.270048141479492}},
    device="NVIDIA H200",
    source=f"2026-12-03, torch 2.11.0+cu130: docs/BENCHMARKS.md \"Routed-expert op (FP8, Hopper)\", {RESULTS}")


def measured_case(weight_dtype: str, sm: int | None) -> bool:
    """FP8 block-scale experts (DwdpConfig weight_dtype 'fp8') on an sm_90 GPU (compute capability 9.x, `sm` as
    major * 10 + minor; None: not known): where OUR_OP_H200's comparison applies (AdapterRuntime asks it for
    the tensors and device at hand)."""
    return weight_dtype == "fp8" and sm is not None and sm // 10 == 9


def default_gemm(weight_dtype: str, sm: int | None) -> str:
    """The gemm the dwdp_trtllm engine tries first when the integration YAML names none (settings.IntegrationConfig
    gemm_requested None); the one place this is decided. multi_buffer for FP8 block-scale experts on sm_90, where
    our op beat the stock kernel the composite view feeds at 8K and 16K tokens and ties it at 4K (fp8_sm90_reason
    says the narrowest margin); the composite view otherwise (BF16, or FP8 off sm_90: not measured). Not DwdpConfig's default
    (merge, the bench engine's), which nobody asked for there.
    Asked by the adapter for the weights and GPU it runs on (AdapterRuntime), and by `dwdp check-trtllm` for this
    machine's GPU (gemm_order); `dwdp gen-config` writes no gemm, so the GPU the deployment runs on decides.
    gemm_choice.choose_gemm falls back in order: multi_buffer -> composite view -> merge, or composite view ->
    multi_buffer -> merge."""
    return "multi_buffer" if measured_case(weight_dtype, sm) else "composite_view"


def default_gemm_where(weight_dtype: str) -> str:
    """default_gemm's choice for these weights across GPUs, asked of default_gemm itself (sm_90, and sm_100 standing
    for any other GPU): 'multi_buffer on sm_90 GPUs, composite_view on others' or 'composite_view on every GPU'."""
    hopper, other = default_gemm(weight_dtype, 90), default_gemm(weight_dtype, 100)
    return f"{hopper} on sm_90 GPUs, {other} on others" if hopper != other else f"{hopper} on every GPU"


def default_gemm_note(weight_dtype: str) -> str:
    """What gen-config's dwdp.yaml header says of the gemm it does not write (default_gemm_where: the rule is stated
    in one place)."""
    return (f"no gemm: the engine picks it on the GPU it runs on (moe_evidence.default_gemm; {weight_dtype} experts: "
            f"{default_gemm_where(weight_dtype)}); add `gemm:` to force one")


#: compute capability (major * 10 + minor) of the shipped `--gpu` names, for default_gemm where the GPU is named, not
#: at hand (gen-config's memory line); a spec file or another name: not known
NAMED_GPU_SM = {"h100": 90, "h200": 90, "b200": 100, "gb200": 100}


def priced_gemm(weight_dtype: str, gpu: str | None) -> tuple[str, str]:
    """(gemm, how): the path a dwdp_trtllm deployment on `gpu` (a shipped name, else unknown) takes first,
    default_gemm's, for memory.rank_memory to price, and how it was chosen, for the line that shows the price."""
    sm = NAMED_GPU_SM.get(str(gpu).lower()) if gpu is not None else None
    g = default_gemm(weight_dtype, sm)
    if sm is None:
        return g, (f"moe_evidence.default_gemm for {weight_dtype} with the GPU's sm not known ({gpu}); "
                   "multi_buffer, the sm_90 FP8 default, prices the same fetched-expert slots")
    return g, f"moe_evidence.default_gemm for {weight_dtype} on {gpu} (sm_{sm})"


#: what each path runs (check-trtllm's GEMM line)
UNIT = "our execution unit replaces CutlassFusedMoE.run_moe on DWDP layers: dwdp::grouped_gemm over [local, slot]"
VIEW = "the stock CUTLASS MoE over one [E, ...] VMM range (CUDA + vmm_fd; local experts mapped, not copied)"


def gemm_order(weight_dtype: str, requested: str | None = None, sm: int | None = None) -> str:
    """One line (`dwdp check-trtllm`'s GEMM line): the path the dwdp_trtllm engine tries first for `weight_dtype`
    experts, its fallbacks, and for FP8 multi_buffer why. requested: the integration config's gemm (None: it names
    none, default_gemm decides); sm: the GPU's compute capability (major * 10 + minor), None when this machine has
    no GPU: then an FP8 default is given for both cases, sm_90 and other GPUs."""
    if requested is None and sm is None and weight_dtype == "fp8":
        return (f"{_order('multi_buffer', False, 'default on sm_90 GPUs')} On other GPUs: "
                f"{_order('composite_view', False, 'default: FP8 off sm_90 is not measured')} No GPU here: the GPU "
                f"the engine runs on decides (moe_evidence.default_gemm). Why on sm_90: {fp8_sm90_reason()}")
    want = requested or default_gemm(weight_dtype, sm)
    how = "requested" if requested else f"default on sm_{sm}" if sm is not None else "default"
    return _order(want, want == "multi_buffer" and weight_dtype == "fp8" and (sm is None or measured_case(weight_dtype, sm)),
                  how)


def _order(want: str, measured: bool, how: str) -> str:
    """The line for `want` tried first (how: requested / default ...); measured: append the FP8 measurement."""
    if want == "merge":
        return f"merge ({how}; full-slot buffers, local experts copied every layer)"
    if want == "multi_buffer":
        why = f" Why: {fp8_sm90_reason()}" if measured else ""
        return f"multi_buffer ({UNIT}); where the unit cannot run composite_view ({VIEW}); else merge [{how}].{why}"
    return f"composite_view ({VIEW}); where that view cannot be built multi_buffer ({UNIT}); else merge [{how}]."


def _tables():
    from ..spec.models import get_model
    from ..perf.kernel_tables import shape_tables
    t = shape_tables(get_model(MODEL), GPU)
    if t is None or TABLE_DTYPE not in t.data["moe"]:
        raise RuntimeError(f"no {GPU} kernel table with an {TABLE_DTYPE} MoE row for {MODEL} "
                           "(dwdp_trtllm/data/kernel_tables; scripts/extract_aiconfigurator.py)")
    return t


def trtllm_ms(tokens: int, routing: str = "uniform") -> float:
    """TensorRT-LLM's fp8_block fused MoE, all E experts on one H200, at `tokens` tokens (ms, from the table;
    ValueError past its last row, 16384 tokens: the table is not extrapolated for a comparison)."""
    t = _tables()
    ms, beyond = t.moe_ms(TABLE_DTYPE, 1, TABLE_ROUTING[routing], tokens)
    if ms is None or float(beyond) > 0:
        raise ValueError(f"{tokens} tokens, {routing}: outside TensorRT-LLM's measured MoE rows ({trtllm_source()})")
    return float(ms)


def trtllm_source() -> str:
    """Where trtllm_ms comes from: the table path and TensorRT-LLM version, and the package file."""
    t = _tables()
    moe = t.data["moe"][TABLE_DTYPE]
    return (f"TensorRT-LLM {moe['version']} {moe['select']['moe_dtype']} CUTLASS MoE, NVIDIA aiconfigurator-core "
            f"{t.source['source']['version']} table {moe['table']} (moe_tp 1, EP 1), as extracted into "
            f"dwdp_trtllm/data/kernel_tables/{GPU}.json")


def moe_tflop(tokens: int) -> float:
    """TFLOP of the routed experts at `tokens` tokens, the GEMMs only (perf.flops.routed_expert_flops, the planner's
    count: 2 * T*K * (H*2I + I*H))."""
    from ..spec.models import get_model
    from ..perf.flops import routed_expert_flops
    return float(routed_expert_flops(get_model(MODEL), tokens)) / 1e12


def speedups(measured: Measured = OUR_OP_H200, routing: str = "uniform") -> dict[int, float]:
    """TensorRT-LLM ms / our ms per token count of `measured` with `routing` (> 1: ours is faster)."""
    return {T: trtllm_ms(T, routing) / ms for T, ms in sorted(measured.ms[routing].items())}


def narrowest_margin(measured: Measured = OUR_OP_H200) -> tuple[float, str, int]:
    """(TensorRT-LLM ms / our ms, routing, tokens) at the point of `measured` where that ratio is smallest."""
    return min((r, routing, T) for routing in measured.ms for T, r in speedups(measured, routing).items())


def measured_here(measured: Measured, device_name: str) -> bool:
    """`device_name` (torch.cuda.get_device_name) is the GPU model `measured` ran on ('NVIDIA H200' also matches
    'NVIDIA H200 NVL'-style names of the same chip)."""
    return measured.device.lower() in device_name.lower()


def behind_text(measured: Measured = OUR_OP_H200) -> str:
    """The points where our op is not ahead of the table (ratio <= 1), each with both times, and how many points it is
    ahead at: 'ahead at 5 of 6; behind at 4K tokens with uniform routing (0.98x: 5.49 vs 5.40 ms)'."""
    pts = [(routing, T, ours, trtllm_ms(T, routing)) for routing in measured.ms
           for T, ours in sorted(measured.ms[routing].items())]
    behind = [p for p in pts if p[3] / p[2] <= 1]
    where = ", ".join(f"{T // 1024}K tokens with {routing.replace('_', '-')} routing ({theirs / ours:.2f}x: "
                      f"{ours:.2f} vs {theirs:.2f} ms)" for routing, T, ours, theirs in behind)
    return f"ahead at {len(pts) - len(behind)} of {len(pts)}; behind at {where}"


def fp8_sm90_reason(measured: Measured = OUR_OP_H200, device_name: str | None = None) -> str:
    """Why multi_buffer comes first for FP8 block scales on sm_90: the measurement (uniform routing's times, the
    ratio range per routing, the narrowest margin), the GPU it was measured on and its sources. device_name: the
    GPU this runs on (torch.cuda.get_device_name), None when not known (gen-config, check-trtllm). On another sm_90
    GPU (H100, H20, ...) the default stands (the same sm_90 kernels run) and the reason says the measurement was
    made on `measured.device`, not on this device."""
    Ts = sorted(measured.ms["uniform"])
    k = " / ".join(f"{T // 1024}K" for T in Ts)
    ranges = "; ".join(f"{routing.replace('_', '-')} routing {min(s.values()):.2f}-{max(s.values()):.2f}x"
                       for routing in measured.ms for s in [speedups(measured, routing)])
    r, routing, T = narrowest_margin(measured)
    where = f"{T // 1024}K tokens with {routing.replace('_', '-')} routing"
    margin = (f"ahead at every measured point, by as little as {r:.2f}x at {where}" if r > 1 else
              f"NOT ahead at every measured point: {behind_text(measured)}")
    ours = " / ".join(f"{measured.ms['uniform'][T]:.2f}" for T in Ts)
    if device_name is None:
        here = ""
    elif measured_here(measured, device_name):
        here = f"; this device ({device_name}) is the GPU measured"
    else:
        here = (f"; measured on an {measured.device}, not this device ({device_name}): kept here because sm_90 "
                "runs the same kernels, the margin on this device is not measured")
    return (f"FP8 block scales on sm_90: multi_buffer first by measurement on an {measured.device}: our op {ours} ms "
            f"at {k} tokens, uniform routing ({measured.source}) vs {' / '.join(f'{trtllm_ms(T):.2f}' for T in Ts)} "
            f"ms for the stock kernel the composite view feeds ({trtllm_source()}): {ranges}; {margin}{here} (docs/TRTLLM.md)")


def comparison_rows(timings: dict[tuple[str, str, int], float]) -> list[dict]:
    """Rows of the comparison from our timings {(path, routing, tokens): ms}: TensorRT-LLM's table time at the same
    tokens and routing, the ratio theirs / ours (> 1: ours faster) and both TFLOP/s. Sorted by routing, tokens, path."""
    rows = []
    for (path, routing, T), ms in sorted(timings.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        if routing not in TABLE_ROUTING:
            raise ValueError(f"routing {routing!r}: expected one of {', '.join(TABLE_ROUTING)}")
        if not ms > 0:
            raise ValueError(f"{path} {routing} T={T}: time {ms!r} ms is not positive")
        theirs = trtllm_ms(T, routing)
        fl = moe_tflop(T)
        rows.append({"path": path, "routing": routing, "tokens": T, "ours_ms": ms, "trtllm_ms": theirs,
                     "trtllm_over_ours": theirs / ms, "ours_tflops": fl / ms * 1e3, "trtllm_tflops": fl / theirs * 1e3,
                     "trtllm_row": TABLE_ROUTING[routing]})
    return rows


def markdown(rows: list[dict]) -> str:
    """The comparison table (ms per call, TFLOP/s of the expert GEMMs' work, ratio TensorRT-LLM / ours)."""
    lines = ["| routing (table row) | tokens | our path | ours ms | TensorRT-LLM ms | TensorRT-LLM / ours | "
             "ours TFLOP/s | TensorRT-LLM TFLOP/s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['routing']} ({r['trtllm_row']}) | {r['tokens']} | {r['path']} | {r['ours_ms']:.2f} | "
                     f"{r['trtllm_ms']:.2f} | {r['trtllm_over_ours']:.2f} | {r['ours_tflops']:.0f} | "
                     f"{r['trtllm_tflops']:.0f} |")
    lines.append("")
    lines.append(f"TensorRT-LLM: {trtllm_source()}. Ours: measured in this run.")
    return "\n".join(lines) + "\n"
