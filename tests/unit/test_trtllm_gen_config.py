"""gen-config: generated YAML parses, holds exactly the documented keys, and is documented in docs/TRTLLM.md."""
import json
import shlex
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
GEN = {"max_batch_size", "kv_cache_config", "kv_cache_config.free_gpu_memory_fraction", "cuda_graph_config.enable_padding",
       "cuda_graph_config.batch_sizes"}
CTX = {"max_seq_len", "kv_cache_config.enable_block_reuse", "kv_cache_config.dtype"}
SPEC = {"speculative_config", "speculative_config.decoding_type", "speculative_config.max_draft_len"}
SERVERS = {"hostname", "port", "backend", "context_servers", "generation_servers", "context_servers.num_instances",
           "context_servers.urls", "generation_servers.num_instances", "generation_servers.urls"}


def _gen(tmp_path, *args):
    out = tmp_path / "out"
    assert main(["gen-config", "--model", "/ckpt/m", "--out", str(out), *args]) == 0
    return out, {p.name: yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")}


def test_disaggregated_hopper_engine(tmp_path):
    out, docs = _gen(tmp_path, "--mode", "disaggregated", "--preset", "deepseek-r1", "--gen-tp", "4", "--dwdp-size", "4",
                      "--gpu-memory-gb", "400")  # key layout only; the fit has its own test
    assert set(docs) == {"disagg_proxy.yaml", "disagg_worker.yaml", "dwdp.yaml"}
    assert emitted_keys(docs["disagg_proxy.yaml"]) == SERVERS
    w = docs["disagg_worker.yaml"]
    assert emitted_keys(w) == SERVERS | {"model", "tensor_parallel_size", "moe_expert_parallel_size",
                                         "enable_attention_dp"} | LLM | XFER | GEN | CTX | SPEC
    ctx, gen = w["context_servers"], w["generation_servers"]
    assert ctx["num_instances"] == 4 and ctx["tensor_parallel_size"] == 1 and ctx["moe_config"] == {"backend": "CUTLASS"}
    assert "dwdp_config" not in ctx and gen["tensor_parallel_size"] == 4 and gen["moe_config"] == {"backend": "CUTLASS"}
    assert gen["moe_expert_parallel_size"] == 4 and gen["enable_attention_dp"] is True  # DEP4, as upstream's examples
    assert len(set(ctx["urls"] + gen["urls"])) == 5
    d = docs["dwdp.yaml"]
    assert d["engine"] == "dwdp_trtllm" and d["dwdp_config"]["dwdp_size"] == 4
    # no gemm: the adapter picks it on the GPU it runs on (integration/moe_evidence.default_gemm; FP8 block scales on
    # sm_90: multi_buffer, by measurement); tests/unit/test_trtllm_fp8_default.py
    assert d["dwdp_config"]["weight_dtype"] == "fp8" and "gemm" not in d["dwdp_config"]
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
    assert emitted_keys(docs["trtllm_bench_extra.yaml"]) == {"enable_attention_dp"} | LLM | UP | SPEC  # R1: MTP
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
    "disagg/dsr1_fp8_h200_dwdp8": ["--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8",
                                   "--model", "/ckpt/DeepSeek-R1-FP8"],
    "disagg/qwen3_235b_fp8_h200_dwdp4": ["--preset", "qwen3-235b-a22b", "--dwdp-size", "4", "--gen-tp", "4",
                                         "--model", "/ckpt/Qwen3-235B-A22B-FP8"],
    "disagg/dsr1_nvfp4_gb200_upstream_dwdp4": ["--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gen-tp", "4",
                                               "--gpu", "gb200", "--model", "/ckpt/DeepSeek-R1-NVFP4"],
    "serve/dsr1_nvfp4_aggregated_upstream_dwdp4": ["--mode", "aggregated", "--preset", "deepseek-r1", "--weight-dtype",
                                                   "nvfp4", "--gpu", "gb200", "--model", "/ckpt/DeepSeek-R1-NVFP4"],
    "serve/dsr1_nvfp4_bench_upstream_dwdp4": ["--mode", "bench", "--preset", "deepseek-r1", "--weight-dtype", "nvfp4",
                                              "--gpu", "gb200", "--model", "/ckpt/DeepSeek-R1-NVFP4"],
}


