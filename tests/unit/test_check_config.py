"""`dwdp check-config`: one verdict per TensorRT-LLM server of upstream's DWDP recipe (its Hopper variant passes; as
published, or broken, it does not), read from extra-llm-api and disaggregated YAML files; every line within 80
columns; exit 2 with one line for a bad file; KV as TensorRT-LLM would size it (kv_cache_config's fraction, else
KvCacheConfig's default 0.9, llm_args.py @ 0004396720054fd8) of what the memory model leaves free."""
from __future__ import annotations

import copy

import pytest
import yaml

from dwdp_trtllm.cli import main
from dwdp_trtllm.deploy import memory as mem
from dwdp_trtllm.integration.moe_evidence import priced_gemm
from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.spec.models import PRESETS
from upstream_recipe import hopper, worker_config

ROW = "e2e_80_100_dwdp_minus_1"  # MTP 3, 12 context servers, a TP16 generation server with EPLB
H200 = 141 * 10**9


def _write(path, data):
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path.name


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Files are named relative to the test's folder, as a deployer names them: no line depends on the temp path."""
    monkeypatch.chdir(tmp_path)


def _hopper_files(tmp_path, dwdp_size=8):
    """The recipe's two servers on Hopper: CUTLASS on both, FP8 weights (the checkpoint), dwdp_config in our file;
    DeepSeek-R1 FP8 needs groups of 8 on H200 (the recipe's 4 are for NVFP4 experts, half the bytes)."""
    w = worker_config(ROW)
    ctx, ours = hopper(w["ctx"])
    gen = copy.deepcopy(w["gen"])
    gen["moe_config"]["backend"] = "CUTLASS"
    ours["dwdp_config"] = {"dwdp_size": dwdp_size, "num_groups": 1}
    return (_write(tmp_path / "ctx_config.yaml", ctx), _write(tmp_path / "gen_config.yaml", gen),
            _write(tmp_path / "dwdp.yaml", ours))


