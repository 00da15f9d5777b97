"""The serving-feature matrix of a DWDP context server (integration/serving_features.py), enforced before any weight
loads: every setting supported (a test here) or refused in one message naming key, value and what to set instead;
weight updates refused before any Parameter changes (at NVIDIA's walk, or at the preflight of the fork that has
one); two-model speculative decoding refused up front; the MoE backend gate
accepting exactly the verified class. Fakes: tests/fakes/tensorrt_llm (llm_args.py, rlhf_utils.py cite what they
mirror); one subprocess per fake-tree case, as test_trtllm_lifecycle.py."""
import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from dwdp_trtllm.cli import main
from dwdp_trtllm.errors import ConfigError
from dwdp_trtllm.integration.serving_features import SERVING_FEATURES, ServingFeaturesRefused, check_serving_args, \
    refuse_unsupported, speculative_mode
from test_trtllm_fake_world import _env, era_tree

REPO = Path(__file__).resolve().parents[2]
MOE = "tensorrt_llm._torch.moe.fused_moe"  # the VA-era MoE package root (lifecycle tree)
TINY = """
from types import SimpleNamespace
from tensorrt_llm._torch.models.modeling_tiny import TinyDecoder
def tiny():
    mapping = SimpleNamespace(moe_ep_size=1, moe_ep_rank=0, moe_tp_size=1, tp_size=1, dp_size=1)
    return TinyDecoder(SimpleNamespace(mapping=mapping, quant_config=None))
"""


