"""`dwdp size` prices what the user states and answers each mode on its own: the shared pricing flags, TP context
servers, each mode's own generation side, MTP, the steady-state output rate, the ranges and the refusals."""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dwdp_trtllm.cli import build_parser, main
from dwdp_trtllm.commands import pricing_flags as pf
from dwdp_trtllm.commands import size as size_cmd
from dwdp_trtllm.sizing import report
from dwdp_trtllm.sizing.context_cost import Segments
from dwdp_trtllm.sizing.metrics import Metrics, Slo, metric_range, summarize
from dwdp_trtllm.sizing.search import _costs
from dwdp_trtllm.sizing.simulator import Deployment, simulate
from dwdp_trtllm.sizing.traffic import Arrivals
from dwdp_trtllm.spec.schema import ConfigError


def _size_args(*argv: str):
    return build_parser().parse_args(["size", *argv])


def _problem(*argv: str):
    spec, probs = size_cmd.problems(_size_args("--rate", "1", "--duration", "30", *argv))
    return probs[0][1]


def _iteration_s(p, mode: str, group: int = 8, isl: int = 8192, k: int = 2) -> float:
    seg = Segments(tuple((0, isl, isl) for _ in range(k)))
    cost, _ = _costs(p, mode, group, 0)
    return cost.seconds([seg] * (group if mode == "dep" else 1))


# ---- 1. the pricing flags: one parser, both commands --------------------------------------------------------

def test_plan_and_size_share_each_pricing_flag():
    """Every shared flag exists in both commands with the same default and choices (one definition)."""
    sub = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001 (argparse has no public accessor)
    acts = {cmd: {o: a for a in sub[cmd]._actions for o in a.option_strings} for cmd in ("plan", "size")}
    for flag in pf.FLAGS:
        p, s = acts["plan"][flag], acts["size"][flag]
        assert (p.default, p.choices, p.type) == (s.default, s.choices, s.type), flag


def test_size_prices_the_stated_routing_dep_comm_variant_slicing_and_interference():
    """Each flag moves the context iteration the way `dwdp plan` prices it (same spec builder)."""
    base = _problem()
    dep0, dwdp0 = _iteration_s(base, "dep"), _iteration_s(base, "dwdp")
    assert _iteration_s(_problem("--routing-skew", "power_law_1.01"), "dep") > 1.2 * dep0  # the slowest EP rank
    ag = _iteration_s(_problem("--dep-comm", "allgather_reducescatter"), "dep")
    ep = _iteration_s(_problem("--dep-comm", "deepep"), "dep")
    assert ag != pytest.approx(ep, rel=0.01)
    assert _iteration_s(_problem("--dep", "deepep_deepgemm"), "dep") != pytest.approx(dep0, rel=0.001)
    # short iterations expose the prefetch: unsliced copies (no contention mitigation) and more interference cost
    short0 = _iteration_s(base, "dwdp", isl=2048, k=1)
    assert _iteration_s(_problem("--slice-bytes", "0"), "dwdp", isl=2048, k=1) != pytest.approx(short0, rel=1e-3)
    assert _iteration_s(_problem("--interference", "1.5"), "dwdp") > dwdp0 * 1.01
    p = _problem("--routing-skew", "none", "--dep-comm", "deepep")
    from dwdp_trtllm.perf import inputs
    line = inputs.line(p.spec)
    assert "given: DEP communication (--dep-comm deepep), routing (--routing-skew none)" in line, line


def test_size_refuses_several_slice_sizes_naming_the_flag():
    with pytest.raises(ConfigError) as e:
        _problem("--slice-bytes", "2MiB,0")
    assert e.value.key == "--slice-bytes"


# ---- 2. TP context servers ------------------------------------------------------------------------------------

