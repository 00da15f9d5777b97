"""A verdict on a GPU family nothing measured the peer copies of (no calibration, no published measurement, or one
that pulled from fewer peers than the plan does) is "marginal: no measurement of ..." unless the whole range, with
the peer copies and interference as wide as that evidence (uncertainty.NO_EVIDENCE_PEER_LOW,
NO_EVIDENCE_INTERFERENCE), stays on one side of 1."""
import json

import pytest

from dwdp_trtllm.cli import main
from dwdp_trtllm.perf.hardware import SPEC_DIR

MI355X = ["--model", "deepseek-r1", "--gpu", "mi355x", "--weight-dtype", "mxfp4", "--dwdp-size", "8", "--mnt", "32768",
          "--no-bench-results"]


def _plan(capsys, argv) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _spec(tmp_path, evidence: str | None, assumed_compute: bool = False):
    """h200.yaml under another name (so both files price alike), its peer.evidence replaced."""
    lines = []
    for ln in (SPEC_DIR / "h200.yaml").read_text().splitlines():
        if ln.startswith("name:"):
            ln = "name: h200-copy"
        elif ln.strip().startswith("evidence:"):
            ln = f'  evidence: {json.dumps(evidence) if evidence else "null"}'
        if not assumed_compute:
            ln = ln.replace("ASSUMPTION", "MEASURED")  # compute efficiencies as measured: only the copies ranged wide
        lines.append(ln)
    p = tmp_path / f"h200-copy-{'with' if evidence else 'without'}.yaml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


@pytest.mark.parametrize("stated", [[], ["--interference", "1.15"]])  # the published row states 1.15
def test_mi355x_isl_4k_8k_are_not_dwdp_and_say_what_was_not_measured(capsys, stated):
    out = _plan(capsys, MI355X + ["--isl", "4096,8192", *stated])
    assert [r["verdict"] for r in out["rows"]] == ["marginal", "marginal"]  # the port measured 0.579x and 0.529x
    rec = out["recommendation"]
    assert rec["verdict"] == "marginal"
    assert rec["reason"].startswith("marginal: no measurement of peer copies from 7 peers at once on mi355x (the "
                                    "published one pulled from 3: sgl-project/sglang#33310")
    # the range holds the port's measurements, which the narrower evidence-free prior (3 of 7 links) did not
    lo = {r["isl"]: r["speedup_low"] for r in out["rows"]}
    assert lo[4096] < 0.579 and lo[8192] < 0.529


def test_the_same_gpu_with_and_without_published_evidence(capsys, tmp_path):
    """Qwen3-235B, 16K tokens per rank: DWDP over the whole range where the copies are evidenced; without evidence
    the peer range reaches NO_EVIDENCE_PEER_LOW and interference twice its excess, the verdict says what is missing."""
    from dwdp_trtllm.perf.uncertainty import NO_EVIDENCE_PEER_LOW
    argv = ["--model", "qwen3-235b-a22b", "--dwdp-size", "8", "--isl", "4096,16384", "--mnt", "16384"]
    seen = _plan(capsys, argv + ["--gpu-spec", _spec(tmp_path, "a published pull from every peer")])
    unseen = _plan(capsys, argv + ["--gpu-spec", _spec(tmp_path, None)])
    assert [r["verdict"] for r in seen["rows"]] == ["DWDP", "DWDP"]
    assert seen["recommendation"]["verdict"] == "DWDP"
    assert [r["verdict"] for r in unseen["rows"]] == ["marginal", "marginal"]
    assert unseen["recommendation"]["reason"].startswith("marginal: no measurement of peer copies on h200-copy (no "
                                                         "calibration, no published measurement")
    for a, b in zip(seen["rows"], unseen["rows"]):
        assert a["speedup"] == b["speedup"]  # evidence moves the range, never the nominal
        assert b["speedup_low"] < a["speedup_low"] and b["speedup_high"] >= a["speedup_high"]
    # the low end is the prefetch at NO_EVIDENCE_PEER_LOW of the modelled rate: DWDP's layer is at least that long
    for b in unseen["rows"]:
        assert b["t_dwdp_us_range"][0] >= b["t_prefetch_us"] / NO_EVIDENCE_PEER_LOW * (1 - 1e-9)
    # a calibration that measures the copies is the evidence: the verdict no longer says "no measurement"
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"gpu": "h200-copy", "peer_copy_gbps": 375.0}))
    measured = _plan(capsys, argv + ["--gpu-spec", _spec(tmp_path, None), "--calibration", str(cal)])
    assert "no measurement" not in measured["recommendation"]["reason"]
    assert [r["verdict"] for r in measured["rows"]] == ["DWDP", "DWDP"]


def test_a_range_wholly_on_one_side_keeps_its_verdict_without_evidence(capsys, tmp_path):
    """One request of 1K tokens per rank: the prefetch is exposed at any peer bandwidth; DEP over the whole wide range."""
    out = _plan(capsys, ["--gpu-spec", _spec(tmp_path, None), "--dwdp-size", "8", "--isl", "1024", "--batch", "1"])
    assert out["rows"][0]["speedup_high"] < 1 and out["rows"][0]["verdict"] == "DEP"
    assert out["recommendation"]["verdict"] == "DEP" and "no measurement" not in out["recommendation"]["reason"]


def test_the_interference_line_says_the_wide_range(capsys, tmp_path):
    assert main(["plan", "--gpu-spec", _spec(tmp_path, None), "--dwdp-size", "8", "--isl", "8192"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the line wraps at 80 columns
    assert "range: none to 2x each excess: nothing measured copies on h200-copy" in out
    assert main(["plan", "--dwdp-size", "8", "--isl", "8192", "--dep", "trtllm"]) == 0
    assert "range: half to 1.5x each excess" in " ".join(capsys.readouterr().out.split())
