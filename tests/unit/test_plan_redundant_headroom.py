"""The recommendation's "N more redundant experts per rank fit" is memory.rank_memory's answer (the one model of
per-rank bytes): N more fit the GPU by `dwdp plan`'s own memory column, N + 1 do not (unless every expert then sits
on every rank). It had its own headroom formula (each expert in every MoE layer plus two slots: 4 for R1 FP8 G=8 at
MNT 16K where 5 fit), ignoring that an expert held locally is no longer pulled into the prefetch slots."""
import json
import re

import pytest

from dwdp_trtllm.cli import main


def _plan(capsys, argv):
    assert main(["plan", *argv, "--json", "--dep", "trtllm"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("argv", [
    ["--dwdp-size", "8", "--mnt", "16384", "--isl", "8192"],  # R1 FP8 on 8x H200 (the no-argument deployment)
    ["--gpu", "gb200", "--weight-dtype", "nvfp4", "--dwdp-size", "4", "--batch", "1", "--isl", "16384", "--target",
     "engine", "--no-bench-results"],
    ["--model", "qwen3-235b-a22b", "--dwdp-size", "4", "--mnt", "32768", "--isl", "8192"],
])
def test_suggested_redundant_experts_fit_and_one_more_does_not(capsys, argv):
    out = _plan(capsys, argv)
    note = [n for n in out["recommendation"]["notes"] if "more redundant experts" in n]
    assert note, out["recommendation"]["notes"]
    n = int(re.search(r"try --redundant-experts (\d+)", note[0]).group(1))
    rows = _plan(capsys, [*argv, "--redundant-experts", f"{n},{n + 1}"])["rows"]
    assert [r["redundant_experts"] for r in rows] == [n, n + 1]
    assert rows[0]["fits"] and not rows[1]["fits"], [(r["redundant_experts"], r["memory_per_rank_gb"]) for r in rows]


def test_r1_fp8_on_8_h200_fits_4_more(capsys):
    out = _plan(capsys, ["--dwdp-size", "8", "--mnt", "16384", "--isl", "8192"])
    assert any("up to 4 more redundant experts per rank fit" in n for n in out["recommendation"]["notes"])


def test_every_expert_on_every_rank_is_said_when_it_fits(capsys):
    """8 layers of R1 in BF16 on G=4 (docs/PLANNER.md section 4): holding all 256 experts costs less than the headroom
    once the prefetch slots are gone."""
    out = _plan(capsys, ["--model", "deepseek-r1", "--num-layers", "8", "--gpu", "h200", "--dwdp-size", "4",
                         "--weight-dtype", "bf16", "--mnt", "32768", "--isl", "8192", "--target", "engine",
                         "--no-bench-results"])
    assert any("every expert fits on every rank" in n for n in out["recommendation"]["notes"])
    rows = _plan(capsys, ["--model", "deepseek-r1", "--num-layers", "8", "--gpu", "h200", "--dwdp-size", "4",
                          "--weight-dtype", "bf16", "--mnt", "32768", "--isl", "8192", "--target", "engine",
                          "--no-bench-results", "--redundant-experts", "192"])["rows"]
    assert rows[0]["fits"] and rows[0]["local_experts"] == 256