def test_shipped_configs_match_the_generator(tmp_path):
    dirs = [d for sub in ("disagg", "serve") for d in (REPO / "configs" / sub).iterdir() if d.is_dir()]
    assert sorted(str(d.relative_to(REPO / "configs")) for d in dirs) == sorted(SHIPPED)
    for name, args in SHIPPED.items():
        out = tmp_path / name
        assert main(["gen-config", *args, "--out", str(out)]) == 0
        shipped = REPO / "configs" / name
        # commands.sh records the arguments (without the defaults), so the docs' memory table can re-price it
        line = (shipped / "commands.sh").read_text().splitlines()[2]
        assert line.startswith("# dwdp gen-config ") and sorted(shlex.split(line)[3:-2]) == sorted(args), line
        want = sorted(f.name for f in out.iterdir() if f.name != "launch.env")
        assert sorted(f.name for f in shipped.iterdir()) == want, name
        for f in want:
            assert (shipped / f).read_text() == (out / f).read_text(), f"{name}/{f} differs from `dwdp gen-config`"
        if (shipped / "dwdp.yaml").exists():
            size = int(args[args.index("--dwdp-size") + 1]) if "--dwdp-size" in args else 4
            assert load_integration_config(shipped / "dwdp.yaml").dwdp.dwdp_size == size


