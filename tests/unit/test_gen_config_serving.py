"""gen-config's serving settings (issue: deployment guesses): the KV transfer buffer from --isl, MTP as upstream's
DWDP recipe sets it, generation servers sized with their reasons, the shared-storage requirement, every option with
help text, and the rendezvous launch (one single-GPU trtllm-serve per context server)."""
import json
import re

import pytest
import yaml

from dwdp_trtllm.cli import main

R1 = ["--preset", "deepseek-r1", "--dwdp-size", "4", "--gen-tp", "4", "--gpu-memory-gb", "400"]


def _gen(tmp_path, capsys, *args, name="o"):
    out = tmp_path / name
    assert main(["gen-config", "--model", "/ckpt/m", "--out", str(out), *args]) == 0, capsys.readouterr().err
    printed = " ".join(capsys.readouterr().out.split())  # prose wrapped at 80 columns: compared as one line
    return out, printed, {p.name: yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")}


def test_kv_transfer_buffer_follows_the_isl(tmp_path, capsys):
    """max_tokens_in_buffer = ISL + 1024 rounded up to 64 (upstream's reproduce.py), the ISL from --isl, by default
    --max-num-tokens; it was a hard-coded 9216 whatever the deployment was sized for."""
    _, printed, docs = _gen(tmp_path, capsys, *R1)
    w = docs["disagg_worker.yaml"]
    assert w["context_servers"]["cache_transceiver_config"]["max_tokens_in_buffer"] == 16384 + 1024
    assert "max_tokens_in_buffer 17408 (--isl 16384 + 1024, rounded up to 64" in printed
    _, _, docs = _gen(tmp_path, capsys, *R1, "--isl", "30000", name="p")
    w = docs["disagg_worker.yaml"]
    for section in ("context_servers", "generation_servers"):
        assert w[section]["cache_transceiver_config"]["max_tokens_in_buffer"] == 31040  # ceil(31024 / 64) * 64


def test_mtp_as_the_recipe_sets_it(tmp_path, capsys):
    """DeepSeek-R1 (num_nextn_predict_layers 1): speculative_config MTP 1 on context and generation servers by
    default, cuda_graph_config still null on context servers; --mtp 3 / --mtp 0 as asked; a checkpoint without MTP
    layers refuses --mtp > 0 naming the flag; a config.json's num_nextn_predict_layers is read."""
    _, printed, docs = _gen(tmp_path, capsys, *R1)
    ctx, gen = docs["disagg_worker.yaml"]["context_servers"], docs["disagg_worker.yaml"]["generation_servers"]
    assert ctx["speculative_config"] == gen["speculative_config"] == {"decoding_type": "MTP", "max_draft_len": 1}
    assert "cuda_graph_config" in ctx and ctx["cuda_graph_config"] is None
    assert "MTP: 1 draft token (speculative_config.max_draft_len on every server" in printed
    _, _, docs = _gen(tmp_path, capsys, *R1, "--mtp", "3", name="m3")
    assert docs["disagg_worker.yaml"]["context_servers"]["speculative_config"]["max_draft_len"] == 3
    _, _, docs = _gen(tmp_path, capsys, *R1, "--mtp", "0", name="m0")
    assert "speculative_config" not in docs["disagg_worker.yaml"]["context_servers"]
    assert main(["gen-config", "--model", "m", "--out", str(tmp_path / "q"), "--preset", "qwen3-30b-a3b",
                 "--mtp", "1"]) == 2
    assert "--mtp: 1 draft tokens, but the checkpoint has no MTP layer" in capsys.readouterr().err
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"num_nextn_predict_layers": "one"}))
    from types import SimpleNamespace

    from dwdp_trtllm.commands.gen_config_serving import checkpoint_mtp_layers
    from dwdp_trtllm.errors import ConfigError
    with pytest.raises(ConfigError, match=r"config.json: num_nextn_predict_layers: expected an integer in \[0, 64\], got 'one'"):
        checkpoint_mtp_layers(SimpleNamespace(preset=str(ckpt), num_experts=None, model="m"))
    (ckpt / "config.json").write_text(json.dumps({"num_nextn_predict_layers": 2}))
    assert checkpoint_mtp_layers(SimpleNamespace(preset=None, num_experts=None, model=str(ckpt))) == 2
    assert checkpoint_mtp_layers(SimpleNamespace(preset=None, num_experts=16, model=str(ckpt))) is None