def _fake_llm_args():
    """The fake tree's llm_args.py loaded by path under a private name (no fake `tensorrt_llm` in this process)."""
    path = REPO / "tests/fakes/tensorrt_llm/llmapi/llm_args.py"
    spec = importlib.util.spec_from_file_location("_fake_llm_args", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LA = _fake_llm_args()


def _ok(**kw):
    """TorchLlmArgs as gen-config's context server sets it (CUDA graphs off, overlap scheduler off, CUTLASS) + kw."""
    return LA.TorchLlmArgs(**{"cuda_graph_config": None, "disable_overlap_scheduler": True,
                              "moe_config": LA.MoeConfig(backend="CUTLASS"), **kw})


def _keys(args) -> list[str]:
    return [r.key for r in check_serving_args(args)]


def _run(tmp: Path, tree: Path, code: str) -> subprocess.CompletedProcess:
    cfg = tmp / "dwdp.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 2}}))
    env = _env(tree, tmp, {"DWDP_TRTLLM_CONFIG": str(cfg), "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"})
    code = "import dwdp_trtllm.integration.boot\n" + TINY + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_gen_config_context_server_is_accepted(tmp_path):
    """gen-config's DeepSeek-R1 context-server settings, over TorchLlmArgs' defaults, pass the matrix; the same
    defaults alone (the key omitted) do not: CUDA graphs on, overlap scheduler on, MoE backend AUTO."""
    out = tmp_path / "out"
    assert main(["gen-config", "--model", "/ckpt/m", "--out", str(out), "--mode", "disaggregated", "--preset",
                 "deepseek-r1", "--dwdp-size", "4", "--gen-tp", "4", "--gpu-memory-gb", "400"]) == 0
    ctx = yaml.safe_load((out / "disagg_worker.yaml").read_text())["context_servers"]
    llm = {k: v for k, v in ctx.items() if k not in ("num_instances", "urls")}
    assert check_serving_args(LA.TorchLlmArgs(**llm)) == []
    assert _keys(LA.TorchLlmArgs()) == ["cuda_graph_config", "disable_overlap_scheduler", "moe_config.backend"]


def test_one_message_names_every_key_value_and_what_to_set():
    with pytest.raises(ServingFeaturesRefused) as e:
        piecewise = LA.TorchCompileConfig(enable_piecewise_cuda_graph=True)
        refuse_unsupported(LA.TorchLlmArgs(torch_compile_config=piecewise))
    msg = str(e.value)
    assert isinstance(e.value, ConfigError) and msg.startswith("dwdp_trtllm: 4 TensorRT-LLM setting(s)")
    assert "nothing was loaded" in msg and len(msg.splitlines()) == 5
    for line in ("cuda_graph_config = CudaGraphConfig(...): a CUDA graph captured at warmup",
                 "default_factory=CudaGraphConfig). Instead: set cuda_graph_config: null",
                 "torch_compile_config = {enable_piecewise_cuda_graph: True, ...}: piecewise CUDA graphs",
                 "Instead: set torch_compile_config: null", "disable_overlap_scheduler = False",
                 "Instead: set disable_overlap_scheduler: true", "moe_config.backend = 'AUTO': AUTO chooses",
                 "Instead: set moe_config.backend: CUTLASS"):
        assert line in msg, (line, msg)
    refuse_unsupported(_ok())  # nothing refused: returns


@pytest.mark.parametrize("spec,mode", [
    ({"decoding_type": "MTP"}, "one-model MTP"),
    ({"decoding_type": "MTP", "use_mtp_vanilla": True, "mtp_eagle_one_model": False}, "one-model MTP"),
    ({"decoding_type": "MTP", "mtp_eagle_one_model": False}, "two-model"),
    ({"decoding_type": "Eagle", "eagle3_one_model": False}, "two-model"),
    ({"decoding_type": "Draft_Target"}, "two-model"),
    ({"decoding_type": "Eagle"}, "other"), ({"decoding_type": "NGram"}, "other"), (None, "none")])
def test_speculative_modes_as_upstream_decides_them(spec, mode):
    """MTPDecodingConfig.spec_dec_mode (llm_args.py @ 0004396720054fd8): MTP_EAGLE (two-model) only for
    use_mtp_vanilla false + mtp_eagle_one_model false; one-model MTP is accepted, everything else refused."""
    assert speculative_mode(spec) == mode
    refused = _keys(_ok(speculative_config=spec))
    assert refused == ([] if mode in ("none", "one-model MTP") else ["speculative_config"])


def test_speculative_refusals_say_why_and_what_instead():
    (two,) = check_serving_args(_ok(speculative_config=LA.EagleDecodingConfig(eagle3_one_model=False)))
    assert two.value == "{decoding_type: 'Eagle', ...}" and "second PyTorchModelEngine (the draft model)" in two.why
    assert two.instead.startswith("use decoding_type: MTP with mtp_eagle_one_model: true")
    (other,) = check_serving_args(_ok(speculative_config=LA.EagleDecodingConfig()))
    assert "not verified with DWDP" in other.why
    assert check_serving_args(_ok(speculative_config=LA.MTPDecodingConfig())) == []


@pytest.mark.parametrize("kw,refused", [
    ({"prefill_cuda_graph_backend": "piecewise"}, ["prefill_cuda_graph_backend"]),
    ({"torch_compile_config": LA.TorchCompileConfig()}, ["torch_compile_config"]),
    ({"moe_config": LA.MoeConfig(backend="CUTLASS", max_num_tokens=4096), "max_num_tokens": 8192},
     ["moe_config.max_num_tokens"]),
    ({"moe_config": LA.MoeConfig(backend="CUTLASS", max_num_tokens=8192), "max_num_tokens": 8192}, []),
    ({"moe_config": LA.MoeConfig(backend="CUTLASS", load_balancer={"num_slots": 288})}, ["moe_config.load_balancer"]),
    ({"moe_config": LA.MoeConfig(backend="DEEPGEMM")}, ["moe_config.backend"]),
    ({"enable_attention_dp": True, "tensor_parallel_size": 2}, ["enable_attention_dp", "tensor_parallel_size"]),
    ({"moe_expert_parallel_size": 4}, ["moe_expert_parallel_size"]),
    ({"dwdp_config": {"dwdp_size": 2}}, ["dwdp_config"]),
    ({"enable_chunked_prefill": True, "kv_cache_config": {"free_gpu_memory_fraction": 0.5}, "max_num_tokens": 16384,
      "max_batch_size": 8, "enable_attention_dp": False, "tensor_parallel_size": 1}, []),
])
def test_matrix_rows(kw, refused):
    assert _keys(_ok(**kw)) == refused


def test_the_loaders_own_values_win():
    """ModelLoader keeps spec_config and max_num_tokens itself (model_loader.py @ 004b733e0ed7, ModelLoader.__init__):
    where given they are what the model is built with, so the check reads them in place of the args'."""
    two_model = LA.EagleDecodingConfig(eagle3_one_model=False)
    assert _keys(_ok()) == []
    assert [r.key for r in check_serving_args(_ok(), {"speculative_config": two_model})] == ["speculative_config"]
    chunked = _ok(moe_config=LA.MoeConfig(backend="CUTLASS", max_num_tokens=8192), max_num_tokens=8192)
    assert _keys(chunked) == []
    (r,) = check_serving_args(chunked, {"max_num_tokens": 16384, "speculative_config": None})
    assert r.key == "moe_config.max_num_tokens" and "at least max_num_tokens (16384)" in r.instead


def test_loaders_without_llm_args_are_checked_on_their_pytorch_config():
    """ModelLoader versions without llm_args hand over PyTorchConfig (pyexecutor/config.py @ 01303b3887e0:
    use_cuda_graph defaults to True, moe_backend / moe_max_num_tokens / moe_load_balancer, torch_compile_enabled)."""
    legacy = {"use_cuda_graph": True, "disable_overlap_scheduler": False, "moe_backend": "TRTLLM",
              "moe_max_num_tokens": None, "moe_load_balancer": None, "torch_compile_enabled": True}
    assert _keys(legacy) == ["use_cuda_graph", "torch_compile_enabled", "disable_overlap_scheduler", "moe_backend"]
    assert _keys({**legacy, "use_cuda_graph": False, "disable_overlap_scheduler": True, "moe_backend": "CUTLASS",
                  "torch_compile_enabled": False}) == []


def test_docs_matrix_lists_every_feature_and_key():
    text = (REPO / "docs/TRTLLM.md").read_text()
    section = text.split("## Serving features", 1)[1].split("\n## ", 1)[0]
    for f in SERVING_FEATURES:
        assert f.feature in section, f.feature
        for k in f.keys:
            assert f"`{k}`" in section, k


def _refused_load(tmp_path, era):
    tree = era_tree(tmp_path / era, era)
    return _run(tmp_path, tree, """
        from tensorrt_llm._torch.models import modeling_tiny
        from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
        from tensorrt_llm.llmapi.llm_args import EagleDecodingConfig, MoeConfig, TorchLlmArgs
        from dwdp_trtllm.errors import ConfigError
        built = []
        init = modeling_tiny.TinyDecoder.__init__
        def spy(self, *a, **k):
            built.append(1)
            init(self, *a, **k)
        modeling_tiny.TinyDecoder.__init__ = spy
        ok = dict(cuda_graph_config=None, disable_overlap_scheduler=True, moe_config=MoeConfig(backend="CUTLASS"))
        two_model = EagleDecodingConfig(eagle3_one_model=False)
        for args in (TorchLlmArgs(quant=None, seed=7),
                     TorchLlmArgs(quant=None, seed=7, speculative_config=two_model, **ok)):
            try:
                ModelLoader(args).load("ckpt", None)
            except ConfigError as e:
                print("REFUSED", str(e).replace(chr(10), " | "))
        print("built", len(built))
    """)


@pytest.mark.parametrize("era", ["hooks", "lifecycle"])
def test_model_loader_refuses_before_the_model_is_built(tmp_path, era):
    """Our ModelLoader.load wrap checks the loader's llm_args first: TorchLlmArgs' defaults (CUDA graphs on) and a
    two-model Eagle3 config are refused in one message each, and no model was built (so no weight was loaded)."""
    r = _refused_load(tmp_path, era)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[-1] == "built 0", r.stdout
    first, second = [ln for ln in lines if ln.startswith("REFUSED")]
    assert "cuda_graph_config = CudaGraphConfig(...)" in first and "Instead: set cuda_graph_config: null" in first
    assert "disable_overlap_scheduler = False" in first and "moe_config.backend = 'AUTO'" in first
    assert "speculative_config = {decoding_type: 'Eagle', ...}: two-model speculative decoding" in second


def test_weight_update_refused_before_any_parameter_changes_with_and_without_the_forks_preflight(tmp_path):
    """WorkerExtension.update_weights (fake rlhf_utils.py): the destructive pre_reload_weights walk, then
    ModelLoader.reload, as NVIDIA's rlhf_utils.py @ 65b31db1 (preflight=False); the Barry-Delaney fork @ c513246cf9aa
    runs a check_reload_capability preflight before the walk (preflight=True). Unguarded, the walk replaces the backends' expert Parameters. With refuse_weight_updates (what
    setup_after_load installs; the fake world shows it installed on a model really set up) the update is refused with
    and without the preflight, and every Parameter is the same object with the same values."""
    tree = era_tree(tmp_path, "hooks")
    r = _run(tmp_path, tree, """
        import torch
        from types import SimpleNamespace
        from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
        from tensorrt_llm._torch.models.modeling_tiny import tiny_checkpoint
        from tensorrt_llm.llmapi.rlhf_utils import update_weights
        from dwdp_trtllm.integration.trtllm.model_setup import refuse_weight_updates
        loader = ModelLoader(SimpleNamespace(quant=None, seed=7))
        def fresh():
            m = tiny()
            m.load_weights(tiny_checkpoint(7, None))
            return m, [o for o in m.modules() if "w3_w1_weight" in o._parameters]
        def same(m, snap):
            now = dict(m.named_parameters())
            return all(now[n] is p and torch.equal(p.detach(), old) for n, p, old in snap)
        m, owners = fresh()
        snap = [(n, p, p.detach().clone()) for n, p in m.named_parameters()]
        update_weights(m, loader, tiny_checkpoint(8, None))
        print("unguarded", same(m, snap))
        for preflight in (True, False):
            m, owners = fresh()
            refuse_weight_updates(m, owners, "merge")
            snap = [(n, p, p.detach().clone()) for n, p in m.named_parameters()]
            try:
                update_weights(m, loader, tiny_checkpoint(8, None), preflight=preflight)
                print("not refused")
            except NotImplementedError as e:
                print("refused", preflight, same(m, snap), hasattr(m, "first_pre_reload_weights"), e)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "unguarded False"  # the walk is destructive: the test can see a torn model
    assert lines[1].startswith("refused True True False dwdp_trtllm: weight update (check_reload_capability) refused")
    assert lines[2].startswith("refused False True False dwdp_trtllm: weight update (pre_reload_weights) refused")
    assert "restart the servers with the new checkpoint" in lines[1]


def test_backend_gate_accepts_exactly_the_verified_class(tmp_path):
    """With our manager registered, ConfigurableMoE asks _should_enable_dwdp while the model is built (before its
    weights load). A subclass of CutlassFusedMoE (upstream PR 18409 lets subclasses declare capabilities) is refused by
    name; CutlassFusedMoE itself enables DWDP."""
    tree = era_tree(tmp_path, "lifecycle")
    r = _run(tmp_path, tree, f"""
        import {MOE}.configurable_moe as cm
        print("exact", tiny().mlp[0].experts.enable_dwdp)
        class CutlassFusedMoEVariant(cm.CutlassFusedMoE):
            pass
        cm.CutlassFusedMoE = CutlassFusedMoEVariant
        try:
            tiny()
            print("subclass accepted")
        except RuntimeError as e:
            print("refused:", e)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "exact True", r.stdout
    assert re.match(r"refused: dwdp_trtllm: MoE backend __main__\.CutlassFusedMoEVariant is not one DWDP was verified "
                    r"with \(exactly CutlassFusedMoE", lines[1]), lines[1]
    assert "set moe_config: {backend: CUTLASS}" in lines[1]


# ---- upstream's recipe (examples/dwdp/reproduce.py @ 4400b395, dwdp_reproduce.yaml @ d897f44d; upstream_recipe.py) --
from upstream_recipe import ROWS, hopper, worker_config  # noqa: E402


@pytest.mark.parametrize("row", sorted(ROWS))
def test_upstreams_recipe_context_server_passes_on_hopper(row):
    """Every DWDP row of upstream's recipe: its context server (attention DP on at TP1, MTP 0 / 1 / 3, fp8 KV at 0.3,
    cache transceiver, max_num_tokens 33000) passes once the backend is CUTLASS and dwdp_config sits in our file.
    Before, `enable_attention_dp: true` was refused even at TP1."""
    ctx, ours = hopper(worker_config(row)["ctx"])
    assert ctx["enable_attention_dp"] is True and ctx["tensor_parallel_size"] == 1
    assert check_serving_args(ctx) == [], [r.line() for r in check_serving_args(ctx)]
    assert set(ours["dwdp_config"]) == {"dwdp_size", "num_groups", "num_experts_per_worker", "num_prefetch_experts"}


def test_upstreams_recipe_as_published_is_refused_once_naming_every_setting():
    """The published context server (CUTEDSL, dwdp_config in the TensorRT-LLM YAML) names both in one message."""
    refused = check_serving_args(worker_config("e2e_80_100_dwdp_minus_1")["ctx"])
    assert [r.key for r in refused] == ["moe_config.backend", "dwdp_config"]
    assert "into the DWDP_TRTLLM_CONFIG file (same keys)" in refused[1].instead


def test_attention_dp_is_refused_beside_tensor_parallelism():
    assert _keys(_ok(enable_attention_dp=True, tensor_parallel_size=1)) == []
    assert _keys(_ok(enable_attention_dp=True)) == []  # tensor_parallel_size unset: TorchLlmArgs' default 1
    keys = _keys(_ok(enable_attention_dp=True, tensor_parallel_size=4, context_parallel_size=2))
    assert keys == ["enable_attention_dp", "tensor_parallel_size", "context_parallel_size"]


@pytest.mark.parametrize("kw,key,says", [
    ({"moe_config": {"backend": "CUTLASS", "max_num_tokens": "big"}, "max_num_tokens": 8192},
     "moe_config.max_num_tokens", "expected an integer of at least 1, got a string"),
    ({"moe_config": {"backend": "CUTLASS", "max_num_tokens": [4096]}}, "moe_config.max_num_tokens", "got a list"),
    ({"moe_expert_parallel_size": "2"}, "moe_expert_parallel_size", "expected an integer, got a string"),
    ({"tensor_parallel_size": [1]}, "tensor_parallel_size", "got a list"),
    ({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": -1}},
     "speculative_config.num_nextn_predict_layers", "expected an integer of at least 1, got -1"),
    ({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 0}},
     "speculative_config.num_nextn_predict_layers", "got 0"),
    ({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": "2"}},
     "speculative_config.num_nextn_predict_layers", "got a string"),
    ({"moe_config": "CUTLASS"}, "moe_config", "expected a section"),
    ({"disable_overlap_scheduler": "true"}, "disable_overlap_scheduler", "expected true or false, got a string"),
    ({"kv_cache_config": {"free_gpu_memory_fraction": 1.5}}, "kv_cache_config.free_gpu_memory_fraction", "[0, 1]"),
])
def test_a_value_of_the_wrong_type_is_one_refusal_naming_its_key(kw, key, says):
    """A YAML read as a mapping: a string or list where a number belongs, an MTP draft length below 1 or quoted, a
    scalar where a section belongs: one refusal naming the key (before: TypeError from a comparison, or silence)."""
    args = {"cuda_graph_config": None, "disable_overlap_scheduler": True, "moe_config": {"backend": "CUTLASS"}, **kw}
    (r,) = check_serving_args(args)
    assert r.key == key and says in r.why, r.line()
    with pytest.raises(ServingFeaturesRefused, match=re.escape(key)):
        refuse_unsupported(args)


def test_mtp_two_model_flag_is_one_model_on_a_checkpoint_of_several_mtp_layers():
    """MTPDecodingConfig.spec_dec_mode (llm_args.py @ 0004396720054fd8): mtp_eagle_one_model false is two-model
    (MTP_EAGLE) only where the checkpoint has one MTP layer; with more it is MTP, inside the target model. Before, any
    mtp_eagle_one_model false was refused."""
    spec = {"decoding_type": "MTP", "mtp_eagle_one_model": False}
    assert speculative_mode(spec) == "two-model"  # layer count unknown: upstream treats it as 1
    assert speculative_mode(spec, mtp_layers=1) == "two-model"
    assert speculative_mode(spec, mtp_layers=3) == "one-model MTP"
    assert speculative_mode({**spec, "num_nextn_predict_layers_from_model_config": 2}) == "one-model MTP"
    assert _keys(_ok(speculative_config=spec)) == ["speculative_config"]
    assert check_serving_args(_ok(speculative_config=spec), {"checkpoint_mtp_layers": 3}) == []
    (r,) = check_serving_args(_ok(speculative_config=spec), {"checkpoint_mtp_layers": 1})
    assert "two-model only on a checkpoint with one MTP layer" in r.why


def test_the_loader_wrap_reads_the_checkpoints_mtp_layers(tmp_path):
    from dwdp_trtllm.integration.trtllm.model_setup import checkpoint_mtp_layers
    (tmp_path / "config.json").write_text('{"num_nextn_predict_layers": 3}')
    assert checkpoint_mtp_layers(tmp_path) == 3
    (tmp_path / "config.json").write_text('{"hidden_size": 7}')
    assert checkpoint_mtp_layers(tmp_path) == 0
    (tmp_path / "config.json").write_text('[1')
    assert checkpoint_mtp_layers(tmp_path) is None
    assert checkpoint_mtp_layers("deepseek-ai/DeepSeek-R1") is None and checkpoint_mtp_layers(None) is None


def test_upstreams_recipe_loads_through_the_fake_loader_and_creator(tmp_path):
    """The Hopper variant of the recipe's context server (MTP 3, attention DP at TP1) goes through our
    create_py_executor wrap and ModelLoader.load (the fake TensorRT-LLM, lifecycle era) and the model is built; the
    published one is refused at create_py_executor in one message naming the backend and dwdp_config, before
    upstream's DwdpManager or any model is built (before, only dwdp_config was named, by the DwdpManager wrap)."""
    import json
    ctx, _ = hopper(worker_config("e2e_80_100_dwdp_minus_1")["ctx"])
    published = worker_config("e2e_80_100_dwdp_minus_1")["ctx"]
    tree = era_tree(tmp_path, "lifecycle")
    r = _run(tmp_path, tree, f"""
        import json
        import dwdp_trtllm.integration.trtllm.model_setup as ms
        ms.setup_after_load = lambda model: None  # the DWDP runtime itself: test_trtllm_fake_world.py
        from tensorrt_llm._torch.models import modeling_tiny
        from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
        from tensorrt_llm._torch.pyexecutor.py_executor_creator import create_py_executor
        from tensorrt_llm._torch.pyexecutor.dwdp import get_global_dwdp_manager
        from tensorrt_llm.llmapi.llm_args import TorchLlmArgs
        from dwdp_trtllm.errors import ConfigError
        built = []
        init = modeling_tiny.TinyDecoder.__init__
        modeling_tiny.TinyDecoder.__init__ = lambda self, *a, **k: (built.append(1), init(self, *a, **k))[1]
        hopper = TorchLlmArgs(quant=None, seed=7, **json.loads({json.dumps(json.dumps(ctx))}))
        print("executor", type(create_py_executor(hopper, None)).__name__)
        ModelLoader(hopper).load("ckpt", None)
        print("built", len(built))
        try:
            create_py_executor(TorchLlmArgs(**json.loads({json.dumps(json.dumps(published))})), None)
        except ConfigError as e:
            print("REFUSED", str(e).replace(chr(10), " | "))
        print("upstream manager", type(get_global_dwdp_manager()).__name__, "built", len(built))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[:2] == ["executor PyExecutor", "built 1"], r.stdout
    (refused,) = [ln for ln in lines if ln.startswith("REFUSED")]
    assert "2 TensorRT-LLM setting(s)" in refused and "moe_config.backend = 'CUTEDSL'" in refused
    assert "dwdp_config = {dwdp_size: 4" in refused, refused
    assert lines[-1] == "upstream manager HopperDwdpManager built 1", r.stdout