def test_gen_config_refuses_a_deployment_that_does_not_fit(tmp_path, capsys):
    """DeepSeek-R1 FP8 at DWDP4 on H200 (the old shipped example): 166.3 GB of experts per rank alone (the MTP layer included)."""
    rc = main(["gen-config", "--preset", "deepseek-r1", "--weight-dtype", "fp8", "--dwdp-size", "4", "--gen-tp", "4",
               "--model", "m", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "--dwdp-size" in err
    assert "routed experts held 166.3" in err and "DWDP4 per rank 209.8 GB of 141.0 GB" in err
    assert "smallest GPU count that fits: DWDP 8 GPUs, DEP 7 GPUs" in err
    assert not (tmp_path / "o").exists()  # nothing written
    rc = main(["gen-config", "--preset", "deepseek-r1", "--weight-dtype", "fp8", "--dwdp-size", "8", "--gen-tp", "8",
               "--model", "m", "--out", str(tmp_path / "p")])
    out = capsys.readouterr().out
    assert rc == 0 and "routed experts held 83.2" in out and "prefetch slots 19.7" in out and "(fits)" in out


def test_generation_servers_are_sized_default_dep8_for_r1_fp8(tmp_path, capsys):
    """No --gen-tp: the smallest power of two whose generation rank fits (R1 FP8 on H200: DEP4 193 GB no, DEP8 yes)."""
    out = tmp_path / "o"
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "8", "--model", "m", "--out", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["gen_tp"] == 8 and rep["memory"]["generation"]["fits"] and rep["memory"]["generation"]["group_size"] == 8
    w = yaml.safe_load((out / "disagg_worker.yaml").read_text())
    assert w["generation_servers"]["tensor_parallel_size"] == 8 and w["generation_servers"]["enable_attention_dp"] is True
    # an explicit --gen-tp that does not fit is refused with the numbers and the one that fits; nothing written
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "1", "--model", "m",
                 "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "--gen-tp" in err and "DEP1 per rank" in err and "does NOT fit" in err and "--gen-tp 8 fits" in err
    assert not (tmp_path / "p").exists()
    # without model dims a generation server cannot be sized: --gen-tp is required
    assert main(["gen-config", "--num-experts", "16", "--dwdp-size", "4", "--model", "m", "--out", str(tmp_path / "q")]) == 2
    assert "--gen-tp" in capsys.readouterr().err and not (tmp_path / "q").exists()


def test_sixteen_gpus_on_two_nodes_hostfile_slurm_and_first_line(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--model", "m",
                 "--out", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("16 GPUs on 2 nodes: 8 context servers"), first
    assert (out / "hostfile").read_text() == "NODE0_HOST slots=8\nNODE1_HOST slots=8\n"
    w = yaml.safe_load((out / "disagg_worker.yaml").read_text())
    assert {u.split(":")[0] for u in w["context_servers"]["urls"]} == {"NODE0_HOST"}
    assert w["generation_servers"]["urls"] == ["NODE1_HOST:8009"]
    cmds = (out / "commands.sh").read_text()
    assert 'mpirun --hostfile "$D/hostfile" -x DWDP_TRTLLM_CONFIG -n 16 trtllm-serve disaggregated_mpi_worker' in cmds
    assert 'mpirun --hostfile "$D/hostfile" --map-by ppr:1:node dwdp serve --install-hook' in cmds  # every node
    assert "node 1 (NODE1_HOST): 8 of 8 GPUs: generation server 0 (8 GPUs, ranks 8-15)" in cmds
    slurm = (out / "launch.slurm").read_text()
    for frag in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", 'scontrol show hostnames "$SLURM_JOB_NODELIST"',
                 's/NODE1_HOST/${H[1]}/g', "--distribution=arbitrary -n 16 trtllm-serve disaggregated_mpi_worker",
                 '-w "${H[0]}" trtllm-serve disaggregated'):
        assert frag in slurm, frag
    # real host names: no placeholders; 4 context + TP8 generation: 4 ranks on node 0, the server of 8 on node 1
    out2 = tmp_path / "p"
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "4", "--gen-tp", "8", "--gpu-memory-gb", "400",
                 "--hosts", "a1,b2", "--model", "m", "--out", str(out2)]) == 0
    assert capsys.readouterr().out.startswith("12 GPUs on 2 nodes")
    assert (out2 / "hostfile").read_text() == "a1 slots=4\nb2 slots=8\n"
    p = yaml.safe_load((out2 / "disagg_proxy.yaml").read_text())
    assert p["hostname"] == "a1" and p["generation_servers"]["urls"] == ["b2:8005"] and "_HOST" not in (out2 / "commands.sh").read_text()
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "8", "--hosts", "a1", "--model", "m",
                 "--out", str(tmp_path / "r")]) == 2
    assert "--hosts: 1 host(s) given for 2 nodes" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["--mode", "aggregated", "--preset", "deepseek-r1"],  # our engine has no aggregated mode
    ["--mode", "bench", "--preset", "deepseek-r1", "--dwdp-size", "8"],
    ["--preset", "deepseek-r1", "--dwdp-size", "4"],  # R1 FP8 at DWDP4 does not fit an H200
    ["--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "2"],  # the generation server does not fit
    ["--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "12"],  # 12 GPUs over nodes of 8
])
def test_a_refused_run_leaves_out_as_it_was(tmp_path, capsys, args):
    out = tmp_path / "o"
    assert main(["gen-config", "--model", "m", "--out", str(out), *args]) == 2
    assert not out.exists() and list(tmp_path.iterdir()) == []
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["gen-config", "--model", "m", "--out", str(out), *args]) == 2
    assert sorted(f.name for f in out.iterdir()) == ["keep.txt"] and list(tmp_path.iterdir()) == [out]