def _curve(points, x: float) -> float:
    """The tables' rule, written out: linear inside, constant rate past the last row."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return ys[-1] * x / xs[-1] if x > xs[-1] else float(np.interp(x, xs, ys))


def _gen_tables():
    from dwdp_trtllm.sizing.decode_cost import package_path as gen_path
    return json.loads(gen_path("h200").read_text())


def test_tp_iteration_equals_a_hand_composition_of_the_table_rows():
    """TP8, read here from the raw JSON rows: per layer the one-GPU attention (the planner's DEP1 iteration less its
    MLP, shared-expert, router and EP1 rows) / 8 x 8 x TensorRT-LLM's MLA context module at 16 heads over 128 heads
    (the rows at 2 x 8K), the shared experts' (dense layers: the dense MLP's) GEMMs at their TP8 rows, the router
    whole, the EP8 fused-MoE row at all the tokens, two TensorRT-LLM all-reduces (AllReduce rows, 8 GPUs). The
    old pricing (every part one GPU's / 8, NCCL reduce-scatter + all-gather) is 3% under this."""
    from dwdp_trtllm.perf.kernel_tables import package_table_path
    p = _problem()
    m = p.spec.model
    data = json.loads(package_table_path("h200").read_text())["models"]["deepseek-v3"]
    gen = _gen_tables()
    gd = gen["models"]["deepseek-v3"]
    isl, k = 8192, 2
    T = isl * k
    fp8, bf16 = data["gemm"]["fp8_block"]["ops"], data["gemm"]["bfloat16"]["ops"]
    moe1 = _curve(data["moe"]["fp8"]["ep"]["1"]["balanced"], T)
    moe8 = _curve(data["moe"]["fp8"]["ep"]["8"]["balanced"], T)
    shared1 = _curve(fp8["shared_fc1"]["points"], T) + _curve(fp8["shared_fc2"]["points"], T)
    router = _curve(bf16["router"]["points"], T)
    mlp1 = _curve(fp8["dense_fc1"]["points"], T) + _curve(fp8["dense_fc2"]["points"], T)
    kd, L = m.first_k_dense, m.num_moe_layers
    one_gpu_ms = _iteration_s(p, "dep", group=1, isl=isl, k=k) * 1e3  # DEP1: the planner's iteration_times
    attention1 = (one_gpu_ms - kd * mlp1 - L * (shared1 + router + moe1)) / (kd + L)
    rows = {h: {(b, i): ms for b, i, ms in gd["mla_context_module_by_heads"][h]["fp8_block/fp8"]["rows"]}
            for h in ("128", "16")}
    penalty = 8 * rows["16"][(k, isl)] / rows["128"][(k, isl)]
    assert 1.2 < penalty < 1.3  # 2.7392 ms at 16 heads against 17.476 ms at 128
    shared8 = sum(_curve(gd["gemm"][f"shared_fc{i}/tp8"]["points"], T) for i in (1, 2))
    mlp8 = sum(_curve(gd["gemm"][f"dense_fc{i}/tp8"]["points"], T) for i in (1, 2))
    ar = _curve(gen["comm"]["custom_allreduce"]["by_gpus"]["8"], T * m.hidden_size)
    attention8 = attention1 / 8 * penalty
    want_ms = kd * (attention8 + mlp8 + 2 * ar) + L * (attention8 + shared8 + router + moe8 + 2 * ar)
    assert _iteration_s(p, "tp", group=8, isl=isl, k=k) * 1e3 == pytest.approx(want_ms, rel=0.01)


def test_tp_attention_penalty_is_the_module_rows_ratio_and_ranged_by_their_spread():
    """At a (batch, ISL) the rows have, the penalty is that row pair's ratio at every scenario; between rows the
    nominal is interpolated and the low / high ends are the smallest / largest ratio of the surrounding rows."""
    from dwdp_trtllm.sizing.tp_cost import module_tp_ratio
    gd = _gen_tables()["models"]["deepseek-v3"]["mla_context_module_by_heads"]
    rows = {h: {(b, i): ms for b, i, ms in gd[h]["fp8_block/fp8"]["rows"]} for h in ("128", "64", "16")}
    at = dict(gpu="h200", shape="deepseek-v3", weight_dtype="fp8", heads=128)
    want = 8 * rows["16"][(1, 8192)] / rows["128"][(1, 8192)]
    for which in ("low", "nominal", "high"):
        assert module_tp_ratio(**at, n=8, batch=1, isl=8192, which=which) == pytest.approx(want)
    corners = [2 * rows["64"][(b, i)] / rows["128"][(b, i)] for b in (1, 2) for i in (4096, 6144)]
    lo, nom, hi = (module_tp_ratio(**at, n=2, batch=1.4, isl=5000, which=w) for w in ("low", "nominal", "high"))
    assert lo == pytest.approx(min(corners)) and hi == pytest.approx(max(corners)) and lo < nom < hi
    assert module_tp_ratio(**at, n=16, batch=1, isl=8192) is None  # no rows at 8 heads: the caller's fast end


def test_tp_is_left_out_by_default_without_kernel_tables_and_refused_when_asked():
    p = _problem("--target", "engine")
    assert p.tp_sizes == ()
    with pytest.raises(ConfigError) as e:
        _problem("--target", "engine", "--tp-size", "4")
    assert e.value.key == "--tp-size"


# ---- 3. the search: each mode's own generation side --------------------------------------------------------

BUG = ["--rate", "13.95", "--isl", "4096", "--osl", "1024", "--gpu-budget", "32", "--duration", "120",
       "--tps-user", "20", "--ttft-p99", "2", "--dwdp-size", "8", "--dep-size", "8", "--mnt", "8192,16384",
       "--gen-tp", "8", "--gen-batch", "64", "--mtp", "0", "--tp-size", "0", "--json"]


@pytest.mark.slow
def test_dep_finds_its_32_gpu_deployment_when_dwdp_needs_more_context_gpus(capsys):
    """ISL 4K / OSL 1K at 13.95 req/s in 32 GPUs: DWDP needs 32 context GPUs under TTFT p99 2 s, DEP 16; the
    generation side was searched behind DWDP's context only, so DEP answered 'none' too."""
    assert main(["size", *BUG]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    dep = run["dep"]["deployment"]
    assert dep is not None and dep["gpus"] == 32 and dep["ctx_gpus"] == 16, run["dep"]
    assert run["dep"]["metrics"]["ttft_p99_s"] <= 2 and run["dep"]["metrics"]["tps_user"] >= 20
    assert run["dwdp"]["deployment"] is None and "--gpu-budget 32" in run["dwdp"]["why"]


def _metrics(**kw) -> Metrics:
    base = dict(ttft_p50_s=1.0, ttft_p99_s=2.0, tpot_s=0.03, tps_user=33.0, output_tps_per_gpu=100.0,
                goodput_rps=1.0, requests=10, completed=10)
    base.update(kw)
    return Metrics(**base)


finite = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(nom=finite, lo=finite, hi=finite, key=st.sampled_from(report.RANGED))
def test_a_nominal_value_is_always_inside_its_printed_range(nom, lo, hi, key):
    """The range is simulated at the planner's two ends, which need not bracket the nominal (2.70 s against
    2.74-4.98 was printed): the table's and --json's range always contain the nominal."""
    m, a, b = _metrics(**{key: nom}), _metrics(**{key: lo}), _metrics(**{key: hi})
    text = report._range(m, a, b, key, ".2f")
    shown = float(text.split(" ")[0])
    if "[" in text:
        x, y = (float(v) for v in text.split("[")[1].rstrip("]").split("-"))
        assert x <= shown <= y, text
    r = metric_range(m, a, b, key)
    assert r[0] <= nom <= r[1]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 25), rate=st.floats(0.05, 50), seed=st.integers(0, 10_000), ctx_s=st.floats(0.01, 3),
       step_s=st.floats(1e-3, 0.1), ttft=st.one_of(st.none(), st.floats(0.01, 10)), span=st.booleans())