def test_generation_servers_are_sized_with_their_reasons(tmp_path, capsys):
    """max_batch_size from the KV room (requests of ISL + OSL tokens), max_num_tokens = batch x (1 + MTP), KV
    fraction 0.75, each printed with its reason; --gen-batch overrides the batch. Today: none of them written."""
    _, printed, docs = _gen(tmp_path, capsys, *R1)
    gen = docs["disagg_worker.yaml"]["generation_servers"]
    b = gen["max_batch_size"]
    assert 1 <= b <= 256 and gen["max_num_tokens"] == 2 * b and gen["kv_cache_config"] == {"free_gpu_memory_fraction": 0.75}
    assert f"generation server max_batch_size {b}: " in printed
    assert f"generation server max_num_tokens {2 * b}: max_batch_size x (1 + 1 MTP draft tokens)" in printed
    assert "free_gpu_memory_fraction 0.75: upstream's generation servers" in printed
    # a longer request leaves room for fewer of them
    _, _, docs = _gen(tmp_path, capsys, *R1, "--isl", "60000", "--osl", "4000", name="long")
    assert docs["disagg_worker.yaml"]["generation_servers"]["max_batch_size"] < b or b == 256
    _, printed, docs = _gen(tmp_path, capsys, *R1, "--gen-batch", "8", name="b8")
    gen = docs["disagg_worker.yaml"]["generation_servers"]
    assert gen["max_batch_size"] == 8 and gen["max_num_tokens"] == 16 and "max_batch_size 8: --gen-batch" in printed


def test_shared_storage_is_stated_in_output_and_commands(tmp_path, capsys):
    out, printed, _ = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8")
    assert re.search(r"shared storage: .* \(this folder\) and the checkpoint /ckpt/m must be readable at the same "
                     r"path on all 2 nodes", printed)
    assert "# shared storage: this folder and the checkpoint /ckpt/m must be readable at the same path on all 2 " \
           "nodes" in (out / "commands.sh").read_text()


def test_every_gen_config_option_has_help_text():
    import argparse

    from dwdp_trtllm.commands import gen_config
    sub = argparse.ArgumentParser().add_subparsers()
    p = gen_config.add_parser(sub)
    missing = [a.option_strings[0] for a in p._actions if a.option_strings and not a.help]
    assert missing == []


