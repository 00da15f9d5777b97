"""`dwdp plan --target trtllm`: TensorRT-LLM's kernel tables (package data), ranges, extrapolation marks,
the range-based recommendation and independence from a checkout's docs/ (issue 24, issue 21 item 4).

Reference numbers: /work/shared/reference/aiconfigurator-crosscheck.md (aiconfigurator-core 0.12.0, h200_sxm,
TensorRT-LLM 1.3.0rc20 tables, DeepSeek-R1 FP8 DEP8 at 16K tokens per rank), read there from the same parquet rows
scripts/extract_aiconfigurator.py copies.
"""
import json
from pathlib import Path

import numpy as np
import pytest

from dwdp_trtllm.cli import main
from dwdp_trtllm.commands import plan as plan_cmd
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.perf import kernel_tables as kt
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.planner import break_even_tokens, plan, predict
from dwdp_trtllm.perf.plan_spec import PlanSpec
from dwdp_trtllm.perf.recommend import recommend
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig

R1 = get_model("deepseek-r1")
#: the floor campaign shipped in dwdp_trtllm/data/engine_calibration (scripts/dev/adopt_floor_campaign.py rewrites this pin)
SHIPPED_CAMPAIGN = "engine_floor_2026-12-03e"
QWEN = get_model("qwen3-235b-a22b")


def _spec(**kw):
    base = dict(model=R1, gpu=get_gpu("h200"), weight_dtype="fp8", dwdp_sizes=(8,), isls=(4096,), batch=None,
                mnt=16384, target="trtllm")
    return PlanSpec(**{**base, **kw})


def test_tables_ship_with_the_package_and_record_their_source():
    for gpu in ("h100", "h200", "b200", "gb200"):
        path = kt.package_table_path(gpu)
        assert path is not None and path.is_relative_to(Path(kt.__file__).parents[1] / "data")
        data = kt.load_tables(str(path))
        assert data["source"]["package"] == "aiconfigurator-core" and data["source"]["version"] == "0.12.0"
        moe = data["models"]["deepseek-v3"]["moe"]["fp8"]
        assert moe["table"].startswith(f"{data['system']}/moe/trtllm/") and moe["version"].startswith("1.3.0rc")
    assert kt.shape_tables(R1, "h200").name == "deepseek-v3" and kt.shape_tables(QWEN, "h200").name == "qwen3-235b-a22b"
    assert kt.shape_tables(get_model("mixtral-8x7b"), "h200") is None
    # no table for the shape, or none for this weight dtype on this GPU: priced (and labelled) as the engine
    assert _spec(model=get_model("mixtral-8x7b")).priced_as.startswith("engine (no TensorRT-LLM kernel table")
    assert _spec(gpu=get_gpu("b200"), weight_dtype="bf16").priced_as.startswith("engine (no TensorRT-LLM")
    assert _spec(gpu=get_gpu("b200"), weight_dtype="nvfp4").priced_as == "trtllm"


def test_trtllm_target_prices_the_crosscheck_rows():
    """DEP8, ISL 4K x 4 per rank: aiconfigurator's per-op numbers (crosscheck section 2) come back from the tables."""
    # aiconfigurator prices DEP8's communication as NCCL AG + RS: the crosscheck names that path (the default is DeepEP)
    r = predict(_spec(dep_comm="allgather_reducescatter"), 8, 0, 2 << 20, 4096)
    assert r.target == "trtllm" and r.tokens_per_rank == 16384
    assert r.t_experts_dep_us / 1e3 == pytest.approx(19.99, rel=0.01)  # EP8 balanced 16K row x 8
    assert r.t_experts_dwdp_us / 1e3 == pytest.approx(22.03, rel=0.01)  # EP1 balanced 16K row
    assert r.t_all2all_us / 1e3 == pytest.approx(9.75, rel=0.01)  # NCCL AG + RS, 8 GPUs
    assert r.t_attention_us / 1e3 == pytest.approx(13.84, rel=0.05)  # the MLA module row
    assert r.t_other_us / 1e3 == pytest.approx(1.58, rel=0.05)  # shared experts fp8_block + router bf16
    eng = predict(_spec(target="engine"), 8, 0, 2 << 20, 4096)
    assert eng.target == "engine" and eng.t_experts_dep_us != pytest.approx(r.t_experts_dep_us, rel=0.05)


