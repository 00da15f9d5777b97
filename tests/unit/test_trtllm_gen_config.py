"""gen-config: generated YAML parses, holds exactly the documented keys, and is documented in docs/TRTLLM.md."""
from pathlib import Path

import pytest
import yaml

from dwdp_trtllm.integration.settings import load_integration_config

from dwdp_trtllm.cli import main
from dwdp_trtllm.integration.gen_config import KEY_SOURCES, emitted_keys

REPO = Path(__file__).resolve().parents[2]
LLM = {"disable_overlap_scheduler", "cuda_graph_config", "moe_config", "moe_config.backend", "max_num_tokens"}
UP = {"dwdp_config"} | {f"dwdp_config.{k}" for k in ("dwdp_size", "num_groups", "num_experts_per_worker",
                                                      "num_prefetch_experts", "contention_opt")}
XFER = {"cache_transceiver_config", "cache_transceiver_config.backend", "cache_transceiver_config.max_tokens_in_buffer"}
SERVERS = {"hostname", "port", "backend", "context_servers", "generation_servers", "context_servers.num_instances",
           "context_servers.urls", "generation_servers.num_instances", "generation_servers.urls"}


def _gen(tmp_path, *args):
    out = tmp_path / "out"
    assert main(["gen-config", "--model", "/ckpt/m", "--out", str(out), *args]) == 0
    return out, {p.name: yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")}


def test_disaggregated_hopper_engine(tmp_path):
    out, docs = _gen(tmp_path, "--mode", "disaggregated", "--preset", "deepseek-r1", "--gen-tp", "4",
                      "--gpu-memory-gb", "400")  # key layout only; the fit has its own test
    assert set(docs) == {"disagg_proxy.yaml", "disagg_worker.yaml", "dwdp.yaml"}
    assert emitted_keys(docs["disagg_proxy.yaml"]) == SERVERS
    w = docs["disagg_worker.yaml"]
    assert emitted_keys(w) == SERVERS | {"model", "tensor_parallel_size"} | LLM | XFER
    ctx, gen = w["context_servers"], w["generation_servers"]
    assert ctx["num_instances"] == 4 and ctx["tensor_parallel_size"] == 1 and ctx["moe_config"] == {"backend": "CUTLASS"}
    assert "dwdp_config" not in ctx and gen["tensor_parallel_size"] == 4 and "moe_config" not in gen
    assert len(set(ctx["urls"] + gen["urls"])) == 5
    d = docs["dwdp.yaml"]
    assert d["engine"] == "dwdp_trtllm" and d["dwdp_config"]["dwdp_size"] == 4 and d["dwdp_config"]["gemm"] == "composite_view"
    assert (out / "launch.env").read_text() == f"DWDP_TRTLLM_CONFIG={out.resolve() / 'dwdp.yaml'}\n"
    cmds = (out / "commands.sh").read_text()
    assert "mpirun -x DWDP_TRTLLM_CONFIG -n 8 trtllm-serve disaggregated_mpi_worker" in cmds
    from dwdp_trtllm.integration.settings import load_integration_config
    assert load_integration_config(out / "dwdp.yaml").dwdp.dwdp_size == 4  # dwdp.yaml is a valid integration config


def test_upstream_engine_aggregated_bench_disaggregated(tmp_path):
    _, docs = _gen(tmp_path, "--mode", "aggregated", "--num-experts", "72", "--weight-dtype", "nvfp4",
                   "--num-experts-per-worker", "24", "--num-prefetch-experts", "16", "--dwdp-size", "4")
    s = docs["trtllm_serve.yaml"]
    assert emitted_keys(s) == {"tensor_parallel_size", "enable_attention_dp"} | LLM | UP
    assert s["dwdp_config"] == {"dwdp_size": 4, "num_groups": 1, "num_experts_per_worker": 24, "num_prefetch_experts": 16,
                                "contention_opt": True}
    assert s["moe_config"]["backend"] == "CUTEDSL" and s["enable_attention_dp"] is True
    _, docs = _gen(tmp_path, "--mode", "bench", "--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gpu", "gb200")
    assert emitted_keys(docs["trtllm_bench_extra.yaml"]) == {"enable_attention_dp"} | LLM | UP
    _, docs = _gen(tmp_path, "--mode", "disaggregated", "--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gpu", "gb200")
    w = docs["disagg_worker.yaml"]
    assert w["context_servers"]["dwdp_config"]["num_experts_per_worker"] == 64 and "dwdp_config" not in w["generation_servers"]
    assert emitted_keys(w) <= set(KEY_SOURCES)


@pytest.mark.parametrize("args,arg", [
    (["--mode", "aggregated", "--preset", "deepseek-r1", "--gpu-memory-gb", "400"], "--mode"),
    (["--preset", "deepseek-r1", "--ctx-servers", "3", "--gpu-memory-gb", "400"], "--ctx-servers"),
    (["--preset", "deepseek-r1", "--engine", "upstream"], "--weight-dtype"),
    (["--num-experts", "16", "--dwdp-size", "0"], "--dwdp-size"),
    (["--num-experts", "8", "--dwdp-size", "16"], "--dwdp-size"),
])
def test_bad_arguments_exit_2_naming_the_argument(tmp_path, capsys, args, arg):
    assert main(["gen-config", "--model", "m", "--out", str(tmp_path / "o"), *args]) == 2
    assert arg in capsys.readouterr().err


def test_every_key_is_documented_with_its_source():
    doc = (REPO / "docs/TRTLLM.md").read_text()
    for key, (source, version) in KEY_SOURCES.items():
        assert f"`{key}`" in doc, key
        assert source and version


# every shipped example and the gen-config arguments that produce it (launch.env holds an absolute path: not shipped)
SHIPPED = {
    "dsr1_fp8_h200_dwdp8": ["--preset", "deepseek-r1", "--weight-dtype", "fp8", "--dwdp-size", "8", "--gen-tp", "8",
                            "--model", "/ckpt/DeepSeek-R1-FP8"],
    "qwen3_235b_fp8_h200_dwdp4": ["--preset", "qwen3-235b-a22b", "--weight-dtype", "fp8", "--dwdp-size", "4",
                                  "--gen-tp", "4", "--model", "/ckpt/Qwen3-235B-A22B-FP8"],
    "dsr1_nvfp4_gb200_upstream_dwdp4": ["--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gen-tp", "4",
                                        "--gpu", "gb200", "--model", "/ckpt/DeepSeek-R1-NVFP4"],
}


def test_shipped_configs_match_the_generator(tmp_path):
    assert sorted(d.name for d in (REPO / "configs/disagg").iterdir()) == sorted(SHIPPED)
    for name, args in SHIPPED.items():
        out = tmp_path / name
        assert main(["gen-config", "--mode", "disaggregated", *args, "--out", str(out)]) == 0
        shipped = REPO / "configs/disagg" / name
        want = sorted(f.name for f in out.iterdir() if f.name != "launch.env")
        assert sorted(f.name for f in shipped.iterdir()) == want, name
        for f in want:
            assert (shipped / f).read_text() == (out / f).read_text(), f"{name}/{f} differs from `dwdp gen-config`"
        if (shipped / "dwdp.yaml").exists():
            size = int(args[args.index("--dwdp-size") + 1])
            assert load_integration_config(shipped / "dwdp.yaml").dwdp.dwdp_size == size


def test_gen_config_refuses_a_deployment_that_does_not_fit(tmp_path, capsys):
    """DeepSeek-R1 FP8 at DWDP4 on H200 (the old shipped example): 163.5 GB of experts per rank alone."""
    rc = main(["gen-config", "--preset", "deepseek-r1", "--weight-dtype", "fp8", "--dwdp-size", "4", "--gen-tp", "4",
               "--model", "m", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "--dwdp-size" in err
    assert "routed experts held 163.5" in err and "DWDP4 per rank 207.0 GB of 141.0 GB" in err
    assert "the smallest dwdp_size that fits is 7" in err
    assert not (tmp_path / "o").exists()  # nothing written
    rc = main(["gen-config", "--preset", "deepseek-r1", "--weight-dtype", "fp8", "--dwdp-size", "8", "--gen-tp", "8",
               "--model", "m", "--out", str(tmp_path / "p")])
    out = capsys.readouterr().out
    assert rc == 0 and "routed experts held 81.8" in out and "prefetch slots 19.7" in out and "(fits)" in out
