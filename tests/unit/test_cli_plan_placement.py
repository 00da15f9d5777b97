"""`dwdp plan-placement` through cli.main: tables, JSON, both source policies, memory fit, bad input."""
from __future__ import annotations

import json

import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.deploy.memory import DEFAULT_MAX_NUM_TOKENS, GB, fit_deployment
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.core.placement import make_placement

R1_EXPERT_FP8 = 3 * 7168 * 2048 + 4 * (32 * 56 + 56 * 16)


def run_json(capsys, *args: str) -> dict:
    assert cli.main(["plan-placement", *args, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


def test_json_r1_g3_redundant(capsys):
    rep = run_json(capsys, "--model", "deepseek-r1", "--dwdp-size", "3", "--redundant-experts", "8",
                   "--weight-dtype", "fp8", "--gpu-memory-gb", "1000")
    assert rep["model"] == "deepseek-r1" and rep["num_moe_layers"] == 58 and rep["placement"] == "derived"
    assert rep["expert_bytes"] == R1_EXPERT_FP8
    assert [r["local_experts"] for r in rep["ranks"]] == ["0-93", "86-178", "0-7,171-255"]
    assert [r["num_local"] for r in rep["ranks"]] == [94, 93, 93]
    assert [r["num_fetched"] for r in rep["ranks"]] == [162, 163, 163]
    assert [r["fetch_bytes_per_layer"] for r in rep["ranks"]] == [n * R1_EXPERT_FP8 for n in (162, 163, 163)]
    # 58 trunk MoE layers + the MTP layer (priced for a TensorRT-LLM server)
    assert rep["ranks"][0]["memory"]["routed_experts_gb"] == pytest.approx(94 * (58 + 1) * R1_EXPERT_FP8 / GB, abs=1e-6)
    lo, bal = rep["source_load"]["lowest_rank"], rep["source_load"]["balanced"]
    assert lo == {"per_source": [172, 162, 154], "max": 172}
    assert bal["max"] == 163 < lo["max"] and sum(bal["per_source"]) == sum(lo["per_source"]) == 488
    # --gpu-memory-gb 1000: at the shared defaults (h200's 141 GB, 16384 tokens) G=3 does not fit and the run exits 2,
    # while run_json asserts exit 0


def test_json_upstream_ranges(capsys):
    rep = run_json(capsys, "--dwdp-size", "4", "--num-experts-per-worker", "82", "--num-prefetch-experts", "58",
                   "--num-layers", "5")
    assert rep["placement"] == "upstream" and rep["num_layers"] == 5
    assert [r["local_experts"] for r in rep["ranks"]] == ["0-81", "58-139", "116-197", "174-255"]
    p = make_placement(DwdpConfig(dwdp_size=4, num_experts_per_worker=82, num_prefetch_experts=58,
                                  source_policy="lowest_rank"), 256)
    assert rep["source_load"]["lowest_rank"]["per_source"] == p.source_load()


def test_table_output(capsys):
    assert cli.main(["plan-placement", "--model", "deepseek-r1", "--dwdp-size", "3", "--redundant-experts", "32",
                     "--num-layers", "5", "--weight-dtype", "fp8", "--gpu-memory-gb", "141"]) == 0
    out = capsys.readouterr().out
    for frag in ("dwdp_rank", "0-117", "0-31,171-255", "lowest_rank", "balanced", "172", "139",
                 "(one expert 0.0441 GB)", "DEP3 per rank (worst)", "smallest GPU count that fits"):
        assert frag in out, (frag, out)
    # the memory lines are memory's (RankMemory.describe, DeploymentFit.smallest_line), as gen-config prints them
    fit = fit_deployment(get_model("deepseek-r1").truncated(5), DwdpConfig(dwdp_size=3, redundant_experts=32),
                         int(141e9), weight_dtype="fp8", max_num_tokens=DEFAULT_MAX_NUM_TOKENS)
    from dwdp_trtllm.commands.terminal import wrap
    for want in (fit.dwdp.describe(worst=True), fit.dep.describe(worst=True), fit.smallest_line()):
        assert wrap(want) in out, (want, out)  # each line whole, wrapped within 80 columns (commands/terminal.py)
    assert fit.dwdp.describe(worst=True).startswith("DWDP3 per rank (worst) ") and fit.fits


def test_gpu_memory_does_not_fit_exits_2_naming_the_flags_given(tmp_path, capsys):
    """A rank over the GPU is bad input, as in gen-config (exit 2, one line): the report still comes (where the memory
    goes), and the line names what to change as the user gave it: flags, not the config keys of another command."""
    argv = ["plan-placement", "--model", "deepseek-r1", "--dwdp-size", "3", "--gpu-memory-gb", "141",
            "--max-num-tokens", "16384"]
    rc = cli.main([*argv, "--json"])
    cap = capsys.readouterr()
    rep = json.loads(cap.out)
    assert rc == 2 and rep["fits"] is False and rep["gpu_memory_gb"] == 141
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dwdp plan-placement: config error: --dwdp-size: does not fit: DWDP3")
    assert "change --dwdp-size 3, --redundant-experts 0, --prefetch-depth 1, --weight-dtype fp8, --num-layers 61, " \
           "--max-num-tokens 16384 (" in err[0] and "dwdp.dwdp_size" not in err[0] and "workload." not in err[0]
    assert "smallest GPU count that fits: DWDP 8 GPUs, DEP 7 GPUs" in err[0]
    assert rep["fit_error"] in err[0]
    assert rep["ranks"][0]["memory"]["activations_gb"] > 0 and rep["memory"]["dwdp"]["unit"] == "GB"
    # gen-config refuses the same misfit with the same exit code
    assert cli.main(["gen-config", "--model", "deepseek-ai/DeepSeek-R1", "--preset", "deepseek-r1", "--engine",
                     "dwdp_trtllm", "--weight-dtype", "fp8", "--dwdp-size", "3", "--gpu-memory-gb", "141",
                     "--max-num-tokens", "16384", "--out", str(tmp_path / "out")]) == 2
    assert "config error: --dwdp-size: a context server that fits h200 (141 GB): DWDP3 per rank 265.0 GB" \
        in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_does_not_fit_names_the_config_files_keys_it_set(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("dwdp:\n  dwdp_size: 3\n  prefetch_depth: 2\nmodel:\n  preset: deepseek-r1\n  num_layers: 40\n")
    assert cli.main(["plan-placement", "--config", str(f), "--weight-dtype", "fp8", "--gpu-memory-gb", "141"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"dwdp plan-placement: config error: {f}: dwdp.dwdp_size: does not fit")
    assert (f"change dwdp.dwdp_size=3 in {f}, --redundant-experts 0, dwdp.prefetch_depth=2 in {f}, --weight-dtype fp8, "
            f"model.num_layers=40 in {f}, --max-num-tokens 16384 (") in err[0]


def test_config_file_with_flag_override(tmp_path, capsys):
    f = tmp_path / "b.yaml"
    f.write_text("model:\n  preset: tiny\ndwdp:\n  dwdp_size: 4\n  redundant_experts: 2\n  weight_dtype: float32\n")
    rep = run_json(capsys, "--config", str(f))
    spec = get_model("tiny")
    assert rep["model"] == "tiny" and rep["dwdp_size"] == 4 and rep["expert_bytes"] == spec.expert_bytes("float32")
    assert [r["local_experts"] for r in rep["ranks"]] == ["0-5", "4-9", "8-13", "0-1,12-15"]
    rep = run_json(capsys, "--config", str(f), "--dwdp-size", "2")
    assert rep["dwdp_size"] == 2 and rep["redundant_experts"] == 2


@pytest.mark.parametrize("args, fragment", [
    (["--dwdp-size", "0"], "--dwdp-size: expected an integer >= 1, got 0"),
    (["--dwdp-size", "4", "--num-experts-per-worker", "80", "--num-prefetch-experts", "58"],
     "--num-experts-per-worker: (dwdp_size-1)*num_prefetch_experts + num_experts_per_worker = 254"),
    (["--dwdp-size", "4", "--num-experts-per-worker", "60"], "both num_experts_per_worker and num_prefetch_experts"),
    (["--dwdp-size", "3", "--redundant-experts", "200"], "--redundant-experts: 200 extra experts"),
    (["--model", "tiny", "--dwdp-size", "32"], "--dwdp-size: dwdp_size 32 is larger than the model's 16 experts"),
    (["--num-layers", "0"], "--num-layers: expected an integer in [1, 1024]"),
    (["--gpu-memory-gb", "-1"], "--gpu-memory-gb: expected a finite number of GB in (0, 1e5)"),
    (["--gpu", "a100"], "--gpu: unknown GPU 'a100'"),
    (["--max-num-tokens", "0"], "--max-num-tokens: expected an integer in [1, 1,048,576]"),
])
def test_bad_flags_exit_2_naming_the_flag(capsys, args, fragment):
    assert cli.main(["plan-placement", *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err, err


def test_bad_file_key_names_file_and_key(tmp_path, capsys):
    f = tmp_path / "b.yaml"
    f.write_text("model:\n  preset: tiny\ndwdp:\n  dwdp_size: 4\n  num_experts_per_worker: 3\n  num_prefetch_experts: 3\n")
    assert cli.main(["plan-placement", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}: dwdp.num_experts_per_worker: (dwdp_size-1)*num_prefetch_experts" in err
    f.write_text("model:\n  preset: tiny\n  layers: 3\n")
    assert cli.main(["plan-placement", "--config", str(f)]) == 2
    assert f"{f}: model.layers: unknown key" in capsys.readouterr().err
    f.write_text("model:\n  preset: tiny\ndwdp:\n  dwdp_size: 2\n  prefetch_depth: 9\n")  # the key path, as DwdpConfig checks it
    assert cli.main(["plan-placement", "--config", str(f)]) == 2
    assert f"{f}: dwdp.prefetch_depth: 9 is more than the model's" in capsys.readouterr().err


def test_bench_config_without_dwdp_section_and_top_level_fields(tmp_path, capsys):
    f = tmp_path / "b.yaml"
    f.write_text("model:\n  preset: tiny-gqa\nworkload:\n  isl: 64\nrun:\n  ranks: 2\n")
    rep = run_json(capsys, "--config", str(f), "--dwdp-size", "3")
    assert rep["model"] == "tiny-gqa" and [r["local_experts"] for r in rep["ranks"]] == ["0-3", "4-7", "8-11"]
    f.write_text("dwdp_size: 2\nsource_policy: lowest_rank\n")
    rep = run_json(capsys, "--config", str(f), "--model", "tiny")
    assert rep["source_policy"] == "lowest_rank" and rep["dwdp_size"] == 2 and rep["num_experts"] == 16


@pytest.mark.parametrize("flags", [[], ["--weight-dtype", "bf16"], ["--dwdp-size", "2"]])
def test_config_file_is_read_once(tmp_path, capsys, monkeypatch, flags):
    """The --config file is read once (was: once for its weight_dtype, once for the rest) and its values reach the
    report; flags still override it."""
    from pathlib import Path

    f = tmp_path / "b.yaml"
    f.write_text("model:\n  preset: tiny\ndwdp:\n  dwdp_size: 4\n  weight_dtype: float32\n")
    reads, real = [], Path.read_text

    def spy(self, *a, **kw):
        reads.append(Path(self).resolve())
        return real(self, *a, **kw)
    monkeypatch.setattr(Path, "read_text", spy)
    rep = run_json(capsys, "--config", str(f), *flags)
    assert reads.count(f.resolve()) == 1, reads
    assert rep["model"] == "tiny" and rep["weight_dtype"] == ("bf16" if "bf16" in flags else "float32")
    assert rep["dwdp_size"] == (2 if "--dwdp-size" in flags else 4)
