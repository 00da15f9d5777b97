"""`dwdp plan`, `dwdp plan-placement` and `dwdp gen-config` show one memory model: the same per-rank GB, part by
part, for DWDP and DEP (their JSON outputs through cli.main, not the function), over models x dtypes x G x GPUs."""
from __future__ import annotations

import json

import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.memory import PARTS

MODELS = ("deepseek-r1", "deepseek-v3", "qwen3-235b-a22b")
CASES = [(m, wd, g, gpu) for m in MODELS for wd in ("bf16", "fp8") for g in (4, 8) for gpu in ("h100", "h200")]


def _json(capsys, argv: list[str]) -> tuple[int, dict | list | None, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, (json.loads(cap.out) if cap.out.strip().startswith(("{", "[")) else None), cap.err


def _plan_rows(doc):
    return doc["rows"] if isinstance(doc, dict) else doc


@pytest.mark.parametrize("model,wd,g,gpu", CASES)
def test_plan_plan_placement_and_gen_config_agree_part_by_part(tmp_path, capsys, model, wd, g, gpu):
    rc, place, _ = _json(capsys, ["plan-placement", "--model", model, "--weight-dtype", wd, "--dwdp-size", str(g),
                                  "--gpu", gpu, "--max-num-tokens", "16384", "--json"])
    dwdp, dep = place["memory"]["dwdp"], place["memory"]["dep"]
    assert rc == (0 if dwdp["fits"] else 1) and dwdp["unit"] == dep["unit"] == "GB"
    assert dwdp["gpu_gb"] == {"h100": 80, "h200": 141}[gpu]

    rc, plan, _ = _json(capsys, ["plan", "--model", model, "--weight-dtype", wd, "--dwdp-size", str(g), "--gpu", gpu,
                                 "--isl", "8192", "--mnt", "16384", "--no-bench-results", "--json"])
    assert rc == 0
    (row,) = _plan_rows(plan)
    for p, label in PARTS.items():
        assert row["memory_parts_gb"][label] == pytest.approx(dwdp[f"{p}_gb"], abs=1e-3), (p, "dwdp")
        assert row["memory_dep_parts_gb"][label] == pytest.approx(dep[f"{p}_gb"], abs=1e-3), (p, "dep")
    assert row["memory_per_rank_gb"] == pytest.approx(dwdp["total_gb"], abs=1e-6)
    assert row["memory_dep_gb"] == pytest.approx(dep["total_gb"], abs=1e-6)
    assert row["fits"] == dwdp["fits"]
    sm = place["memory"]["smallest_fitting"]
    assert (row["smallest_fitting_dwdp_size"], row["smallest_fitting_dep_size"]) == (sm["dwdp"], sm["dep"])

    rc, gen, err = _json(capsys, ["gen-config", "--preset", model, "--weight-dtype", wd, "--dwdp-size", str(g),
                                  "--gpu", gpu, "--model", "m", "--out", str(tmp_path / "o"), "--json"])
    if not dwdp["fits"]:  # refused, naming the same total; nothing written
        assert rc == 2 and f"DWDP{g} per rank {dwdp['total_gb']:.1f} GB of {dwdp['gpu_gb']:.1f} GB" in err
        assert not (tmp_path / "o").exists()
        return
    assert rc == 0, err
    for key, want in (("context_dwdp", dwdp), ("context_dep_alternative", dep)):
        got = gen["memory"][key]
        for p in PARTS:
            assert got[f"{p}_gb"] == want[f"{p}_gb"], (key, p)
        assert got["total_gb"] == want["total_gb"]


def test_nothing_fits_4xh200_r1_fp8_names_the_gpu_count_per_mode(capsys):
    rc, plan, _ = _json(capsys, ["plan", "--dwdp-size", "4", "--isl", "8192", "--mnt", "16384", "--no-bench-results",
                                 "--json"])  # the defaults: deepseek-r1, fp8, h200
    assert rc == 0
    (row,) = _plan_rows(plan)
    assert not row["fits"] and row["memory_dep_gb"] > 141
    assert (row["smallest_fitting_dwdp_size"], row["smallest_fitting_dep_size"]) == (7, 6)
    rc, place, err = _json(capsys, ["plan-placement", "--dwdp-size", "4", "--json"])
    assert rc == 1 and place["memory"]["smallest_fitting"] == {"dwdp": 7, "dep": 6}
    assert "smallest GPU count that fits: DWDP 7 GPUs, DEP 6 GPUs" in err
    assert cli.main(["plan", "--dwdp-size", "4", "--isl", "8192", "--mnt", "16384", "--no-bench-results"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the table wraps long lines
    assert "nothing fits 4 GPUs" in out and "smallest GPU count that fits: DWDP 7, DEP 6" in out
    assert "use DEP here" not in out


@pytest.mark.parametrize("model,wd,gpu", [("deepseek-r1", "fp8", "h200"), ("deepseek-r1", "bf16", "h200"),
                                         ("qwen3-235b-a22b", "fp8", "h100")])
def test_the_three_commands_default_to_one_group_size_that_fits(tmp_path, capsys, model, wd, gpu):
    """Without --dwdp-size, plan (auto), plan-placement and gen-config pick one group size: memory.default_dwdp_size
    (plan-placement took the config default 1 and gen-config 4: R1 FP8 on H200 did not fit in either)."""
    from dwdp_trtllm.memory import default_dwdp_size, smallest_fitting
    from dwdp_trtllm.models import get_model

    spec, budget = get_model(model), {"h100": 80, "h200": 141}[gpu] * 10 ** 9
    want = default_dwdp_size(spec, budget, weight_dtype=wd, max_num_tokens=16384)
    g = smallest_fitting(spec, "dwdp", budget, weight_dtype=wd, max_num_tokens=16384)
    assert want >= g and want & (want - 1) == 0  # a power of two that fits
    rc, place, _ = _json(capsys, ["plan-placement", "--model", model, "--weight-dtype", wd, "--gpu", gpu, "--json"])
    assert rc == 0 and place["dwdp_size"] == want and place["memory"]["dwdp"]["fits"]
    rc, plan, _ = _json(capsys, ["plan", "--model", model, "--weight-dtype", wd, "--gpu", gpu, "--isl", "8192",
                                 "--mnt", "16384", "--no-bench-results", "--json"])
    assert rc == 0 and {r["dwdp_size"] for r in _plan_rows(plan)} == {want}
    rc, gen, err = _json(capsys, ["gen-config", "--preset", model, "--weight-dtype", wd, "--gpu", gpu, "--model", "m",
                                  "--out", str(tmp_path / "o"), "--json"])
    assert rc == 0, err
    assert gen["memory"]["context_dwdp"]["group_size"] == want and gen["memory"]["context_dwdp"]["fits"]
