"""`dwdp plan` and `dwdp validate-plan` end to end through the CLI entry point."""
import json
import re

import pytest

from dwdp_trtllm.cli import main

PAPER = ["plan", "--model", "deepseek-r1", "--gpu", "gb200", "--dwdp-size", "4", "--weight-dtype", "nvfp4",
         "--batch", "1", "--isl", "1024,8192,16384,32768", "--no-bench-results", "--target", "engine"]  # a roofline
REQUIRED = {"isl", "dwdp_size", "t_compute_us", "t_prefetch_us", "t_all2all_us", "t_dep_us", "t_dwdp_us", "speedup",
            "prefetch_hidden", "memory_per_rank_gb", "fits"}


def _json(capsys, argv):
    """The rows of `dwdp plan --json` (or validate-plan's JSON as printed)."""
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    return out["rows"] if argv[0] == "plan" else out


def test_paper_section3_shape(capsys):
    rows = _json(capsys, PAPER + ["--json"])
    assert [r["isl"] for r in rows] == [1024, 8192, 16384, 32768]
    s = [r["speedup"] for r in rows]
    assert s[0] < s[1] < 1 < s[2] and s[3] > 1 and s[3] < s[2]  # loses short, wins past a crossover, shrinks long
    assert [r["prefetch_hidden"] for r in rows] == [False, False, True, True]


def test_json_rows_are_consistent(capsys):
    rows = _json(capsys, ["plan", "--gpu", "h200", "--dwdp-size", "2,4,8", "--isl", "2k,8192", "--mnt", "16384",
                          "--isl-dist", "uniform_ratio", "--imbalance-cv", "0.2", "--samples", "64",
                          "--slice-bytes", "2MiB,0", "--no-bench-results", "--json", "--dep", "trtllm"])
    assert len(rows) == 3 * 2 * 2
    for r in rows:
        assert REQUIRED <= set(r)
        assert r["speedup"] == pytest.approx(r["t_dep_us"] / r["t_dwdp_us"], rel=1e-5)
        assert r["t_sync_us"] > 0 and r["tokens_per_rank"] <= 16384


def test_table_and_recommendation(capsys, tmp_path):
    png = tmp_path / "fig3.png"
    assert main(PAPER + ["--plot", str(png)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # prose wraps at 80 columns: read it as one text
    assert "DWDP/DEP" in out and "recommendation: DWDP with G=4" in out and "at ISL 16384, 32768" in out
    # GB200's efficiencies are ASSUMPTIONs (ranged): ISL 8192's range reaches past 1
    assert "ISL 1024 DEP" in out and "ISL 8192 marginal" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_h200_bf16_full_model_does_not_fit(capsys):
    assert main(["plan", "--gpu", "h200", "--weight-dtype", "bf16", "--dwdp-size", "4,8", "--isl", "8192",
                 "--no-bench-results"]) == 0
    out = capsys.readouterr().out
    assert "nothing fits 8 GPUs" in out and "smallest GPU count that fits: DWDP" in out and "✗" in out
    assert "✗: does not fit" in out  # the mark has a legend


@pytest.mark.parametrize("argv,arg", [
    (["--isl", "abc"], "--isl"), (["--isl", "0"], "--isl"), (["--dwdp-size", "4,x"], "--dwdp-size"),
    (["--dwdp-size", "999"], "--dwdp-size"), (["--gpu", "a100"], "--gpu"), (["--model", "gpt5"], "--model"),
    (["--weight-dtype", "int4"], "--weight-dtype"), (["--redundant-experts", "250"], "--redundant-experts"),
    (["--slice-bytes", "2 parsecs"], "--slice-bytes"), (["--slice-bytes", "1000"], "--slice-bytes"),
    (["--imbalance-cv", "1.5"], "--imbalance-cv"), (["--batch", "0"], "--batch"),
    (["--interference", "0.5"], "--interference"), (["--isl-dist", "zipf"], "--isl-dist"),
    (["--routing-skew", "lognormal"], "--routing-skew"), (["--routing-skew", "zipf_9"], "--routing-skew"),
])
def test_bad_arguments_are_named(capsys, argv, arg):
    assert main(["plan", "--no-bench-results"] + argv) == 2
    assert f"config error: {arg}:" in capsys.readouterr().err


def test_calibration_file_errors_name_file_and_key(capsys, tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"peer_copy_gbps": -1}))
    assert main(["plan", "--no-bench-results", "--calibration", str(cal)]) == 2
    err = capsys.readouterr().err
    assert str(cal) in err and "peer_copy_gbps" in err


