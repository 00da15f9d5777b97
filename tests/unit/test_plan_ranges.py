"""Ranges hold what is not known (issue 31): an input neither measured nor stated is a range, a verdict is DWDP or
DEP only over the whole range, a calibration file fixes exactly the inputs it measures, and every plan says which
inputs were measured (from which file), stated, or priors."""
from __future__ import annotations

import json

import pytest

from dwdp_trtllm.cli import build_parser, main
from dwdp_trtllm.commands.plan import build_spec
from dwdp_trtllm.perf.inputs import statuses
from dwdp_trtllm.perf.planner import plan
from dwdp_trtllm.perf.recommend import recommend

R1_H200 = ["--model", "deepseek-r1", "--gpu", "h200", "--weight-dtype", "fp8", "--dwdp-size", "8", "--mnt", "16384"]
MI355X = ["--model", "deepseek-r1", "--gpu", "mi355x", "--weight-dtype", "mxfp4", "--dwdp-size", "8", "--mnt", "32768",
          "--no-bench-results"]


def _plan(*argv):
    spec = build_spec(build_parser().parse_args(["plan", *argv]))
    rows = plan(spec)
    return spec, rows, recommend(spec, rows)


def _status(spec, name):
    return next(s for s in statuses(spec) if s.name == name)


@pytest.mark.parametrize("argv", [R1_H200 + ["--isl", "4096,16384"], MI355X + ["--isl", "4096,8192,32768"],
                                  ["--model", "deepseek-r1", "--gpu", "gb200", "--weight-dtype", "nvfp4",
                                   "--dwdp-size", "4", "--isl", "8192", "--mnt", "32768"]])
def test_unmeasured_peer_bandwidth_never_says_dwdp_on_a_range_crossing_one(argv):
    spec, rows, rec = _plan(*argv)
    assert _status(spec, "peer bandwidth").status == "prior"
    for r in rows:
        assert r.verdict != "DWDP" or r.speedup_low > 1.0, r
        assert r.verdict != "DEP" or r.speedup_high < 1.0 or not r.fits, r
    if rec.verdict == "DWDP":
        assert all(r.speedup_low > 1 for r in rows if r.isl in dict(rec.by_isl) and dict(rec.by_isl)[r.isl] == "DWDP")


def test_mi355x_4k_8k_no_longer_claim_dwdp():
    """The port measured 0.58x / 0.53x; its copy efficiency is one 3-peer measurement, which the range does not scale
    to 7 links at its low end."""
    spec, rows, rec = _plan(*MI355X, "--isl", "4096,8192", "--interference", "1.15")
    assert [r.verdict for r in rows] == ["marginal", "marginal"]
    assert all(r.speedup_low < 1 < r.speedup_high for r in rows)
    assert rec.verdict == "marginal" and "`dwdp calibrate`" in rec.reason
    assert rec.reason.startswith("marginal: no measurement of peer copies from 7 peers at once on mi355x")


def test_default_range_holds_both_answers_of_the_two_defaults():
    """R1 FP8 DEP8 vs DWDP8, 16K tokens per rank: balanced + DeepEP (the nominal) and aiconfigurator's power_law_1.01 +
    all-gather/reduce-scatter both lie inside the default plan's range; stating them collapses it. DWDP's experts
    priced with TensorRT-LLM's table (`--gemm merge`: the host runs its CUTLASS MoE), where the range straddles 1."""
    merge = ("--gemm", "merge")
    _, rows, rec = _plan(*R1_H200, *merge, "--isl", "8192")
    _, stated, _ = _plan(*R1_H200, *merge, "--isl", "8192", "--routing-skew", "power_law_1.01", "--dep-comm",
                         "allgather_reducescatter")
    _, bal, _ = _plan(*R1_H200, *merge, "--isl", "8192", "--routing-skew", "none", "--dep-comm", "deepep")
    r = rows[0]
    assert r.speedup_low <= bal[0].speedup <= r.speedup_high
    assert r.speedup_low <= stated[0].speedup <= r.speedup_high and stated[0].speedup > 1.3
    assert r.verdict == "marginal"
    # stated inputs are fixed: the stated plan's range is narrower than the default's
    assert stated[0].speedup_high - stated[0].speedup_low < r.speedup_high - r.speedup_low


def test_verdict_line_names_the_extrapolated_cells():
    _, rows, rec = _plan(*R1_H200, "--isl", "8192")
    assert rows[0].extrapolated  # 16K tokens x 8 ranks enter DEP's MoE: past the table's last row
    assert "past the kernel tables: routed experts (DEP, EP8) 8.0x the last row" in rec.reason