def test_extrapolated_cells_are_marked_and_widen_the_range(capsys):
    far = predict(_spec(dep_comm="allgather_reducescatter"), 8, 0, 2 << 20, 4096)  # DEP8 MoE call = 131K tokens,
    assert far.extrapolated["routed experts (DEP, EP8)"] == "8.0x the last row"  # the table stops at 16K
    assert "DEP communication" in far.extrapolated  # the NCCL rows stop at 268M elements (131K x 7168 = 940M)
    # the default path on H200 (DeepEP): its rows go to 65,536 tokens per rank, past this 16,384
    assert "DEP communication" not in predict(_spec(), 8, 0, 2 << 20, 4096).extrapolated
    near = predict(_spec(mnt=2048, isls=(2048,)), 8, 0, 2 << 20, 2048)  # 16K tokens per call: inside
    assert not any("DEP" in k for k in near.extrapolated)
    assert far.speedup_low < far.speedup < far.speedup_high
    assert main(["plan", "--dwdp-size", "8", "--mnt", "16384", "--isl", "4096", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["extrapolated"]["routed experts (DEP, EP8)"] == "8.0x the last row"
    assert main(["plan", "--dwdp-size", "8", "--mnt", "16384", "--isl", "4096"]) == 0
    out = capsys.readouterr().out
    assert "†" in out and "†: priced past its kernel table's last row" in out


def test_recommendation_reads_the_range_not_its_optimistic_end():
    spec = _spec(isls=(4096, 8192))
    rows = plan(spec)
    assert all(r.speedup > 1 and r.speedup_low < 1 < r.speedup_high for r in rows)
    rec = recommend(spec, rows)
    assert rec.verdict == "marginal" and not rec.use_dwdp
    assert rec.reason.startswith(f"marginal: depends on {rec.depends_on} - ") and rec.depends_on
    # every input at DWDP's better end, as a certainty: the same rows read DWDP
    sure = [r.__class__(**{**r.__dict__, "speedup_low": 1.01, "verdict": "DWDP"}) for r in rows]
    assert recommend(spec, sure).verdict == "DWDP"
    lost = [r.__class__(**{**r.__dict__, "speedup_high": 0.99, "verdict": "DEP"}) for r in rows]
    assert recommend(spec, lost).verdict == "DEP"


def test_json_carries_the_recommendation(capsys):
    assert main(["plan", "--dwdp-size", "8", "--mnt", "16384", "--isl", "8192", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rec = out["recommendation"]
    assert rec["verdict"] in ("DWDP", "DEP", "marginal") and len(rec["speedup_range"]) == 2
    assert out["priced_as"] == "trtllm" and out["memory_unit"] == "GB"
    r = out["rows"][0]
    assert r["speedup_low"] <= r["speedup"] <= r["speedup_high"] and r["break_even_tokens"] > 0


def test_one_gpu_interference_never_sets_the_multi_gpu_one(tmp_path, capsys):
    d = tmp_path / "bench"
    d.mkdir()
    (d / "copy.json").write_text(json.dumps({"device": "NVIDIA H200", "gemm_slowdown": 1.02}))
    argv = ["plan", "--target", "engine", "--bench-results", str(d), "--dwdp-size", "8", "--mnt", "16384",
            "--isl", "8192", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["interference"].startswith("interference priors: attention core 1.19x")
    assert any("one-GPU measurement" in n for n in out["calibration_notes"])


@pytest.mark.parametrize("target", ["trtllm", "engine"])
def test_plan_is_the_same_with_or_without_a_checkout_docs_dir(tmp_path, monkeypatch, capsys, target):
    argv = ["plan", "--dwdp-size", "8", "--mnt", "16384", "--isl", "4096,16384", "--target", target, "--json"]
    assert main(argv) == 0
    here = capsys.readouterr().out
    if target == "engine":  # calibrated by the shipped floor campaign
        assert f"{SHIPPED_CAMPAIGN}/b8.json" in here and str(plan_cmd.PACKAGE_CAL_DIR) not in here
    monkeypatch.chdir(tmp_path)  # away from the checkout: the default is package data, not docs/bench_results
    assert main(argv) == 0
    assert capsys.readouterr().out == here


def test_shipped_engine_calibration_is_a_copy_of_a_committed_campaign():
    shipped = sorted(plan_cmd.PACKAGE_CAL_DIR.glob("*/*.json"))
    assert shipped and {p.parent.name for p in shipped} == {SHIPPED_CAMPAIGN}  # one campaign, the pinned one
    checkout = Path(__file__).resolve().parents[2] / "docs/bench_results" / shipped[0].parent.name
    if checkout.is_dir():  # a source checkout: byte-for-byte the committed files
        for p in shipped:
            assert p.read_bytes() == (checkout / p.name).read_bytes(), p.name


def test_no_arguments_plan_a_deployment_that_fits(capsys):
    assert main(["plan", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] and all(r["fits"] for r in out["rows"]) and {r["dwdp_size"] for r in out["rows"]} == {8}
    assert main(["plan"]) == 0
    shown = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("│", "recommendation"))]  # not the legend
    assert shown and not any("nothing fits" in ln for ln in shown)


def test_calibration_notes_are_one_line_unless_verbose(tmp_path, capsys):
    d = tmp_path / "bench"
    d.mkdir()
    for i in range(5):
        (d / f"b200_{i}.json").write_text(json.dumps({"device": "NVIDIA B200", "p2p_gbps": 700}))
    argv = ["plan", "--target", "engine", "--bench-results", str(d), "--dwdp-size", "8", "--isl", "8192"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "5 calibration note(s)" in out and "note: skipped" not in out
    assert main(argv + ["--verbose"]) == 0
    out = capsys.readouterr().out
    assert out.count("note: skipped b200_") == 5 and str(d) + "/b200" not in out  # relative to the data root


def test_power_law_skew_uses_the_skewed_rows():
    bal = predict(_spec(), 8, 0, 2 << 20, 4096)
    skew = predict(_spec(routing_skew=RoutingSkewConfig(kind="power_law", alpha=1.01)), 8, 0, 2 << 20, 4096)
    assert skew.routing_skew.startswith("power_law_1.01")
    assert skew.t_experts_dep_us / 1e3 == pytest.approx(32.08, rel=0.01)  # EP8 power_law_1.01 16K row x 8
    assert skew.t_experts_dwdp_us / 1e3 == pytest.approx(22.60, rel=0.01)  # EP1 power_law_1.01 16K row
    assert skew.speedup > bal.speedup
    zipf = predict(_spec(routing_skew=RoutingSkewConfig(kind="zipf", alpha=1.2)), 8, 0, 2 << 20, 4096)
    assert zipf.t_experts_dep_us > bal.t_experts_dep_us  # not a table distribution: imbalance.skew_term factors


def test_break_even_tokens_is_where_the_prefetch_is_hidden():
    spec = _spec(isls=(8192,))
    be = break_even_tokens(spec, 8, 0, 2 << 20, 8192)
    assert 1000 < be < 1 << 20
    below = predict(_spec(isls=(8192,), mnt=None, batch=1), 8, 0, 2 << 20, 8192)  # 8K tokens per rank
    assert (below.tokens_per_rank < be) == (not below.prefetch_hidden)
    r = predict(spec, 8, 0, 2 << 20, 8192)
    assert r.break_even_range[0] <= r.break_even_tokens <= r.break_even_range[1] and r.break_even_range[0] < r.break_even_range[1]
    assert np.isfinite(r.break_even_tokens)


def test_curve_lookup_interpolates_inside_and_marks_beyond():
    pts = [[1024, 1.0], [2048, 1.5], [16384, 8.0]]
    ms, beyond = kt.curve_ms(pts, np.array([512, 1536, 16384, 131072]))
    assert ms.tolist() == pytest.approx([1.0, 1.25, 8.0, 64.0])  # floor below, linear inside, constant rate past
    assert beyond.tolist() == pytest.approx([0, 0, 0, 3.0])  # 8x the last row = 3 doublings
    lo, hi = kt.beyond_range(beyond)
    assert lo[-1] == pytest.approx(0.95 ** 3) and hi[-1] == pytest.approx(1.05 ** 3) and lo[0] == hi[0] == 1.0


def test_deepep_rows_interpolate_over_hidden_size():
    t = kt.shape_tables(R1, "h200")
    a, _ = t.deepep_ms(6144, 8, 16384)
    b, _ = t.deepep_ms(7168, 8, 16384)
    mid, _ = t.deepep_ms(6656, 8, 16384)
    assert float(b) == pytest.approx(5.93, rel=0.01)  # crosscheck: dispatch + combine at 16K tokens per rank
    assert float(mid) == pytest.approx((float(a) + float(b)) / 2)
    assert t.deepep_ms(7168, 4, 16384) == (None, None)  # EP 8 rows only
