"""gen-config's servers as upstream's DWDP recipe configures them and as the one memory model prices them.

Upstream read file by file (NVIDIA/TensorRT-LLM):
- `tensorrt_llm/llmapi/llm_args.py` @ 0004396720054fd8: `MTPDecodingConfig._remap_deprecated_num_nextn_predict_layers`
  moves `num_nextn_predict_layers` to `max_draft_len` with a warning, the field itself `init=False` ("Do not set
  manually"); llm_args.py @ fcd3f31682808ae5 has `DecodingBaseConfig.max_draft_len: Optional[int] = None` and
  `MTPDecodingConfig.num_nextn_predict_layers: Optional[int] = 1`, no remap. `KvCacheConfig` (`enable_block_reuse` True, `dtype` "auto", `free_gpu_memory_fraction` 0.9),
  `BaseCudaGraphConfig` (`batch_sizes`, `enable_padding` False, max_batch_size = max(batch_sizes)), `MoeConfig.backend`
  default "AUTO".
- `examples/dwdp/reproduce.py` @ 4400b395 `build_worker_config`: context servers `max_batch_size` ctx_max_bs (4),
  `max_seq_len` isl + 1024 (`calc_seq_lens`), `kv_cache_config` {enable_block_reuse: false, dtype: fp8,
  free_gpu_memory_fraction: 0.3}; generation servers `cuda_graph_config` {enable_padding: true, batch_sizes:
  `_cuda_graph_batch_sizes(gen_max_tokens)`}.
"""
import json
import math
import sys
from typing import Optional

import pytest
import yaml

from dwdp_trtllm.cli import main
from dwdp_trtllm.deploy import memory as mem
from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.spec.models import PRESETS

R1 = PRESETS["deepseek-r1"]


def _gen(tmp_path, capsys, *args, name="o"):
    out = tmp_path / name
    rc = main(["gen-config", "--model", "/ckpt/m", "--out", str(out), *args])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    docs = {p.name: yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")}
    return out, printed.out, docs


def _refused(tmp_path, capsys, *args) -> str:
    out = tmp_path / "refused"
    assert main(["gen-config", "--model", "/ckpt/m", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()
    return err


# ---- MTP: the key each TensorRT-LLM takes -------------------------------------------------------------------------
#: MTPDecodingConfig's draft-count fields per upstream version (the module text a fake tensorrt_llm installs)
ERAS = {
    # llm_args.py @ 0004396720054fd8: the old key remapped to max_draft_len, the field init=False
    "0004396": """
from typing import Optional
from pydantic import BaseModel, Field, model_validator

class MTPDecodingConfig(BaseModel):
    max_draft_len: Optional[int] = None
    num_nextn_predict_layers: Optional[int] = Field(default=None, init=False)

    @model_validator(mode="before")
    @classmethod
    def _remap_deprecated_num_nextn_predict_layers(cls, data):
        if isinstance(data, dict) and "num_nextn_predict_layers" in data:
            data = dict(data)
            old = data.pop("num_nextn_predict_layers")
            data.setdefault("max_draft_len", old)
        return data
""",
    # llm_args.py @ fcd3f31682808ae5: the draft count is num_nextn_predict_layers, max_draft_len a separate field
    "fcd3f316": """
from typing import Optional
from pydantic import BaseModel

class DecodingBaseConfig(BaseModel):
    max_draft_len: Optional[int] = None

class MTPDecodingConfig(DecodingBaseConfig):
    num_nextn_predict_layers: Optional[int] = 1
""",
}


def _era(era: str):
    ns: dict = {}
    exec(ERAS[era], ns)  # noqa: S102 - the test's own transcription
    return ns["MTPDecodingConfig"]


def test_mtp_key_follows_the_upstream_version():
    pytest.importorskip("pydantic")
    from dwdp_trtllm.integration.gen_config import mtp_key_of, speculative_config
    new, old = _era("0004396"), _era("fcd3f316")
    assert mtp_key_of(new) == "max_draft_len" and mtp_key_of(old) == "num_nextn_predict_layers"
    body = lambda key: {k: v for k, v in speculative_config(3, key).items() if k != "decoding_type"}  # noqa: E731
    assert new(**body("max_draft_len")).max_draft_len == 3
    assert new(**body("num_nextn_predict_layers")).max_draft_len == 3  # the remap
    assert old(**body("num_nextn_predict_layers")).num_nextn_predict_layers == 3
    assert old(**body("max_draft_len")).num_nextn_predict_layers == 1  # the new key alone: one MTP layer there


def _install_fake_trtllm(tmp_path, monkeypatch, era: str):
    """A `tensorrt_llm.llmapi.llm_args` importable here whose MTPDecodingConfig is one era's (ERAS)."""
    pkg = tmp_path / f"site_{era}" / "tensorrt_llm"
    (pkg / "llmapi").mkdir(parents=True)
    (pkg / "__init__.py").write_text('print("[TensorRT-LLM] TensorRT-LLM version: x")\n')  # as upstream announces
    (pkg / "llmapi" / "__init__.py").write_text("")
    (pkg / "llmapi" / "llm_args.py").write_text(ERAS[era])
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(pkg.parent))


@pytest.mark.parametrize("era,key", [("0004396", "max_draft_len"), ("fcd3f316", "num_nextn_predict_layers")])
def test_gen_config_writes_the_key_of_the_importable_tensorrt_llm(tmp_path, capsys, monkeypatch, era, key):
    pytest.importorskip("pydantic")
    _install_fake_trtllm(tmp_path, monkeypatch, era)
    _, printed, docs = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8",
                            "--mtp", "3")
    assert "TensorRT-LLM version" not in printed  # the import's own print goes to stderr, not into the report
    w = docs["disagg_worker.yaml"]
    for section in ("context_servers", "generation_servers"):
        assert w[section]["speculative_config"] == {"decoding_type": "MTP", key: 3}
    flat = " ".join(printed.split())
    assert f"speculative_config.{key}" in flat and "read from the TensorRT-LLM importable here" in flat


def test_without_tensorrt_llm_the_current_key_and_an_explicit_flag(tmp_path, capsys, monkeypatch):
    """No TensorRT-LLM importable: max_draft_len (llm_args.py @ 0004396), said in the output; --mtp-key picks the old
    key for a version before it. The old gen-config wrote num_nextn_predict_layers everywhere."""
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # importlib.util.find_spec -> None: not importable
    _, printed, docs = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8")
    assert docs["disagg_worker.yaml"]["context_servers"]["speculative_config"] == {"decoding_type": "MTP",
                                                                                   "max_draft_len": 1}
    assert "no TensorRT-LLM importable here" in " ".join(printed.split())
    _, _, docs = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8",
                      "--mtp-key", "num_nextn_predict_layers", name="old")
    assert docs["disagg_worker.yaml"]["generation_servers"]["speculative_config"] == {
        "decoding_type": "MTP", "num_nextn_predict_layers": 1}