def test_goodput_is_never_above_the_offered_rate(n, rate, seed, ctx_s, step_s, ttft, span):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    arr = Arrivals(t, rng.integers(100, 2000, n), rng.integers(1, 50, n), "random")
    d = Deployment("dwdp", 1, 1, 4096, 1, 1, 8)
    r = simulate(arr, d, lambda s, segs: ctx_s, lambda tp, b, kv: step_s, lambda isl: 0.0)
    m = summarize(r, 2, Slo(None, ttft, None), span_s=float(t[-1]) * 1.5 if span else None)
    assert m.goodput_rps <= m.offered_rps + 1e-12
    assert m.offered_rps <= n / max(float(t[-1]), 1e-9) + 1e-12


def test_no_ttft_slo_is_blamed_when_none_was_set():
    from dwdp_trtllm.sizing.search import best_context
    p = size_cmd.problems(_size_args("--rate", "200", "--duration", "20", "--gpu-budget", "16", "--dep-size", "8",
                                     "--mnt", "16384"))[1][0][1]
    d, _, why = best_context(p, "dep")
    assert d is None and "TTFT" not in why and "--gpu-budget 16" in why and "input tokens/s" in why, why


@pytest.mark.parametrize("argv, flag", [(["--isl", "163841"], "--isl"),
                                        (["--isl", "160000", "--osl", "4000", "--isl-dist", "fixed"], "--osl")])
