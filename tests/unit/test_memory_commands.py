"""`dwdp plan`, `dwdp plan-placement` and `dwdp gen-config` show one memory model: the same per-rank GB, part by
part, for DWDP and DEP (their JSON outputs through cli.main, not the function), over models x dtypes x G x GPUs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.deploy.memory import PARTS

MODELS = ("deepseek-r1", "deepseek-v3", "qwen3-235b-a22b")
CASES = [(m, wd, g, gpu) for m in MODELS for wd in ("bf16", "fp8") for g in (4, 8) for gpu in ("h100", "h200")]


def _json(capsys, argv: list[str]) -> tuple[int, dict | list | None, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, (json.loads(cap.out) if cap.out.strip().startswith(("{", "[")) else None), cap.err


def _plan_rows(doc):
    """`dwdp plan --json`'s rows against TensorRT-LLM's DEP (it also prices other DEP variants; memory is the same)."""
    rows = doc["rows"] if isinstance(doc, dict) else doc
    return [r for r in rows if r.get("dep_variant", "trtllm") == "trtllm"]


@pytest.mark.parametrize("model,wd,g,gpu", CASES)
def test_plan_plan_placement_and_gen_config_agree_part_by_part(tmp_path, capsys, model, wd, g, gpu):
    _agree(tmp_path, capsys, wd, g, gpu, plan=["--model", model], place=["--model", model], gen=["--preset", model])


def _agree(tmp_path, capsys, wd, g, gpu, *, plan, place, gen, gpu_name=None):
    """plan-placement's memory (DWDP and DEP, part by part) is plan's row and gen-config's context servers'."""
    gpu_name = gpu_name or gpu
    rc, placed, _ = _json(capsys, ["plan-placement", *place, "--weight-dtype", wd, "--dwdp-size", str(g),
                                   "--gpu", gpu, "--max-num-tokens", "16384", "--json"])
    dwdp, dep = placed["memory"]["dwdp"], placed["memory"]["dep"]
    assert rc == (0 if dwdp["fits"] else 2) and dwdp["unit"] == dep["unit"] == "GB"  # a misfit: exit 2, as gen-config
    assert dwdp["gpu_gb"] == {"h100": 80, "h200": 141}[gpu_name]

    rc, planned, _ = _json(capsys, ["plan", *plan, "--weight-dtype", wd, "--dwdp-size", str(g), "--gpu", gpu_name,
                                    "--isl", "8192", "--mnt", "16384", "--no-bench-results", "--json"])
    assert rc == 0
    (row,) = _plan_rows(planned)
    for p, label in PARTS.items():
        assert row["memory_parts_gb"][label] == pytest.approx(dwdp[f"{p}_gb"], abs=1e-3), (p, "dwdp")
        assert row["memory_dep_parts_gb"][label] == pytest.approx(dep[f"{p}_gb"], abs=1e-3), (p, "dep")
    assert row["memory_per_rank_gb"] == pytest.approx(dwdp["total_gb"], abs=1e-6)
    assert row["memory_dep_gb"] == pytest.approx(dep["total_gb"], abs=1e-6)
    assert row["fits"] == dwdp["fits"]
    sm = placed["memory"]["smallest_fitting"]
    assert (row["smallest_fitting_dwdp_size"], row["smallest_fitting_dep_size"]) == (sm["dwdp"], sm["dep"])

    if gen is None:
        return None
    rc, gened, err = _json(capsys, ["gen-config", *gen, "--weight-dtype", wd, "--dwdp-size", str(g),
                                    "--gpu", gpu, "--out", str(tmp_path / "o"), "--json"] + (
                               [] if "--model" in gen else ["--model", "m"]))
    if not dwdp["fits"]:  # refused, naming the same total; nothing written
        assert rc == 2 and f"DWDP{g} per rank {dwdp['total_gb']:.1f} GB of {dwdp['gpu_gb']:.1f} GB" in err
        assert not (tmp_path / "o").exists()
        return
    assert rc == 0, err
    for key, want in (("context_dwdp", dwdp), ("context_dep_alternative", dep)):
        got = gened["memory"][key]
        for p in PARTS:
            assert got[f"{p}_gb"] == want[f"{p}_gb"], (key, p)
        assert got["total_gb"] == want["total_gb"]
    return gened


DIMS = Path(__file__).resolve().parents[2] / "dwdp_trtllm" / "data" / "models"


@pytest.mark.parametrize("dims", ["gpt-oss-120b.json", "glm-4.5.json"])
@pytest.mark.parametrize("wd,g", [("bf16", 8), ("fp8", 4), ("fp8", 8), ("nvfp4", 4)])
def test_dims_only_families_agree_part_by_part(tmp_path, capsys, dims, wd, g):
    """A family the engine cannot run (gpt_oss, glm4_moe), from its config.json dims (model_dims.py): plan,
    plan-placement (--model FILE) and gen-config (--preset FILE) give one memory answer on h200."""
    f = str(DIMS / dims)
    served = wd == "nvfp4"  # the embedded engine does not run these families; upstream DWDP runs NVFP4 only
    gen = _agree(tmp_path, capsys, wd, g, "h200", plan=["--model", f], place=["--model", f],
                 gen=["--preset", f] if served else None)
    if gen is not None:
        assert gen["engine"] == "upstream"
    if not served:  # refused in one line naming --weight-dtype, nothing written
        rc, _, err = _json(capsys, ["gen-config", "--preset", f, "--model", "m", "--weight-dtype", wd, "--out",
                                    str(tmp_path / "o")])
        assert rc == 2 and "--weight-dtype" in err and "NVFP4" in err and not (tmp_path / "o").exists(), err
        assert len(err.strip().splitlines()) == 1


def test_checkpoint_directory_and_gpu_spec_file(tmp_path, capsys):
    """gen-config --model DIR (its config.json gives the dims, the directory is written as model:) and --gpu as a GPU
    spec file (plan-placement, gen-config; --gpu-spec the alias): the same answer as the shipped name."""
    ckpt = tmp_path / "glm"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((DIMS / "glm-4.5.json").read_text())
    spec = str(Path(__file__).resolve().parents[2] / "dwdp_trtllm" / "data" / "gpus" / "h200.yaml")
    gen = _agree(tmp_path, capsys, "nvfp4", 8, spec, gpu_name="h200", plan=["--model", str(ckpt)],
                 place=["--model", str(ckpt / "config.json")], gen=["--model", str(ckpt)])
    assert gen is not None and gen["memory"]["gpu_gb"] == 141 and gen["memory"]["gpu"] == "h200"
    assert gen["summary"].endswith(", h200, 8 GPUs per node")
    rc, placed, err = _json(capsys, ["plan-placement", "--model", str(ckpt), "--dwdp-size", "8", "--gpu-spec", spec,
                                     "--json"])
    assert rc == 0 and placed["memory"]["dwdp"]["gpu_gb"] == 141, err
    assert yaml_model(tmp_path / "o") == str(ckpt)


def yaml_model(out: Path) -> str:
    import yaml

    (f,) = [p for p in out.glob("*.yaml") if p.name != "dwdp.yaml" and "proxy" not in p.name]
    return yaml.safe_load(f.read_text())["model"]


def test_unknown_model_names_the_flag(tmp_path, capsys):
    assert cli.main(["plan-placement", "--model", "nonesuch", "--json"]) == 2
    assert "--model" in capsys.readouterr().err
    assert cli.main(["gen-config", "--preset", "nonesuch", "--model", "m", "--out", str(tmp_path / "o")]) == 2
    assert "--preset" in capsys.readouterr().err and not (tmp_path / "o").exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads((DIMS / "glm-4.5.json").read_text()), "rope_theta": float("nan")}))
    for argv in (["plan-placement", "--model", str(bad)], ["gen-config", "--preset", str(bad), "--model", "m",
                                                           "--out", str(tmp_path / "o")]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "bad.json" in err and "rope_theta" in err and "got nan" in err, err


def test_nothing_fits_4xh200_r1_fp8_names_the_gpu_count_per_mode(capsys):
    rc, plan, _ = _json(capsys, ["plan", "--dwdp-size", "4", "--isl", "8192", "--mnt", "16384", "--no-bench-results",
                                 "--json"])  # the defaults: deepseek-r1, fp8, h200
    assert rc == 0
    (row,) = _plan_rows(plan)
    assert not row["fits"] and row["memory_dep_gb"] > 141
    assert (row["smallest_fitting_dwdp_size"], row["smallest_fitting_dep_size"]) == (8, 7)
    rc, place, err = _json(capsys, ["plan-placement", "--dwdp-size", "4", "--json"])
    assert rc == 2 and place["memory"]["smallest_fitting"] == {"dwdp": 8, "dep": 7}
    assert "smallest GPU count that fits: DWDP 8 GPUs, DEP 7 GPUs" in err
    assert cli.main(["plan", "--dwdp-size", "4", "--isl", "8192", "--mnt", "16384", "--no-bench-results"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the table wraps long lines
    assert "nothing fits 4 GPUs" in out and "smallest GPU count that fits: DWDP 8 GPUs, DEP 7 GPUs" in out
    assert "use DEP here" not in out


@pytest.mark.parametrize("model,wd,gpu", [("deepseek-r1", "fp8", "h200"), ("deepseek-r1", "bf16", "h200"),
                                         ("qwen3-235b-a22b", "fp8", "h100")])
def test_the_three_commands_default_to_one_group_size_that_fits(tmp_path, capsys, model, wd, gpu):
    """Without --dwdp-size, plan (auto), plan-placement and gen-config pick one group size: memory.default_dwdp_size
    (plan-placement took the config default 1 and gen-config 4: R1 FP8 on H200 did not fit in either)."""
    from dwdp_trtllm.deploy.memory import default_dwdp_size, smallest_fitting
    from dwdp_trtllm.spec.models import get_model

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


def test_nothing_fits_lists_the_parts_the_other_commands_list(capsys):
    """R1 FP8 on 4x H200: plan's "nothing fits" line names the DWDP rank's parts as plan-placement and gen-config do
    (memory.RankMemory.describe: the non-zero parts; plan listed 'all-to-all buffers 0.0' for a DWDP rank)."""
    import re

    rc, plan, _ = _json(capsys, ["plan", "--dwdp-size", "4", "--isl", "8192", "--mnt", "16384", "--no-bench-results",
                                 "--json"])
    assert rc == 0
    shown = re.search(r"DWDP4 needs [\d.]+ GB per rank \(([^)]*) at ISL", plan["recommendation"]["reason"]).group(1)
    rc, place, err = _json(capsys, ["plan-placement", "--dwdp-size", "4", "--json"])
    assert rc == 2
    described = re.search(r"\(does NOT fit\): (.*?); change", err).group(1)
    assert shown == described  # memory.parts_text in both: the labels, the GB and the unit alike


def test_plan_placement_prices_the_path_the_adapter_runs(tmp_path, capsys):
    """plan-placement prices prefetch slots as gen-config does (memory.rank_memory with the adapter's path): the
    default path on --gpu (fetched experts; says which), an integration YAML's `gemm: merge` at [E, ...] slots
    (R1 FP8 DWDP8: 2.82 GB more per rank); a `dwdp bench` config's gemm is the embedded engine's and not taken."""
    import json as _json
    from dwdp_trtllm.cli import main as _main
    assert _main(["plan-placement", "--dwdp-size", "8", "--json"]) == 0
    base = _json.loads(capsys.readouterr().out)["memory"]
    assert base["dwdp"]["gemm"] == "multi_buffer" and "sm_90" in base["gemm_priced_how"]
    f = tmp_path / "dwdp.yaml"
    f.write_text("engine: dwdp_trtllm\ndwdp_config:\n  dwdp_size: 8\n  weight_dtype: fp8\n  gemm: merge\n")
    assert _main(["plan-placement", "--config", str(f), "--json"]) == 0
    merge = _json.loads(capsys.readouterr().out)["memory"]
    assert merge["dwdp"]["gemm"] == "merge" and merge["gemm_priced_how"] == "the config file's gemm"
    assert round(merge["dwdp"]["prefetch_slots_gb"] - base["dwdp"]["prefetch_slots_gb"], 2) == 2.82
    b = tmp_path / "bench.yaml"
    b.write_text("model:\n  preset: deepseek-r1\ndwdp:\n  dwdp_size: 8\n  weight_dtype: fp8\n  gemm: merge\n")
    assert _main(["plan-placement", "--config", str(b), "--json"]) == 0
    assert _json.loads(capsys.readouterr().out)["memory"]["dwdp"]["gemm"] == "multi_buffer"