# ---- context servers: KV cache, batch and sequence as the memory model prices them ----------------------------------
def test_context_kv_fraction_equals_what_memory_budgets(tmp_path, capsys):
    _, printed, docs = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--json")
    ctx = docs["disagg_worker.yaml"]["context_servers"]
    rank = mem.rank_memory(R1, "dwdp", dwdp=DwdpConfig(dwdp_size=8), weight_dtype="fp8", max_num_tokens=16384,
                           gpu_bytes=141 * mem.GB, gemm="multi_buffer")  # the priced rank (gen-config --json says so)
    kv = mem.context_kv(R1, rank, max_batch_size=4, max_seq_len=16384 + 1024, kv_dtype="fp8")
    assert ctx["kv_cache_config"] == {"enable_block_reuse": False, "dtype": "fp8",
                                      "free_gpu_memory_fraction": kv.fraction}
    assert ctx["max_batch_size"] == 4 and ctx["max_seq_len"] == 17408
    # the budget by hand: what the rank leaves besides its KV floor; 4 requests of 17,408 tokens of MLA latent
    # (kv_lora 512 + rope 64) over 61 layers, 1 byte each in fp8
    free = 141 * mem.GB - (rank.total - rank.kv_cache_floor)
    need = 4 * 17408 * 61 * (512 + 64)
    assert (kv.free, kv.need) == (free, need) and kv.fraction == math.ceil(need / free * 100) / 100 == 0.2
    assert json.loads(printed)["context_kv"] == kv.to_dict()  # --json reports the same numbers


def test_context_kv_dtype_auto_is_priced_in_bf16(tmp_path, capsys):
    _, printed, docs = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8",
                            "--kv-dtype", "auto")
    kv = docs["disagg_worker.yaml"]["context_servers"]["kv_cache_config"]
    assert kv["dtype"] == "auto" and kv["free_gpu_memory_fraction"] == 0.39  # twice the fp8 bytes of 0.2 (rounded up)
    assert "KV cache auto, 4 x 17,408 tokens: 4.9 GB of the 12.7 GB left" in " ".join(printed.split())


def test_context_batch_shrinks_to_what_fits_and_a_misfit_is_refused(tmp_path, capsys):
    """Qwen3-235B FP8 at DWDP4 on an H100: 4 requests of 17,408 tokens need 6.7 GB of KV where 6.5 GB are left, so
    the default batch is the 3 that fit; --ctx-batch 4 asked explicitly, or an ISL no request fits, is refused naming
    the flag; nothing written."""
    args = ["--preset", "qwen3-235b-a22b", "--dwdp-size", "4", "--gen-tp", "8", "--gpu", "h100"]
    _, printed, docs = _gen(tmp_path, capsys, *args)
    assert docs["disagg_worker.yaml"]["context_servers"]["max_batch_size"] == 3
    assert "max_batch_size 3 (the requests whose KV cache fits, fewer than the recipe's 4)" in " ".join(printed.split())
    err = _refused(tmp_path, capsys, *args, "--ctx-batch", "4")
    assert "--ctx-batch" in err and "6.7 GB of the 6.5 GB left" in err and "3 request(s) of 17,408 tokens fit" in err
    err = _refused(tmp_path, capsys, *args, "--isl", "300000")
    assert "--isl" in err and "0 request(s) of 301,024 tokens fit" in err