def test_isl_and_osl_are_checked_against_the_context_length(argv, flag):
    """DeepSeek-R1's context length: 163,840 tokens (YaRN 4,096 x 40; its config.json's max_position_embeddings)."""
    with pytest.raises(ConfigError) as e:
        size_cmd.problems(_size_args("--rate", "1", "--duration", "10", *argv))
    assert e.value.key == flag and "163,840" in e.value.expected


def test_lengths_within_the_context_length_pass():
    size_cmd.problems(_size_args("--rate", "1", "--duration", "10", "--isl", "160000", "--osl", "3840",
                                 "--isl-dist", "fixed"))


# ---- 4. MTP and the steady-state output rate ------------------------------------------------------------------

def test_mtp_step_is_the_verify_and_draft_passes_over_the_expected_tokens():
    from dataclasses import replace
    from dwdp_trtllm.sizing.decode_cost import DEFAULT_MTP_ACCEPTANCE, decode_cost
    from dwdp_trtllm.spec.models import PRESETS
    dc0 = decode_cost(PRESETS["deepseek-r1"], "h200", "fp8")
    dc1 = replace(dc0, mtp=1, acceptance=0.85)
    assert DEFAULT_MTP_ACCEPTANCE == 0.85
    for b in (1, 16, 64):
        want = (dc0.step_ms(8, 2 * b, 9000) + dc0.moe_layer_ms(8, b, 9000)) / 1.85
        assert dc1.step_ms(8, b, 9000) == pytest.approx(want, rel=1e-9)
    # at one request per rank a step is latency-bound: MTP raises TPS/user (the 170-180 TPS/user band)
    assert 1e3 / dc1.step_ms(8, 1, 9000) > 1.3 * 1e3 / dc0.step_ms(8, 1, 9000)
    # two drafts, chained acceptance: 1 + a + a^2 tokens per step
    assert replace(dc0, mtp=2, acceptance=0.5).tokens_per_step == pytest.approx(1.75)


def test_size_out_and_gen_config_write_the_same_mtp(tmp_path, capsys):
    """size's default MTP is gen-config's (1 for R1): the files size --out writes equal gen-config's without --mtp."""
    small = ["--rate", "0.5", "--duration", "60", "--dwdp-size", "8", "--dep-size", "8", "--tp-size", "0",
             "--mnt", "16384", "--gen-tp", "8", "--gen-batch", "16"]
    out = tmp_path / "sized"
    assert main(["size", *small, "--json", "--out", str(out)]) == 0
    d = json.loads(capsys.readouterr().out)
    argv = d["gen_config"]
    i = argv.index("--mtp")
    plain = argv[:i] + argv[i + 2:-2]  # gen-config with its own MTP default
    ref = tmp_path / "ref"
    assert main(plain + ["--out", str(ref)]) == 0
    capsys.readouterr()
    for name in ("disagg_worker.yaml",):
        got = (out / name).read_text().replace(str(out), "@")
        want = (ref / name).read_text().replace(str(ref), "@")
        assert got == want and "speculative_config" in got


def test_output_tps_per_gpu_is_a_steady_state_rate():
    """Deterministic arrivals every 0.5 s, each 100 output tokens over 10 s: the steady output is 200 tokens/s; a
    count from time 0 (what was reported) misses the warm-up, about 10 s of 60."""
    n = 120
    t = np.arange(n) * 0.5
    arr = Arrivals(t, np.full(n, 1000), np.full(n, 101), "steady")
    d = Deployment("dwdp", 1, 1, 4096, 1, 1, 64)
    r = simulate(arr, d, lambda s, segs: 0.1, lambda tp, b, kv: 0.1, lambda isl: 0.0)
    m = summarize(r, 1, Slo())
    assert m.output_tps_per_gpu == pytest.approx(200.0, rel=0.02)
    assert 5 < m.tps_window[0] < 15 and m.tps_window[1] == pytest.approx(t[-1])


# ---- 5. refusals and the binding constraint (issue's fault cases) -----------------------------------------

SMALL = ["--duration", "60", "--dwdp-size", "8", "--dep-size", "8", "--mnt", "16384", "--gen-tp", "8",
         "--gen-batch", "32"]