def test_calibration_file_changes_the_plan_exactly_where_it_should(tmp_path):
    """peer_copy_gbps: the prefetch time and the peer range move, DEP does not; all_to_all_gbps: DEP's communication
    moves, the prefetch does not; each input is then 'measured' with its file."""
    base_spec, base, _ = _plan(*R1_H200, "--isl", "8192")
    peer = tmp_path / "peer.json"
    peer.write_text(json.dumps({"gpu": "h200", "peer_copy_gbps": 300.0}))
    spec, rows, _ = _plan(*R1_H200, "--isl", "8192", "--calibration", str(peer))
    b, r = base[0], rows[0]
    modelled = 450 * 0.8333333333333334  # h200.yaml: NVLink one way x the public copy efficiency
    assert r.t_prefetch_us == pytest.approx(b.t_prefetch_us * modelled / 300.0, rel=1e-6)
    assert r.t_dep_us == pytest.approx(b.t_dep_us) and r.t_all2all_us == pytest.approx(b.t_all2all_us)
    assert r.t_compute_us == pytest.approx(b.t_compute_us)
    st = _status(spec, "peer bandwidth")
    assert st.status == "measured" and st.source == str(peer)
    assert _status(base_spec, "peer bandwidth").status == "prior"
    assert _status(spec, "DEP communication").status == "prior"

    a2a = tmp_path / "a2a.json"
    a2a.write_text(json.dumps({"gpu": "h200", "all_to_all_gbps": 200.0}))
    spec, rows, _ = _plan(*R1_H200, "--isl", "8192", "--calibration", str(a2a))
    r = rows[0]
    assert r.t_prefetch_us == pytest.approx(b.t_prefetch_us) and r.t_all2all_us != pytest.approx(b.t_all2all_us)
    assert "measured all-to-all bandwidth 200 GB/s" in r.dep_comm
    assert _status(spec, "DEP communication").status == "measured"
    assert _status(spec, "peer bandwidth").status == "prior"


def test_every_plan_lists_measured_given_and_prior_inputs(tmp_path, capsys):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"gpu": "h200", "peer_copy_gbps": 360.0}))
    assert main(["plan", *R1_H200, "--isl", "8192", "--calibration", str(cal), "--routing-skew", "none"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # prose wraps at 80 columns: read it as one text
    line = out[out.index("inputs: "):out.index("not priced: ")]
    assert f"measured: peer bandwidth ({cal})" in line
    assert "given: routing (--routing-skew none)" in line
    assert "priors (ranged): interference, DEP communication, extrapolated table cells" in line
    assert main(["plan", *R1_H200, "--isl", "8192", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {d["input"]: d["status"] for d in doc["inputs"]}["routing"] == "prior"


def test_assumed_compute_efficiencies_are_ranged_and_a_calibration_fixes_them(tmp_path):
    """MI355X's GEMM / attention / HBM efficiencies are ASSUMPTIONs in its spec file (target engine): a prior,
    ranged; TensorRT-LLM's kernel tables (H200) are measured; a calibration with measured GEMM rates fixes it."""
    spec, rows, _ = _plan(*MI355X, "--isl", "16384")
    assert _status(spec, "compute efficiencies").status == "prior"
    h200, _, _ = _plan(*R1_H200, "--isl", "8192")
    st = _status(h200, "compute efficiencies")
    assert st.status == "measured" and st.source == "TensorRT-LLM kernel tables"
    cal = tmp_path / "gemm.json"
    cal.write_text(json.dumps({"gpu": "mi355x", "grouped_gemm_tflops": {"fp8": [[1024, 2000.0], [65536, 3000.0]]},
                               "attention_tflops": 1200.0, "hbm_tbps": 6.4}))
    fixed_spec, fixed_rows, _ = _plan(*MI355X, "--isl", "16384", "--calibration", str(cal))
    assert _status(fixed_spec, "compute efficiencies").status == "measured"
    # fixing one input narrows the range from the prior's: the prior's width covers more than peer bandwidth alone
    width = rows[0].speedup_high - rows[0].speedup_low
    assert width > 0 and rows[0].speedup_low < rows[0].speedup < rows[0].speedup_high
    assert "compute efficiencies" not in {s.name for s in statuses(fixed_spec) if s.status == "prior"}