# ---- generation servers: CUDA graphs and the priced MoE backend ---------------------------------------------------
def _recipe_ladder(gen_max_num_tokens: int) -> list[int]:
    """examples/dwdp/reproduce.py @ 4400b395 `_cuda_graph_batch_sizes`, as tests/unit/upstream_recipe.py transcribes
    it (one transcription)."""
    from upstream_recipe import _cuda_graph_batch_sizes
    return _cuda_graph_batch_sizes(gen_max_num_tokens)


@pytest.mark.parametrize("batch", [1, 3, 20, 256, 1100])
def test_generation_cuda_graphs_pad_to_the_batches_the_server_runs(tmp_path, capsys, batch):
    _, _, docs = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8",
                      "--gen-batch", str(batch))
    gen = docs["disagg_worker.yaml"]["generation_servers"]
    graphs = gen["cuda_graph_config"]
    assert graphs["enable_padding"] is True and set(graphs) == {"enable_padding", "batch_sizes"}
    # upstream's BaseCudaGraphConfig takes max(batch_sizes) as its max_batch_size: the server's own
    assert graphs["batch_sizes"] == [b for b in _recipe_ladder(4096) if b < batch] + [batch]
    assert max(graphs["batch_sizes"]) == gen["max_batch_size"] == batch


@pytest.mark.parametrize("gpu,backend", [("h200", "CUTLASS"), ("b200", "DEEPGEMM")])
def test_generation_moe_backend_is_the_one_priced(tmp_path, capsys, gpu, backend):
    """The fused-MoE rows `dwdp size` prices decode steps with (perf/kernel_tables.py kernel_source: H200 FP8
    moe_torch_flow_cutlass, B200 FP8 deepgemm), not MoeConfig's AUTO default."""
    _, printed, docs = _gen(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8",
                            "--gpu", gpu, "--gpu-memory-gb", "400")
    assert docs["disagg_worker.yaml"]["generation_servers"]["moe_config"] == {"backend": backend}
    assert f"generation server moe_config.backend {backend}" in " ".join(printed.split())


# ---- ports, hosts, output width -----------------------------------------------------------------------------------
def test_the_highest_port_must_be_a_port(tmp_path, capsys):
    """4 context + 1 generation server listen on --port + 1 .. --port + 5: 65530 is the highest proxy port."""
    args = ["--preset", "deepseek-r1", "--dwdp-size", "4", "--gen-tp", "4", "--gpu-memory-gb", "400"]
    _, _, docs = _gen(tmp_path, capsys, *args, "--port", "65530")
    assert docs["disagg_proxy.yaml"]["generation_servers"]["urls"] == ["localhost:65535"]
    for port in ("65531", "65535"):
        err = _refused(tmp_path, capsys, *args, "--port", port)
        assert "--port" in err and "use --port 65530 or lower" in err


def test_empty_hosts_is_refused(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--preset", "deepseek-r1", "--dwdp-size", "8", "--hosts", "")
    assert "--hosts" in err and "empty" in err


SHAPES = {
    "two-nodes": ["--preset", "deepseek-r1", "--dwdp-size", "8"],
    "rendezvous": ["--preset", "deepseek-r1", "--dwdp-size", "4", "--gen-tp", "4", "--gpu-memory-gb", "400",
                   "--launch", "rendezvous"],
    "merge-fallback": ["--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--gpu", "b200",
                       "--gpu-memory-gb", "1000", "--weight-dtype", "bf16"],
    "no-dims": ["--num-experts", "16", "--dwdp-size", "4", "--gen-tp", "2"],
    "aggregated": ["--mode", "aggregated", "--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gpu", "gb200"],
    "bench": ["--mode", "bench", "--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gpu", "gb200"],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_output_fits_80_columns(tmp_path, capsys, shape):
    """Every printed line within 80 columns (the output folder's own path aside: a temp path's length is not ours);
    the memory lines were up to 374 characters."""
    out, printed, _ = _gen(tmp_path, capsys, *SHAPES[shape])
    wide = [ln for ln in printed.replace(str(out.resolve()), "OUT").splitlines() if len(ln) > 80]
    assert wide == []


def test_plan_names_each_unit_once(capsys):
    """`dwdp plan` where DWDP7 does not fit but DEP7 does printed the parts '... KV-cache floor 1.2 GB GB'."""
    assert main(["plan", "--model", "deepseek-r1", "--gpu", "h200", "--weight-dtype", "fp8", "--dwdp-size", "7",
                 "--isl", "16384", "--mnt", "16384"]) == 0
    out = capsys.readouterr().out
    assert "use DEP here: memory does not fit" in out and "KV-cache floor 1.2 GB)" in out
    assert "GB GB" not in out