@pytest.mark.parametrize("argv, flag", [(["--rate", "1e-300"], "--rate"), (["--rate", "1,,2"], "--rate"),
                                        (["--rate", "1", "--mtp-acceptance", "1.5"], "--mtp-acceptance"),
                                        (["--rate", "1", "--mtp", "-1"], "--mtp"),
                                        (["--rate", "1", "--tp-size", "x"], "--tp-size")])
def test_bad_traffic_is_refused_naming_the_flag(argv, flag, capsys):
    assert main(["size", *SMALL, *argv]) == 2
    err = capsys.readouterr().err
    assert f"{flag}:" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv, want", [(["--ttft-p99", "1e-06"], "meets --ttft-p99 1e-06 s; the fastest reaches"),
                                        (["--gpu-budget", "1"], "more than --gpu-budget 1")])
def test_no_deployment_exits_non_zero_naming_the_binding_constraint(argv, want, capsys):
    assert main(["size", "--rate", "0.5", *SMALL, "--tp-size", "0", *argv]) == 1
    err = capsys.readouterr().err
    assert want in " ".join(err.split()), err


def test_write_trace_is_checked_before_the_search(tmp_path, capsys, monkeypatch):
    import dwdp_trtllm.sizing.search as se
    monkeypatch.setattr(se, "search", lambda *a, **k: pytest.fail("searched before checking --write-trace"))
    assert main(["size", "--rate", "1", *SMALL, "--write-trace", str(tmp_path)]) == 2  # a directory
    err = capsys.readouterr().err
    assert "--write-trace:" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("content, key", [(b'{"timestamp": 0, "input_length": 4096.5, "output_length": 10}\n',
                                           "input_length"),
                                          (b"\xff\xfe not utf-8\n", ""),
                                          (b"[" * 100_000 + b"]" * 100_000 + b"\n", "")])