def test_rendezvous_launch_writes_one_trtllm_serve_per_server(tmp_path, capsys):
    """--launch rendezvous: per-server YAML, one line per context server with its TRTLLM_DWDP_RANK and the master's
    address and port, the generation server on its own GPUs, the proxy; two nodes: launch.slurm with one srun per
    server on its node (no MPI world); an aggregated server is refused."""
    out, _, docs = _gen(tmp_path, capsys, *R1, "--launch", "rendezvous")
    assert set(docs) == {"disagg_proxy.yaml", "ctx_server.yaml", "gen_server.yaml", "dwdp.yaml"}
    assert docs["ctx_server.yaml"]["tensor_parallel_size"] == 1 and docs["ctx_server.yaml"]["cuda_graph_config"] is None
    assert docs["gen_server.yaml"]["tensor_parallel_size"] == 4
    cmds = (out / "commands.sh").read_text()
    assert "mpirun" not in cmds and "disaggregated_mpi_worker" not in cmds
    for r in range(4):
        assert (f'CUDA_VISIBLE_DEVICES={r} DWDP_TRTLLM_CONFIG="$D/dwdp.yaml" TRTLLM_DWDP_RANK={r} '
                f"TRTLLM_DWDP_MASTER_ADDR=localhost "
                f"TRTLLM_DWDP_MASTER_PORT=29600 trtllm-serve /ckpt/m --host localhost --port {8001 + r} "
                f'--extra_llm_api_options "$D/ctx_server.yaml" >"$D/context{r}.log" 2>&1 &') in cmds
    # the generation server gets no DWDP_TRTLLM_CONFIG: it has no context rank and must not start our engine
    assert "\nCUDA_VISIBLE_DEVICES=4,5,6,7 trtllm-serve /ckpt/m --host localhost --port 8005 " \
           '--extra_llm_api_options "$D/gen_server.yaml"' in cmds and "export DWDP_TRTLLM_CONFIG" not in cmds
    assert cmds.rstrip().endswith('trtllm-serve disaggregated -c "$D/disagg_proxy.yaml"')
    urls = docs["disagg_proxy.yaml"]["context_servers"]["urls"]
    assert urls == [f"localhost:{8001 + r}" for r in range(4)]
    out, _, _ = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--launch",
                     "rendezvous", name="two")
    slurm = (out / "launch.slurm").read_text()
    assert slurm.count("TRTLLM_DWDP_RANK=") == 8 and "TRTLLM_DWDP_MASTER_ADDR=${H[0]}" in slurm
    # the TP8 generation server: one task per GPU in a pmix step, trtllm-llmapi-launch making tasks 1-7 its MPI
    # workers (NVIDIA/srt-slurm src/srtctl/backends/trtllm.py @ 15709a57: get_srun_config mpi="pmix",
    # build_worker_command)
    assert ('srun --mpi=pmix --overlap -N 1 -n 8 -w "${H[1]}" --gres=gpu:8 env CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 '
            'trtllm-llmapi-launch trtllm-serve') in slurm
    assert 'srun --mpi=pmix --overlap -N 1 -n 1 -w "${H[0]}" --gres=gpu:8 env CUDA_VISIBLE_DEVICES=0 ' in slurm
    srun = [ln for ln in slurm.splitlines() if "srun " in ln]
    assert len(srun) == 11 and all("srun --mpi=pmix " in ln for ln in srun), srun  # hook, 8 ctx, 1 gen, proxy
    assert "mpirun" not in slurm and "disaggregated_mpi_worker" not in slurm
    assert main(["gen-config", "--model", "m", "--out", str(tmp_path / "a"), "--mode", "aggregated", "--preset",
                 "deepseek-r1", "--weight-dtype", "nvfp4", "--gpu", "gb200", "--launch", "rendezvous"]) == 2
    assert "--launch: rendezvous starts the context servers" in capsys.readouterr().err


def test_gen_config_says_which_context_batching_it_wrote_and_what_dwdp_size_prices(tmp_path, capsys):
    """gen-config run alone writes whole prompts and max_batch_size 4 (TensorRT-LLM's default, upstream's recipe)
    where `dwdp size` prices chunked prefill with no request cap unless told: it prints both in one line, with the
    size flags that price what it wrote (spec/batching.describe_context_batching words both); with
    --chunked-prefill --ctx-batch 3 only the cap differs; the written YAML is what the line says."""
    _, printed, docs = _gen(tmp_path, capsys, *R1)
    ctx = docs["disagg_worker.yaml"]["context_servers"]
    assert ctx["max_batch_size"] == 4 and "enable_chunked_prefill" not in ctx
    assert ("context batching written: whole prompts (no chunked prefill), at most 4 requests per rank per "
            "iteration (--chunked-prefill, --ctx-batch); `dwdp size` prices chunked prefill up to max_num_tokens, "
            "no request limit per rank per iteration unless given --no-chunked-prefill --ctx-max-batch 4") in printed
    _, printed, docs = _gen(tmp_path, capsys, *R1, "--chunked-prefill", "--ctx-batch", "3", name="c")
    ctx = docs["disagg_worker.yaml"]["context_servers"]
    assert ctx["max_batch_size"] == 3 and ctx["enable_chunked_prefill"] is True
    assert ("context batching written: chunked prefill up to max_num_tokens, at most 3 requests per rank per "
            "iteration (--chunked-prefill, --ctx-batch); `dwdp size` prices chunked prefill up to max_num_tokens, "
            "no request limit per rank per iteration unless given --ctx-max-batch 3") in printed
    from dwdp_trtllm.spec.batching import SIZE_CONTEXT_BATCHING, describe_context_batching
    assert SIZE_CONTEXT_BATCHING == (True, 0)
    assert describe_context_batching(False, 1) == "whole prompts (no chunked prefill), at most 1 request per rank per iteration"