def _check(capsys, *argv):
    rc = main(["check-config", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _wide(text):
    return [ln for ln in text.splitlines() if len(ln) > 80]


def test_upstreams_recipe_on_hopper_loads(tmp_path, capsys):
    ctx, gen, ours = _hopper_files(tmp_path)
    rc, out, err = _check(capsys, ctx, gen, "--dwdp", ours, "--gpu", "h200")
    assert rc == 0, out + err
    assert out.count("verdict: loads") == 2 and out.rstrip().endswith("every server would load")
    assert "context server (role from its file name)" in out and "generation server (role from its file name)" in out
    assert "refused: nothing" in out and not _wide(out), _wide(out)


def test_kv_is_the_yamls_fraction_of_what_the_memory_model_leaves_free(tmp_path, capsys):
    """The context server's KV: its 0.3 (the recipe's) x (GPU less the DWDP8 rank's parts other than the KV floor),
    rank_memory's numbers (no second copy of the arithmetic here), in fp8; it must hold max_num_tokens 33000."""
    ctx, gen, ours = _hopper_files(tmp_path)
    rc, out, _ = _check(capsys, ctx, "--dwdp", ours, "--json")
    assert rc == 0
    import json
    (v,) = json.loads(out)["servers"]
    spec = PRESETS["deepseek-r1"]
    m = mem.rank_memory(spec, "dwdp", dwdp=DwdpConfig(dwdp_size=8, num_groups=1), weight_dtype="fp8",
                        max_num_tokens=33000, gpu_bytes=H200, gemm=priced_gemm("fp8", "h200")[0])
    free = H200 - (m.total - m.kv_cache_floor)
    kv = v["kv_cache"]
    assert kv["fraction"] == 0.3 and kv["fraction_from"] == "its kv_cache_config.free_gpu_memory_fraction"
    assert kv["free_gb"] == pytest.approx(mem.gb(free)) and kv["alloc_gb"] == pytest.approx(mem.gb(int(free * 0.3)))
    assert kv["tokens"] == int(free * 0.3) // (mem.kv_cache_floor_bytes(spec, 1) // 2) and kv["dtype"] == "fp8"
    assert kv["need_tokens"] == 33000 and kv["fits"] and v["memory"]["total_gb"] == pytest.approx(mem.gb(m.total))


def test_kv_fraction_defaults_to_tensorrt_llms(tmp_path, capsys):
    ctx, _, ours = _hopper_files(tmp_path)
    data = yaml.safe_load(open(ctx))
    del data["kv_cache_config"]
    rc, out, _ = _check(capsys, _write(tmp_path / "ctx_server.yaml", data), "--dwdp", ours)
    assert rc == 0 and "KV cache: 0.9 (TensorRT-LLM's default, KvCacheConfig in llm_args.py @" in " ".join(out.split())


def test_a_disaggregated_file_gives_one_verdict_per_section(tmp_path, capsys):
    """context_servers / generation_servers with the recipe's servers, top-level keys inherited into both as upstream's
    extract_disagg_cfg does (disagg_utils.py @ 0228a7122341); the proxy's own keys are not server settings."""
    ctx, gen, ours = _hopper_files(tmp_path)
    c, g = yaml.safe_load(open(ctx)), yaml.safe_load(open(gen))
    c.pop("trust_remote_code"), g.pop("trust_remote_code")
    disagg = {"hostname": "node-a", "port": 8000, "backend": "pytorch", "trust_remote_code": True,
              "context_servers": {"num_instances": 12, "urls": [f"node-b:{8001 + i}" for i in range(12)], **c},
              "generation_servers": {"num_instances": 1, "urls": ["node-c:8100"], **g}}
    rc, out, _ = _check(capsys, _write(tmp_path / "disagg.yaml", disagg), "--dwdp", ours)
    assert rc == 0, out
    assert "disagg.yaml context_servers: context server x12 (role from its section)" in out
    assert "disagg.yaml generation_servers: generation server (role from its" in out
    bad = {**disagg, "context_servers": {**disagg["context_servers"], "trust_remote_code": False}}
    rc, out, err = _check(capsys, _write(tmp_path / "bad.yaml", bad), "--dwdp", ours)
    assert rc == 2 and "context_servers.trust_remote_code: given at the top level too" in err and not out


def test_the_recipe_as_published_fails_naming_each_refusal(tmp_path, capsys):
    published = _write(tmp_path / "ctx_config.yaml", worker_config(ROW)["ctx"])
    rc, out, _ = _check(capsys, published)
    flat = " ".join(out.split())
    assert rc == 2 and "refused: 2 setting(s)" in out and "verdict: refused at load" in out
    assert "moe_config.backend = 'CUTEDSL'" in flat and "dwdp_config = {dwdp_size: 4" in flat
    # priced with its own dwdp_config (DWDP4): FP8 R1 does not fit an H200 in groups of 4
    assert "DWDP4 per rank" in flat and "(does NOT fit)" in flat and not _wide(out)


def test_a_group_that_does_not_fit_fails(tmp_path, capsys):
    ctx, _, _ = _hopper_files(tmp_path)
    rc, out, _ = _check(capsys, ctx, "--dwdp-size", "4")
    assert rc == 2 and "refused: nothing" in out and "verdict: does NOT fit" in out


@pytest.mark.parametrize("patch,key", [
    ({"moe_config": {"backend": "CUTLASS", "max_num_tokens": "big"}}, "moe_config.max_num_tokens"),
    ({"moe_expert_parallel_size": "2"}, "moe_expert_parallel_size"),
    ({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": -1}},
     "speculative_config.num_nextn_predict_layers"),
    ({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 0}},
     "speculative_config.num_nextn_predict_layers"),
    ({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": "2"}},
     "speculative_config.num_nextn_predict_layers"),
    ({"max_num_tokens": [33000]}, "max_num_tokens"),
    ({"kv_cache_config": "fp8"}, "kv_cache_config"),
])
def test_a_broken_server_fails_naming_the_key(tmp_path, capsys, patch, key):
    ctx, gen, ours = _hopper_files(tmp_path)
    for path in (ctx, gen):
        data = {**yaml.safe_load(open(path)), **patch}
        rc, out, err = _check(capsys, _write(tmp_path / path, data), "--dwdp", ours)
        assert rc == 2 and not err, err
        flat = " ".join(out.split())
        assert f"- {key} = " in flat and "verdict: refused at load" in out, out
        assert not _wide(out)


@pytest.mark.parametrize("content,says", [
    (None, "no such file"), (b"a: [1, 2\n", "not valid YAML"), (b"- 1\n- 2\n", "expected a mapping"),
    (b"", "got an empty file"), (b"a: " + b"[" * 500 + b"]" * 500 + b"\n", "nested deeper than"),
    (b"\xff\xfe max_num_tokens: 1\n", "expected UTF-8 text"), (b"context_servers: 3\n", "context_servers: expected a mapping"),
    (b"context_servers: {num_instances: 0}\n", "context_servers.num_instances: expected an integer of at least 1"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path, capsys, content, says):
    path = tmp_path / "server.yaml"
    if content is not None:
        path.write_bytes(content)
    rc, out, err = _check(capsys, "server.yaml", "--dwdp-size", "8")
    assert rc == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert "server.yaml" in err and says in err, err


def test_bad_arguments_name_the_flag(tmp_path, capsys):
    ctx, _, _ = _hopper_files(tmp_path)
    for argv, flag in ((["--model", "nope"], "--model"), (["--dwdp-size", "0"], "--dwdp-size"),
                       (["--gpu", "h999"], "--gpu")):
        rc, out, err = _check(capsys, ctx, *argv)
        assert rc == 2 and flag in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_role_flags_and_gen_config_output(tmp_path, capsys):
    """--gen / --ctx force a plain file's role; gen-config's own disaggregated files pass with its dwdp.yaml."""
    ctx, gen, ours = _hopper_files(tmp_path)
    rc, out, _ = _check(capsys, "--dwdp", ours, "--gen", gen, "--ctx", ctx, ctx)
    assert rc == 0 and out.count("(role from as given)") == 2 and out.count("verdict: loads") == 3
    rc, out, _ = _check(capsys, "--dwdp", ours, "--ctx", gen)  # a generation server's settings on a context one
    assert rc == 2 and "enable_attention_dp = True" in out and "tensor_parallel_size = 16" in out
    assert main(["gen-config", "--model", "/ckpt/m", "--out", "deploy", "--mode", "disaggregated", "--preset",
                 "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--weight-dtype", "fp8"]) == 0
    capsys.readouterr()
    rc, out, err = _check(capsys, "deploy/disagg_worker.yaml", "--dwdp", "deploy/dwdp.yaml")
    assert rc == 0, out + err
    assert out.count("verdict: loads") == 2 and not _wide(out)


def test_docs_show_the_real_output_on_upstreams_recipe(tmp_path, capsys):
    """docs/TRTLLM.md "Following upstream's recipe on Hopper" prints check-config's output on the recipe's
    e2e_20_40_dwdp_minus_1 row (Hopper variant, groups of 8) and on its published context server: the same text."""
    from pathlib import Path
    w = worker_config("e2e_20_40_dwdp_minus_1")
    ctx, ours = hopper(w["ctx"])
    gen = copy.deepcopy(w["gen"])
    gen["moe_config"]["backend"] = "CUTLASS"
    ours["dwdp_config"] = {"dwdp_size": 8, "num_groups": 2}
    _write(tmp_path / "ctx_config.yaml", ctx), _write(tmp_path / "gen_config.yaml", gen)
    _write(tmp_path / "dwdp.yaml", ours), _write(tmp_path / "ctx_published.yaml", w["ctx"])
    docs = (Path(__file__).resolve().parents[2] / "docs/TRTLLM.md").read_text()
    section = docs.split("## Following upstream's recipe on Hopper", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0].strip("\n") for b in section.split("```text\n")[1:]]
    rc, out, _ = _check(capsys, "ctx_config.yaml", "gen_config.yaml", "--dwdp", "dwdp.yaml")
    assert rc == 0 and out.rstrip("\n") == blocks[0]
    rc, out, _ = _check(capsys, "ctx_published.yaml")
    assert rc == 2 and out.rstrip("\n") == blocks[1]
    assert "dwdp_size: 8\n     num_groups: 2" in section


def test_a_kv_cache_short_of_the_full_batch_still_loads(tmp_path, capsys):
    """The recipe's generation server on DEP8 holds fewer of its 256 requests of 10,240 tokens at once than
    max_batch_size: said, not a load failure (TensorRT-LLM schedules fewer at a time); its KV is the yaml's 0.75."""
    import json
    _, gen, _ = _hopper_files(tmp_path)
    data = yaml.safe_load(open(gen))
    data.update(tensor_parallel_size=8, moe_expert_parallel_size=8, max_batch_size=256)
    rc, out, _ = _check(capsys, _write(tmp_path / "gen_server.yaml", data), "--json")
    (v,) = json.loads(out)["servers"]
    kv = v["kv_cache"]
    assert rc == 0 and v["loads"] and kv["fits"] and kv["requests_held"] == kv["tokens"] // 10240 < 256
    rc, out, _ = _check(capsys, "gen_server.yaml")
    assert f"holds {kv['requests_held']:,} of max_batch_size 256 requests of max_seq_len 10,240" in " ".join(out.split())


def _rank_total(capsys, tmp_path, server: dict, name: str, dwdp_size: int | None = None) -> tuple[bool, float]:
    """(loads, the rank's GB) of one server file, as check-config --json says (a context server as one rank of a
    group of dwdp_size)."""
    import json
    argv = [_write(tmp_path / name, server), "--json"]
    if dwdp_size is not None:
        argv += ["--dwdp", _write(tmp_path / f"dwdp{dwdp_size}.yaml",
                                  {"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": dwdp_size}})]
    _, out, _ = _check(capsys, *argv)
    (v,) = json.loads(out)["servers"]
    return v["loads"], round(v["memory"]["total_gb"], 1)


def test_the_recipes_other_rows_on_hopper_as_docs_say(tmp_path, capsys):
    """docs/TRTLLM.md "Following upstream's recipe on Hopper": on H200 with FP8 weights no context group below 8
    fits (DWDP7, DWDP6), a group of 12 does, and every row's generation server loads but context_only_dwdp's TP4;
    the section's numbers are check-config's."""
    from pathlib import Path
    from upstream_recipe import ROWS
    docs = (Path(__file__).resolve().parents[2] / "docs/TRTLLM.md").read_text()
    section = " ".join(docs.split("## Following upstream's recipe on Hopper", 1)[1].split("\n## ", 1)[0].split())
    ctx, _ = hopper(worker_config("e2e_40_60_dwdp_minus_1")["ctx"])
    for size, fits in [(6, False), (7, False), (8, True), (12, True)]:
        loads, gb = _rank_total(capsys, tmp_path, ctx, "ctx_server.yaml", size)
        assert loads is fits, (size, gb)
        if size != 8:
            assert f"DWDP{size} {gb} GB" in section, (size, gb)
    for row in ROWS:
        gen = copy.deepcopy(worker_config(row)["gen"])
        gen["moe_config"]["backend"] = "CUTLASS"
        loads, gb = _rank_total(capsys, tmp_path, gen, f"gen_{row}.yaml")
        assert loads is (row != "context_only_dwdp"), (row, gb)
        if not loads:
            assert f"DEP{gen['tensor_parallel_size']} {gb} GB per rank" in section
    assert sorted({worker_config(r)["ctx"]["dwdp_config"]["dwdp_size"] * worker_config(r)["ctx"]["dwdp_config"][
        "num_groups"] for r in ROWS}) == [4, 8, 12, 16]  # the server counts the section names
