"""The DEP a Hopper user would otherwise run (issue 31): besides TensorRT-LLM's default, DeepEP + DeepGEMM (what
SGLang deploys) priced from published numbers; a plan shows both unless --dep names one."""
from __future__ import annotations

import json

import pytest

from dwdp_trtllm.cli import build_parser, main
from dwdp_trtllm.commands.plan import DEP_VARIANTS, build_spec
from dwdp_trtllm.perf import dep_variants as dv
from dwdp_trtllm.perf.planner import plan

R1 = ["--model", "deepseek-r1", "--gpu", "h200", "--weight-dtype", "fp8", "--dwdp-size", "8", "--mnt", "16384",
      "--isl", "8192"]


def test_parser_spells_the_variants():
    assert DEP_VARIANTS == dv.VARIANTS


def test_plan_shows_both_unless_one_is_named(capsys):
    assert main(["plan", *R1, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dep_variants"] == ["trtllm", "deepep_deepgemm"] and set(doc["recommendations"]) == set(dv.VARIANTS)
    assert sorted(r["dep_variant"] for r in doc["rows"]) == ["deepep_deepgemm", "trtllm"]
    assert main(["plan", *R1]) == 0
    out = capsys.readouterr().out
    assert "vs TensorRT-LLM's DEP, --dep trtllm:" in out and "vs DeepEP+DeepGEMM DEP (SGLang), --dep deepep_deepgemm:" in out
    assert "recommendation against trtllm:" in out and "recommendation against deepep_deepgemm:" in out
    assert main(["plan", *R1, "--json", "--dep", "deepep_deepgemm"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["dep_variant"] for r in doc["rows"]] == ["deepep_deepgemm"]


def test_deepgemm_variant_only_where_it_is_priced(capsys):
    spec = build_spec(build_parser().parse_args(["plan", "--gpu", "b200", "--weight-dtype", "nvfp4", "--isl", "8192"]))
    assert spec.dep_variants == ("trtllm",)  # Blackwell / NVFP4: TensorRT-LLM's DEP only
    assert main(["plan", "--gpu", "b200", "--weight-dtype", "nvfp4", "--isl", "8192", "--dep", "deepep_deepgemm"]) == 2
    assert "--dep" in capsys.readouterr().err


def test_deepgemm_variant_priced_from_the_published_rates():
    spec = build_spec(build_parser().parse_args(["plan", *R1, "--routing-skew", "none", "--dep-comm", "deepep"]))
    trt, dg = plan(spec)
    assert (trt.dep_variant, dg.dep_variant) == ("trtllm", "deepep_deepgemm")
    # DWDP's side is the same model whichever DEP it is compared with
    assert dg.t_dwdp_us == pytest.approx(trt.t_dwdp_us) and dg.t_attention_us == pytest.approx(trt.t_attention_us)
    rows = 16384 * 8 * 8 / 8 + 32 * 127 / 2  # the EP rank's routed rows, 128-row blocks half filled on average
    want = (2 * rows * 7168 * 4096 / 1346e12 + 2 * rows * 2048 * 7168 / 1214e12) * 1e6
    assert dg.t_experts_dep_us == pytest.approx(want, rel=1e-9)
    # communication: the published 8xH200 DeepEP + grouped GEMM layer (1.205 x Mega MoE), linear past 8K tokens
    slope = (7.49 - 3.87) * 1.205 / 4096
    anchor_ms = 7.49 * 1.205 + slope * (16384 - 8192)
    assert dg.t_all2all_us == pytest.approx(anchor_ms * 1e3 - want, rel=1e-6)
    assert "DEP communication" in dg.extrapolated and "DeepGEMM" in dg.dep_comm
    # the components alone (DeepEP at 153/160 and 158/160 of the link) are the range's DEP-fast end
    comp = dv.comm_us(spec.model, spec.gpu, [[16384] * 8], 8)[0]
    assert comp < dg.t_all2all_us and dg.speedup_low < dg.speedup < dg.speedup_high


def test_a_measured_all_to_all_prices_the_deepep_deepgemm_dep_too(tmp_path, capsys):
    """A calibration's all_to_all_gbps makes DEP communication a measured input: every DEP the plan compares against
    is priced with it (the DeepEP + DeepGEMM variant ignored it while the plan listed it as measured)."""
    import json

    from dwdp_trtllm.cli import main

    f = tmp_path / "a2a.json"
    f.write_text(json.dumps({"all_to_all_gbps": 300.0}))

    def rows(*extra):
        assert main(["plan", "--isl", "8192", "--no-bench-results", "--json", "--dep", "deepep_deepgemm", *extra]) == 0
        return json.loads(capsys.readouterr().out)
    base, cal = rows(), rows("--calibration", str(f))
    (b,), (c,) = base["rows"], cal["rows"]
    assert c["t_dep_us"] != b["t_dep_us"] and "measured all-to-all bandwidth 300 GB/s" in c["dep_comm"]
    assert {i["input"]: i["status"] for i in cal["inputs"]}["DEP communication"] == "measured"