def test_a_bad_trace_is_one_line_naming_the_file(tmp_path, capsys, content, key):
    f = tmp_path / "t.jsonl"
    f.write_bytes(content)
    assert main(["size", "--trace", str(f), *SMALL]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and key in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_the_search_reports_progress(monkeypatch, capsys):
    ticks = []

    class Quiet:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False
    monkeypatch.setattr(size_cmd, "_progress", lambda: (Quiet(), ticks.append))
    assert main(["size", "--rate", "0.5", *SMALL, "--tp-size", "0"]) == 0
    capsys.readouterr()
    assert any("DWDP context" in t for t in ticks) and any("generation" in t for t in ticks)


def test_progress_reaches_stderr_as_plain_lines_where_stderr_is_no_terminal(monkeypatch, capsys):
    """The real progress path (nothing mocked): stderr captured (no terminal, as a log or CI), so rich draws
    nothing and the search says each stage on its own line of stderr; stdout holds the report only."""
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE"):  # rich reads these as "a terminal": not this test's case
        monkeypatch.delenv(var, raising=False)
    assert main(["size", "--rate", "0.5", *SMALL, "--tp-size", "0", "--json"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)  # the report alone: no progress text in it
    lines = cap.err.splitlines()
    assert lines and all(ln.startswith("dwdp size") and len(ln) <= 80 for ln in lines), cap.err
    for stage in ("DWDP context", "DWDP generation", "DEP context", "DEP generation"):
        assert sum(stage + ":" in ln for ln in lines) == 1, (stage, cap.err)  # one line per stage, not per tick
    assert lines[-1] == f"dwdp size: searched, {lines[-2].split('[')[1].split(']')[0]} simulated", cap.err


def test_progress_on_a_terminal_is_rich_on_stderr(monkeypatch, capsys):
    """The terminal path: rich's progress line (FORCE_COLOR makes rich treat the captured stderr as a terminal;
    COLUMNS fixed so the line's width does not depend on the runner), on stderr, never on stdout."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["size", "--rate", "0.5", *SMALL, "--tp-size", "0", "--json"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)
    assert "dwdp size: " in cap.err and "simulated" in cap.err, cap.err
    assert "dwdp size [" not in cap.err  # not the plain lines


def test_the_plots_draw_the_slos_label_each_point_and_say_what_coinciding_lines_share(tmp_path, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.figure as mf
    figs = []
    monkeypatch.setattr(mf.Figure, "savefig", lambda self, *a, **k: figs.append(self))
    d = {m: Deployment(m, 8, 1 if m == "dep" else 8, 8192, 8, 2, 32) for m in ("dwdp", "dep")}
    pts = [(20.0, 300.0, "32 GPUs: a"), (40.0, 200.0, "32 GPUs: b")]
    note = report.shared_note({"dwdp": pts, "dep": list(pts)}, d)
    assert "DWDP and DEP coincide" in note and "8 context GPUs" in note
    assert report.shared_note({"dwdp": pts, "dep": [(21.0, 300.0, "x")]}, d) == ""
    near = [(x * 1.005, y * 0.995, lab) for x, y, lab in pts]  # the same setups, first tokens timed differently
    assert "coincide" in report.shared_note({"dwdp": pts, "dep": near}, d)
    report.plot_pareto({"dwdp": pts, "dep": pts}, tmp_path / "p.png", "t", Slo(None, 5.0, 25.0), note)
    fig = figs[-1]
    texts = [t.get_text() for t in fig.axes[0].texts] + [t.get_text() for t in fig.texts]
    assert "32 GPUs: a" in texts and any("coincide" in t for t in texts)
    assert "TPS/user SLO" in [ln.get_label() for ln in fig.axes[0].lines]
    m = _metrics()
    from dwdp_trtllm.sizing.search import Outcome
    rows = [(1.0, {k: Outcome(k, d[k], m, m, m) for k in d})]
    report.plot_rates(rows, tmp_path / "r.png", Slo(3.0, 5.0, None))
    fig = figs[-1]
    labels = [ln.get_label() for ln in fig.axes[0].lines]
    assert "TTFT p50 SLO" in labels and "TTFT p99 SLO" in labels
    assert any("1 x DEP8" in t.get_text() and "24 GPUs" in t.get_text() for t in fig.axes[0].texts)


# ---- values pinned by hand (a mutation of the metric or the threshold fails here) ------------------------

def _run(ttft, tpot, osl=11, window=10.0):
    from dwdp_trtllm.sizing.simulator import SimResult
    n = len(ttft)
    arr = np.linspace(0.0, window, n)
    first = arr + np.asarray(ttft, float)
    done = first + np.asarray(tpot, float) * (osl - 1)
    return SimResult(arr, first, done, np.full(n, 100), np.full(n, osl), window, 0.0, 0, 0.0)


def test_goodput_counts_only_requests_within_their_own_ttft_and_tps_targets():
    """4 requests in a 10 s window: TTFTs 1, 2, 3, 4 s and TPOTs 10, 10, 10, 100 ms. TTFT <= 2.5 s keeps 2 (0.2
    req/s); adding TPS/user >= 50 drops none of those; TPS/user >= 50 alone drops the 100 ms one (0.3 req/s)."""
    r = _run([1, 2, 3, 4], [0.01, 0.01, 0.01, 0.1])
    assert summarize(r, 1, Slo(None, 2.5, None)).goodput_rps == pytest.approx(0.2)
    assert summarize(r, 1, Slo(None, 2.5, 50.0)).goodput_rps == pytest.approx(0.2)
    assert summarize(r, 1, Slo(None, None, 50.0)).goodput_rps == pytest.approx(0.3)
    assert summarize(r, 1, Slo()).goodput_rps == pytest.approx(0.4) == summarize(r, 1, Slo()).offered_rps


def test_the_binding_constraint_thresholds():
    """The side holding at least half the GPUs binds; on the generation side KV transfer binds above 10% of a
    request's generation time (TPOT x OSL)."""
    from dwdp_trtllm.sizing.context_cost import ContextCost
    from dwdp_trtllm.sizing.search import _binding
    p = _problem("--ttft-p99", "5")
    cost = ContextCost(p.spec, "dep", 8)
    r = _run([1, 1], [0.02, 0.02], osl=101)  # TPOT 20 ms, OSL 101: a request's generation 2.02 s
    m = summarize(r, 16, Slo())
    even = Deployment("dep", 8, 2, 8192, 8, 2, 32)  # 16 ctx + 16 gen: the context side binds
    assert _binding(p, even, r, cost, m).startswith("context compute (TTFT SLO)")
    gen = Deployment("dep", 8, 2, 8192, 8, 3, 32)  # 16 ctx + 24 gen
    for kv_each, want in ((0.19, "generation"), (0.21, "KV transfer")):  # 10% of 2.02 s is 0.202 s
        r.kv_s = kv_each * 2
        assert _binding(p, gen, r, cost, m).startswith(want), kv_each
    no_ttft = _problem()
    assert "TTFT" not in _binding(no_ttft, even, r, cost, m)