def test_calibration_file_is_used(capsys, tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"peer_copy_gbps": 187.5}))
    base = _json(capsys, ["plan", "--isl", "8192", "--no-bench-results", "--json"])[0]
    slow = _json(capsys, ["plan", "--isl", "8192", "--no-bench-results", "--json", "--calibration", str(cal)])[0]
    assert slow["t_prefetch_us"] == pytest.approx(2 * base["t_prefetch_us"], rel=1e-5)


def _nested(flat: dict) -> dict:
    """{"dep.layer_us.attention": x} -> {"dep": {"layer_us": {"attention": x}}}"""
    out: dict = {}
    for key, v in flat.items():
        *path, last = key.split(".")
        d = out
        for k in path:
            d = d.setdefault(k, {})
        d[last] = v
    return out


def _bench_results(tmp_path, capsys, scale=1.1):
    """A bench-shaped results.json whose measured numbers are validate-plan's prediction times `scale`, some missing."""
    cfg = {"model": {"preset": "deepseek-r1", "num_layers": 5, "first_k_dense": 1},
           "dwdp": {"dwdp_size": 4, "weight_dtype": "fp8"},
           "workload": {"isl": 8192, "isl_dist": "fixed", "max_num_tokens": 16384}, "run": {"device": "cuda", "ranks": 4}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": [{"config": cfg, "metrics": {}}]}))
    every = _json(capsys, ["validate-plan", str(path), "--no-bench-results", "--json"])[0]["runs"][0]["not_compared"]
    path.write_text(json.dumps({"runs": [{"config": cfg, "metrics": _nested(dict.fromkeys(every, 1.0))}]}))
    res = _json(capsys, ["validate-plan", str(path), "--no-bench-results", "--json"])[0]["runs"][0]
    pred = {c["metric"]: c["predicted"] for c in res["comparisons"]}
    keep = ("dep.tps_per_gpu", "dwdp.tps_per_gpu", "dep.layer_us.attention", "dep.layer_us.all_to_all")
    path.write_text(json.dumps({"runs": [{"config": cfg, "metrics": _nested({k: pred[k] * scale for k in keep})},
                                         {"metrics": {}}]}))
    return path


def test_validate_plan_reports_error_per_metric(capsys, tmp_path):
    path = _bench_results(tmp_path, capsys)
    res = _json(capsys, ["validate-plan", str(path), "--gpu", "h200", "--no-bench-results", "--json"])[0]["runs"]
    cmp = {c["metric"]: c for c in res[0]["comparisons"]}
    assert set(cmp) == {"dep.tps_per_gpu", "dwdp.tps_per_gpu", "dep.layer_us.attention", "dep.layer_us.all_to_all"}
    for c in cmp.values():
        assert c["rel_error"] == pytest.approx(1 / 1.1 - 1, abs=1e-4)
        assert c["excluded"] is None
    assert "ratio.tps_per_gpu" in res[0]["not_compared"] and "dwdp.layer_us.prefetch_wait" in res[0]["not_compared"]
    assert "error" in res[1]
    assert main(["validate-plan", str(path), "--no-bench-results"]) == 0
    out = capsys.readouterr().out
    assert "dep.tps_per_gpu" in out and "-9.1%" in out and "not compared" in out


def test_validate_plan_per_layer_rows_divide_as_the_bench_does(capsys, tmp_path):
    """1 dense + 2 MoE layers (first_k_dense from the config): attention and other per layer, experts per MoE layer."""
    cfg = {"model": {"preset": "deepseek-r1", "num_layers": 3, "first_k_dense": 1}, "dwdp": {"dwdp_size": 1, "weight_dtype": "bf16"},
           "workload": {"isl": 8192, "isl_dist": "uniform_ratio", "max_num_tokens": 16384, "tokens_per_rank": 81920},
           "run": {"device": "cuda", "ranks": 1, "warmup_iters": 1, "modes": ["dep"]}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": [{"config": cfg, "metrics": {}}]}))
    res = _json(capsys, ["validate-plan", str(path), "--no-bench-results", "--json"])[0]["runs"][0]
    assert res["config"]["layers"] == 3
    path.write_text(json.dumps({"runs": [{"config": cfg, "metrics": _nested(dict.fromkeys(res["not_compared"], 1.0))}]}))
    p = {c["metric"]: c["predicted"] for c in _json(capsys, ["validate-plan", str(path), "--no-bench-results", "--json"])[0]["runs"][0]["comparisons"]}
    assert p["dep.layer_us.attention"] == pytest.approx(p["dep.iteration_ms.attention"] * 1e3 / 3)
    assert p["dep.layer_us.expert_gemm"] == pytest.approx(p["dep.iteration_ms.expert_gemm"] * 1e3 / 2)
    assert p["dep.layer_us.other"] == pytest.approx(p["dep.iteration_ms.other"] * 1e3 / 3)
    assert p["dep.iteration_ms.wall"] == pytest.approx(p["dep.iteration_ms.attention"] + p["dep.iteration_ms.expert_gemm"]
                                                        + p["dep.iteration_ms.other"])


def test_validate_plan_bad_inputs(capsys, tmp_path):
    assert main(["validate-plan", str(tmp_path / "none.json")]) == 2
    assert "file not found" in capsys.readouterr().err
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"runs": 3}))
    assert main(["validate-plan", str(p)]) == 2
    assert "runs" in capsys.readouterr().err
    assert main(["validate-plan", str(p), "--gpu", "tpu"]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_auto_group_size_is_the_one_every_deployment_command_takes(capsys, tmp_path):
    """--dwdp-size auto is memory.default_dwdp_size: with 6 experts and a budget where DWDP6 is the smallest fit, 6
    (plan's own copy of the rule rounded up to the power of two 8 and refused it: "each G must be in [1, 6]")."""
    from dwdp_trtllm.deploy.memory import default_dwdp_size, smallest_fitting
    from dwdp_trtllm.spec.model_dims import dims_from_config_json

    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
           "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_routed_experts": 6, "n_shared_experts": 1,
           "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "num_attention_heads": 128,
           "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
           "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "scoring_func": "sigmoid"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = dims_from_config_json(path)
    assert smallest_fitting(spec, "dwdp", 26 * 10 ** 9, weight_dtype="fp8", max_num_tokens=8192) == 6
    want = default_dwdp_size(spec, 26 * 10 ** 9, weight_dtype="fp8", max_num_tokens=8192)
    rows = _json(capsys, ["plan", "--model", str(path), "--gpu-memory-gb", "26", "--isl", "8192", "--mnt", "8192",
                          "--json"])
    assert want == 6 and {r["dwdp_size"] for r in rows} == {want}


def _plan(capsys, argv):
    assert main(["plan", *argv, "--json", "--dep", "trtllm"]) == 0  # TensorRT-LLM's DEP (the rows' recommendation)
    return json.loads(capsys.readouterr().out)


def test_only_the_longest_isl_misfits_names_it_and_recommends_for_the_rest(capsys):
    """R1 FP8 DWDP8 at 130 GB fits ISL <= 16384 (122-129 GB) and not 32768 (137 GB; the MTP layer included): the advice is for the ISLs that
    fit and names the one that does not (it fell into "memory does not fit ... needs 121.0 GB > 130.0 GB; the
    smallest dwdp_size that fits is 8")."""
    out = _plan(capsys, ["--gpu-memory-gb", "130", "--dwdp-size", "8", "--batch", "1"])  # one request per rank
    rows, rec = out["rows"], out["recommendation"]
    assert [r["fits"] for r in rows] == [True] * 4 + [False]
    assert rec["dwdp_size"] == 8 and rec["by_isl"]["32768"] == "DEP"
    assert "DWDP8 does not fit at ISL 32768 (136.9 GB per rank > 130.0 GB): DEP8 there" in rec["reason"]
    # the GB shown is memory.fit_deployment's for one 32K request per rank (the bytes gen-config checks), not plan's own
    from dwdp_trtllm.spec.config import DwdpConfig
    from dwdp_trtllm.deploy.memory import fit_deployment
    from dwdp_trtllm.spec.models import get_model
    fit = fit_deployment(get_model("deepseek-r1"), DwdpConfig(dwdp_size=8), int(130e9), weight_dtype="fp8",
                         max_num_tokens=32768)
    assert f"({fit.total / 1e9:.1f} GB per rank > 130.0 GB)" in rec["reason"] and not fit.fits
    assert "smallest dwdp_size that fits is 8" not in rec["reason"] and "121.0 GB" not in rec["reason"]
    assert rec["by_isl"]["16384"] in ("DWDP", "marginal") and rec["verdict"] in ("DWDP", "marginal")
    assert "ISL 8192-16384" in rec["reason"] or "at ISL 16384" in rec["reason"]
    # G=7 on a 143 GB budget: ISL 32768 needs 149 GB; DWDP7's whole range is above 1 at ISL 16384, which fits (142 GB,
    # the MTP layer's experts included: on the H200's 141 GB DWDP7 fits no ISL)
    rec = _plan(capsys, ["--dwdp-size", "7", "--gpu-memory-gb", "143", "--batch", "1"])["recommendation"]
    assert rec["verdict"] == "DWDP" and rec["dwdp_size"] == 7 and rec["reason"].startswith("DWDP with G=7")
    assert "at ISL 16384:" in rec["reason"] and "DWDP7 does not fit at ISL 32768" in rec["reason"]
    # at an MNT every ISL needs the same bytes: the MNT is named
    rec = _plan(capsys, ["--gpu-memory-gb", "130", "--dwdp-size", "8", "--mnt", "32768"])["recommendation"]
    assert "DWDP8 does not fit at MNT 32768" in rec["reason"] and rec["reason"].startswith("use DEP here")


def test_headline_follows_the_per_isl_verdicts(capsys):
    """One request per rank: DEP where the whole range is below 1, marginal where it straddles 1, in one line (it read
    "marginal ... predicts 0.40-0.58x", a geometric mean over every ISL wholly below 1). DWDP's experts priced with
    TensorRT-LLM's table (`--gemm merge`), whose plan at one request per rank has both kinds of ISL."""
    from dwdp_trtllm.perf.recommend import isl_set

    out = _plan(capsys, ["--gemm", "merge", "--batch", "1"])
    rows, rec = out["rows"], out["recommendation"]
    isls = [r["isl"] for r in rows]
    dep = [r["isl"] for r in rows if r["speedup_high"] < 1]
    marg = [r["isl"] for r in rows if r["speedup_low"] <= 1 <= r["speedup_high"]]
    assert dep and marg and rec["verdict"] == "marginal"
    assert rec["by_isl"] == {str(r["isl"]): r["verdict"] for r in rows}
    assert rec["reason"].startswith(f"DEP at {isl_set(dep, isls)} (")
    assert f"marginal at {isl_set(marg, isls)} with G=8" in rec["reason"] and "; depends on " in rec["reason"]
    assert isl_set([1024, 4096, 8192], isls) == "ISL <= 8192" and isl_set([16384, 32768], isls) == "ISL >= 16384"
    assert isl_set([4096, 8192], isls) == "ISL 4096-8192" and isl_set([1024, 8192], isls) == "ISL 1024, 8192"


def test_nothing_fits_rows_say_so(capsys):
    """R1 FP8 on 4 H200s: neither DWDP4 nor DEP4 fits, so no row's verdict says DEP; where DEP fits and DWDP does
    not, the row says DEP whatever the range."""
    out = _plan(capsys, ["--dwdp-size", "4"])
    assert all(not r["fits"] and not r["dep_fits"] and r["verdict"] == "nothing fits" for r in out["rows"])
    assert out["recommendation"]["verdict"] == "nothing fits"
    assert main(["plan", "--dwdp-size", "4", "--dep", "trtllm"]) == 0
    table = [ln for ln in capsys.readouterr().out.splitlines() if re.match(r"\s*\d+\S*\s+\d", ln)]  # G, then ISL
    assert len(table) == 5 and all("nothing fits" in ln and " DEP " not in ln for ln in table)
    rows = _plan(capsys, ["--dwdp-size", "7", "--isl", "32768"])["rows"]  # DWDP7 148 GB, DEP7 136 GB
    assert not rows[0]["fits"] and rows[0]["dep_fits"] and rows[0]["speedup_low"] > 1 and rows[0]["verdict"] == "DEP"


def test_mxfp4_experts_are_priced_with_their_scale_bytes_and_say_no_table(capsys):
    """--weight-dtype mxfp4 (issue 24: E8M0 scale per 32 elements, weight_formats.py): the pulled bytes are the
    mxfp4 expert's (0.5 + 1/32 B per element, below nvfp4's 0.5 + 1/16), the FP4 tensor-core rate prices its GEMM,
    and with no TensorRT-LLM mxfp4 MoE rows the output says the rows are priced as the engine."""
    from dwdp_trtllm.spec.models import get_model

    argv = ["--model", "deepseek-r1", "--gpu", "b200", "--dwdp-size", "4", "--isl", "8192", "--mnt", "16384",
            "--no-bench-results"]
    mx = _plan(capsys, argv + ["--weight-dtype", "mxfp4"])
    nv = _plan(capsys, argv + ["--weight-dtype", "nvfp4", "--target", "engine"])
    spec = get_model("deepseek-r1")
    ratio = spec.expert_bytes("mxfp4") / spec.expert_bytes("nvfp4")
    assert ratio == pytest.approx((0.5 + 1 / 32) / (0.5 + 1 / 16), rel=1e-3)
    assert mx["rows"][0]["fetch_gb"] == pytest.approx(nv["rows"][0]["fetch_gb"] * ratio, rel=1e-3)
    assert mx["rows"][0]["t_prefetch_us"] < nv["rows"][0]["t_prefetch_us"]
    assert "no TensorRT-LLM kernel table" in mx["priced_as"] and "mxfp4 experts" in mx["priced_as"]
    assert main(["plan", *argv, "--weight-dtype", "mxfp4"]) == 0
    assert "priced: engine (no TensorRT-LLM kernel table for deepseek-r1, mxfp4 experts, on b200)" in " ".join(
        capsys.readouterr().out.split())


def test_dep_comm_is_an_input_with_trtllm_s_per_gpu_default(capsys):
    """--dep-comm (issue 24): TensorRT-LLM 1.3.0rc20's CommunicationFactory picks NVLinkOneSided where MNNVL exists
    (GB200), else DeepEP where it runs the group size (H200 DEP8; TRTLLM_CAN_USE_DEEP_EP defaults to 1 since Feb 2026),
    else AllGatherReduceScatter; the path and its source are in --json and 'priced:'.
    On GB200 at blog 19 Table 3's setup the NVLinkOneSided all-to-all (one copy per destination rank, NVFP4 dispatch)
    is about half the NCCL all-gather + reduce-scatter; DeepEP's rows are priced from the table."""
    gb = ["--model", "deepseek-r1", "--gpu", "gb200", "--weight-dtype", "nvfp4", "--dwdp-size", "4", "--isl", "8192",
          "--mnt", "32768", "--no-bench-results"]
    d = _plan(capsys, gb)
    assert d["dep_comm"] == "alltoall" and "alltoall: NVLinkOneSided" in d["pricing"]
    a2a = d["rows"][0]["t_all2all_us"]
    ag = _plan(capsys, gb + ["--dep-comm", "allgather_reducescatter"])
    assert ag["dep_comm"] == "allgather_reducescatter" and "NCCL all-gather + reduce-scatter rows" in ag["pricing"]
    assert 0.3 < a2a / ag["rows"][0]["t_all2all_us"] < 0.7
    assert ag["rows"][0]["t_dwdp_us"] == pytest.approx(d["rows"][0]["t_dwdp_us"])  # DWDP has no DEP communication
    de = _plan(capsys, gb + ["--dep-comm", "deepep"])
    assert "DeepEP high-throughput dispatch + combine rows (nvfp4 dispatch" in de["pricing"]
    h = _plan(capsys, ["--gpu", "h200", "--dwdp-size", "8", "--isl", "8192", "--mnt", "16384", "--no-bench-results"])
    assert h["dep_comm"] == "deepep" and h["rows"][0]["dep_comm"].startswith("deepep: DeepEP high-throughput")
    # a DEP size DeepEP does not run (deep_ep.py _is_deepep_feasible: 2, 4, 8 ranks a node): AllGatherReduceScatter
    h3 = _plan(capsys, ["--gpu", "h200", "--dwdp-size", "3", "--isl", "8192", "--mnt", "2048", "--no-bench-results"])
    assert h3["rows"][0]["dep_comm"].startswith("allgather_reducescatter: ")
    assert h3["dep_comm"] == "allgather_reducescatter"  # the path the rows were priced with, not the size-free default
    eng = _plan(capsys, ["--gpu", "h200", "--dwdp-size", "8", "--isl", "8192", "--mnt", "16384", "--target", "engine",
                         "--no-bench-results"])
    eng_ag = _plan(capsys, ["--gpu", "h200", "--dwdp-size", "8", "--isl", "8192", "--mnt", "16384", "--target",
                            "engine", "--dep-comm", "allgather_reducescatter", "--no-bench-results"])
    assert eng["dep_comm"] == "alltoall" and eng_ag["rows"][0]["t_all2all_us"] != eng["rows"][0]["t_all2all_us"]
    assert main(["plan", *gb, "--dep-comm", "allgather_reducescatter"]) == 0
    assert "DEP communication allgather_reducescatter: NCCL" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as e:
        main(["plan", *gb, "--dep-comm", "nccl"])
    assert e.value.code == 2 and "--dep-comm" in capsys.readouterr().err


def test_dep_comm_names_match_the_planner():
    from dwdp_trtllm.commands.plan import DEP_COMMS
    from dwdp_trtllm.perf.phases import DEP_COMMS as PERF
    assert DEP_COMMS == PERF


def test_gpu_takes_a_spec_file_as_every_deployment_command_does(capsys, tmp_path):
    """`--gpu FILE.yaml` in plan as in plan-placement / gen-config / validate-plan: a spec file whose memory differs
    from the shipped H200's changes the budget (and the fit), the name it declares is the GPU."""
    from pathlib import Path

    import yaml

    import dwdp_trtllm
    src = Path(dwdp_trtllm.__file__).parent / "data" / "gpus" / "h200.yaml"
    spec = yaml.safe_load(src.read_text())
    spec["name"], spec["memory_gb"] = "h200-small", 100.0
    f = tmp_path / "small.yaml"
    f.write_text(yaml.safe_dump(spec))
    argv = ["--dwdp-size", "8", "--isl", "8192", "--mnt", "16384"]
    shipped = _plan(capsys, ["--gpu", str(src), *argv])
    assert shipped["rows"] == _plan(capsys, ["--gpu", "h200", *argv])["rows"]
    small = _plan(capsys, ["--gpu", str(f), *argv])
    assert shipped["rows"][0]["fits"] and not small["rows"][0]["fits"]