def test_docs_memory_table_is_generated_from_the_shipped_examples():
    """docs/TRTLLM.md's memory table is scripts/trtllm_memory_table.py's output (every server of every example)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, str(REPO / "scripts/trtllm_memory_table.py"), "--check"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = (REPO / "docs/TRTLLM.md").read_text()
    table = doc[doc.index("<!-- memory-table:start"):doc.index("<!-- memory-table:end")]
    assert "| `configs/disagg/dsr1_fp8_h200_dwdp8` (16 GPUs on 2 nodes, fp8) | context: DWDP8 |" in table
    assert "|  | generation: DEP8 (attention DP) |" in table and table.count("`configs/") == 5


@pytest.mark.parametrize("mode", ["aggregated", "bench"])
def test_a_refused_mode_is_named_as_given(tmp_path, capsys, mode):
    """--mode bench was refused as "aggregated attention-DP serving ..." without naming bench."""
    assert main(["gen-config", "--model", "m", "--out", str(tmp_path / "o"), "--mode", mode, "--preset", "deepseek-r1"]) == 2
    err = capsys.readouterr().err
    assert f"--mode: {mode}" in err and "--mode disaggregated" in err and len(err.strip().splitlines()) == 1, err


def test_aggregated_server_spanning_nodes_unevenly_names_its_size_flag(tmp_path, capsys):
    """One aggregated server of dwdp_size x num_groups GPUs over nodes it does not fill evenly: the error names
    --dwdp-size (its size), not --gen-tp (no generation server in aggregated mode); nothing written."""
    assert main(["gen-config", "--mode", "aggregated", "--preset", "deepseek-r1", "--weight-dtype", "nvfp4",
                 "--dwdp-size", "8", "--num-groups", "3", "--gpus-per-node", "16", "--model", "m",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--dwdp-size" in err and "--gen-tp" not in err and "an aggregated server of 24 GPUs" in err
    assert not (tmp_path / "o").exists()


def test_gen_config_names_the_priced_path_and_the_merge_fallback(tmp_path, capsys):
    """The context rank's slots are priced for default_gemm's path on --gpu (FP8 on h200: multi_buffer), and the
    merge fallback's [E, ...] slots beside it, by memory.rank_memory (R1 FP8 DWDP8: 2.82 GB more per rank)."""
    from dwdp_trtllm.deploy import memory as mem
    from dwdp_trtllm.spec.config import DwdpConfig
    from dwdp_trtllm.spec.models import PRESETS
    R1_SPEC = PRESETS["deepseek-r1"]
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--model", "m",
                 "--out", str(tmp_path / "o"), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["memory"]
    assert m["context_dwdp"]["gemm"] == "multi_buffer" and "sm_90" in m["gemm_priced_how"]
    merge = mem.rank_memory(R1_SPEC, "dwdp", dwdp=DwdpConfig(dwdp_size=8), weight_dtype="fp8", max_num_tokens=16384,
                            gpu_bytes=141 * mem.GB, gemm="merge")
    assert m["context_dwdp_merge_fallback"] == merge.to_dict()
    assert round(m["context_dwdp_merge_fallback"]["total_gb"] - m["context_dwdp"]["total_gb"], 2) == 2.82
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--model", "m",
                 "--gpu", "b200", "--gpu-memory-gb", "1000", "--weight-dtype", "bf16", "--out", str(tmp_path / "p")]) == 0
    out = " ".join(capsys.readouterr().out.split())  # prose wrapped at 80 columns
    assert "prefetch slots priced for gemm composite_view: moe_evidence.default_gemm for bf16 on b200 (sm_100)" in out
    assert "on the merge fallback, where the composite view and multi_buffer are both refused" in out
    # upstream's engine (NVFP4) is not priced for our paths
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--model", "m",
                 "--weight-dtype", "nvfp4", "--out", str(tmp_path / "q"), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["memory"]
    assert m["context_dwdp"]["gemm"] is None and m["context_dwdp_merge_fallback"] is None


def test_dwdp_yaml_header_states_default_gemm_from_default_gemm(monkeypatch, tmp_path):
    """gen-config's dwdp.yaml header is written from moe_evidence.default_gemm, not restated: change the rule and the
    header follows."""
    from dwdp_trtllm.integration import moe_evidence
    monkeypatch.setattr(moe_evidence, "default_gemm", lambda wd, sm: "composite_view")
    assert main(["gen-config", "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--model", "m",
                 "--out", str(tmp_path / "o")]) == 0
    head = (tmp_path / "o" / "dwdp.yaml").read_text().splitlines()[1]
    assert head == ("# no gemm: the engine picks it on the GPU it runs on (moe_evidence.default_gemm; fp8 experts: "
                    "composite_view on every GPU); add `gemm:` to force one"), head
