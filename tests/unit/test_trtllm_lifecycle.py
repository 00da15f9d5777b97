"""Upstream's DWDP lifecycle around our HopperDwdpManager, in the fake TensorRT-LLM trees of tests/fakes (each
behaviour cites the upstream file it mirrors), one process per case (the conformance audit's gaps N2-N5):
- upstream's MoE._init_dwdp_expert_layout reads the layout from our registered manager and gets our placement's;
  with our manager registered our wrap of it is required (a renamed override is refused, not skipped);
- HopperDwdpManager.__exit__ unregisters it (create_py_executor's rollback expects that); PyExecutor.shutdown
  closes it;
- dwdp_config in the TensorRT-LLM YAML together with engine dwdp_trtllm fails with our message;
- ModelLoader.reload is refused once DWDP moved or rebound the expert Parameters.
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from test_trtllm_fake_world import _env, era_tree

MOE = "tensorrt_llm._torch.moe.fused_moe"  # the VA-era MoE package root (lifecycle tree)
TINY = """
from types import SimpleNamespace
from tensorrt_llm._torch.models.modeling_tiny import TinyDecoder
def tiny():
    mapping = SimpleNamespace(moe_ep_size=1, moe_ep_rank=0, moe_tp_size=1, tp_size=1, dp_size=1)
    return TinyDecoder(SimpleNamespace(mapping=mapping, quant_config=None))
"""


def _run(tmp: Path, tree: Path, code: str, *, rank: int = 1, dwdp_size: int = 2,
         prelude: str = "", dwdp: dict | None = None) -> subprocess.CompletedProcess:
    cfg = tmp / "dwdp.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": dwdp_size, **(dwdp or {})}}))
    env = _env(tree, tmp, {"DWDP_TRTLLM_CONFIG": str(cfg), "OMPI_COMM_WORLD_RANK": str(rank),
                           "OMPI_COMM_WORLD_SIZE": str(dwdp_size + 1)})
    code = "import dwdp_trtllm.integration.boot\n" + TINY + prelude + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_upstream_layout_read_from_our_manager_is_our_placement(tmp_path):
    """Upstream MoE._init_dwdp_expert_layout (interface.py @ 581f0712) reads num_experts_per_worker,
    dwdp_size and start_expert_id from the registered manager. With our wrap of it removed, upstream's own method
    runs against HopperDwdpManager and must compute the layout our placement gives (rank 1 of 2, 8 experts: 4..7);
    before the manager had these attributes this was an AttributeError at model construction."""
    tree = era_tree(tmp_path, "lifecycle")
    r = _run(tmp_path, tree, f"""
        from {MOE}.interface import MoE
        import {MOE}.configurable_moe  # imports pyexecutor.dwdp: our manager is registered
        from tensorrt_llm._torch.pyexecutor.dwdp import get_global_dwdp_manager
        upstream = MoE._init_dwdp_expert_layout.__wrapped__
        seen = []
        def spy(self):
            upstream(self)
            seen.append((self.expert_size_per_partition, self.slot_start, self.slot_end, self.initial_local_expert_ids))
        MoE._init_dwdp_expert_layout = spy
        m = tiny()
        mgr = get_global_dwdp_manager()
        x = m.mlp[0].experts
        print(mgr.num_experts_per_worker, mgr.start_expert_id, mgr.dwdp_size, len(seen),
              sorted(set(map(repr, seen))), x.slot_start, x.backend.expert_size_per_partition, x.enable_dwdp)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    # 3 layers x (wrapper + backend: both are MoE instances in the fake) read upstream's layout
    assert r.stdout.split("[")[0].split() == ["4", "4", "2", "6"], r.stdout
    assert "['(4, 4, 8, [4, 5, 6, 7])']" in r.stdout and r.stdout.split("]")[-1].split() == ["4", "4", "True"]


def test_layout_wrap_is_required_once_our_manager_is_registered(tmp_path):
    """A TensorRT-LLM with the VA-era lifecycle (pyexecutor.dwdp with DwdpManager.wait_and_bind) whose MoE override
    is renamed: our optional wrap would be skipped silently and upstream's renamed method would decide the layout.
    Refused at import, naming the target."""
    tree = era_tree(tmp_path, "lifecycle")
    iface = tree / "tensorrt_llm/_torch/moe/fused_moe/interface.py"
    iface.write_text(iface.read_text().replace("_init_dwdp_expert_layout", "_init_dwdp_layout_renamed"))
    r = _run(tmp_path, tree, f"import {MOE}.configurable_moe\nprint('imported')")
    assert r.returncode != 0 and "imported" not in r.stdout
    assert "PatchTargetMissing" in r.stderr and "MoE._init_dwdp_expert_layout" in r.stderr, r.stderr[-3000:]
    assert "registered as the global DWDP manager" in r.stderr


STUB = """
class StubRuntime:
    num_layers, closed = 1, 0
    def close(self):
        self.closed += 1
"""


def test_exit_unregisters_so_create_py_executor_rolls_back(tmp_path):
    """TensorRT-LLM's own test (stored id 57433833011, test_create_py_executor_rolls_back_new_dwdp_manager_on_error)
    with our manager in place of its MagicMock: construction fails after registering a new manager -> its
    __exit__(None, None, None) once, and the global is None afterwards (upstream's __exit__: cleanup() +
    set_global_dwdp_manager(None), dwdp.py @ 198af04538bc `DwdpManager.__exit__`). The next model gets a fresh manager."""
    tree = era_tree(tmp_path, "lifecycle")
    r = _run(tmp_path, tree, prelude=STUB, code="""
        from tensorrt_llm._torch.pyexecutor import py_executor_creator
        from tensorrt_llm._torch.pyexecutor.dwdp import get_global_dwdp_manager, set_global_dwdp_manager
        from dwdp_trtllm.integration.process_role import process_manager
        ours = get_global_dwdp_manager()
        assert ours is process_manager() and ours.is_dwdp_trtllm
        rt = StubRuntime()
        ours.attach(rt, [3], "upstream")
        set_global_dwdp_manager(None)
        def fail_after_registration(**_kwargs):
            set_global_dwdp_manager(ours)
            raise RuntimeError("construction failed")
        py_executor_creator._create_py_executor_impl = fail_after_registration
        try:
            py_executor_creator.create_py_executor(llm_args=None, model_engine=None)
        except RuntimeError as e:
            assert str(e) == "construction failed"
        print(get_global_dwdp_manager(), rt.closed, getattr(ours, "closed", "-"), process_manager() is not ours)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["None", "1", "True", "True"]


def test_executor_shutdown_exits_our_manager(tmp_path):
    """Upstream's PyExecutor.shutdown exits only the executor's own manager (py_executor.py stored ids 54965565749,
    67119085479, 57354091563), which is None with our engine: our wrap of it exits ours (runtime closed, unregistered),
    on both lifecycles."""
    for era in ("lifecycle", "hooks"):
        tree = era_tree(tmp_path / era, era)
        r = _run(tmp_path, tree, prelude=STUB, code="""
            import sys
            from tensorrt_llm._torch.pyexecutor.py_executor import PyExecutor
            from dwdp_trtllm.integration.process_role import process_manager
            ours = process_manager()
            rt = StubRuntime()
            ours.attach(rt, [3], "hooks")
            PyExecutor(model_engine=None).shutdown()
            dwdp = sys.modules.get("tensorrt_llm._torch.pyexecutor.dwdp")
            print(rt.closed, ours.closed, dwdp and dwdp.get_global_dwdp_manager())
        """)
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.split() == ["1", "True", "None"], (era, r.stdout)


def test_dwdp_config_with_our_engine_fails_with_our_message(tmp_path):
    """TensorRT-LLM's own dwdp_config together with engine dwdp_trtllm: upstream's creator builds and enters its
    DwdpManager before any model is loaded (PR #14453 review-thread diff), and its __enter__ would raise 'DwdpManager
    already registered globally' (ours is registered; dwdp.py stored id 56230681187). Our create_py_executor wrap
    refuses first, in one message with every other refused setting of the config (here the CUDA graphs left on);
    where the creator is not wrapped, the DwdpManager.__init__ wrap still names the fix. Our manager stays
    registered. Before, the DwdpManager wrap's message came alone and the rest only on the next start."""
    tree = era_tree(tmp_path, "lifecycle")
    r = _run(tmp_path, tree, """
        from types import SimpleNamespace
        from tensorrt_llm._torch.pyexecutor import py_executor_creator
        from tensorrt_llm._torch.pyexecutor.dwdp import DwdpManager, get_global_dwdp_manager
        from dwdp_trtllm.errors import ConfigError
        cfg = SimpleNamespace(dwdp_size=2, num_groups=1, num_experts_per_worker=4, num_prefetch_experts=4)
        try:
            py_executor_creator.create_py_executor(SimpleNamespace(dwdp_config=cfg, cuda_graph_config={}), None)
        except ConfigError as e:
            print("refused:", str(e).replace(chr(10), " | "))
        try:
            DwdpManager(config=cfg, dist=None, mapping=None)
        except RuntimeError as e:
            print("manager refused:", e)
        print("ours registered:", getattr(get_global_dwdp_manager(), "is_dwdp_trtllm", False))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "refused: dwdp_trtllm: 2 TensorRT-LLM setting(s)" in r.stdout, r.stdout
    assert "cuda_graph_config = {}" in r.stdout
    assert "dwdp_config = SimpleNamespace(...): engine dwdp_trtllm but the TensorRT-LLM YAML also sets" in r.stdout
    assert "manager refused: engine dwdp_trtllm but the TensorRT-LLM YAML also sets dwdp_config" in r.stdout
    assert "move dwdp_config from there into the DWDP_TRTLLM_CONFIG file (same keys), or set engine: upstream" in r.stdout
    assert "ours registered: True" in r.stdout


def test_reload_refused_once_dwdp_set_the_model_up(tmp_path):
    """ModelLoader.reload (model_loader.py @ 004b733e) writes through model.load_weights into the
    expert Parameters, which dwdp_trtllm moved into shared buffers or rebound to slot views: refused for such a model
    (the fake world shows it on a model really set up, test_trtllm_fake_world.py); a model without DWDP reloads."""
    tree = era_tree(tmp_path, "hooks")
    r = _run(tmp_path, tree, """
        import torch
        from types import SimpleNamespace
        from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
        from tensorrt_llm._torch.models.modeling_tiny import tiny_checkpoint
        loader = ModelLoader(SimpleNamespace(quant=None, seed=7))
        plain = tiny()
        plain.load_weights(tiny_checkpoint(7, None))
        loader.reload(plain, tiny_checkpoint(8, None))
        print("plain reloaded:", torch.equal(plain.attn[0].weight, tiny_checkpoint(8, None)["layers.0.attn"]))
        plain._dwdp_trtllm_runtime = {"gemm": "merge"}
        try:
            loader.reload(model=plain, weights={})
        except RuntimeError as e:
            print(e)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "plain reloaded: True" in r.stdout
    assert "ModelLoader.reload refused: DWDP (gemm merge) moved" in r.stdout, r.stdout


def test_load_after_shutdown_refuses_upstreams_own_manager(tmp_path):
    """After our manager was exited (PyExecutor.shutdown), the next executor of a YAML that also sets dwdp_config
    builds and enters upstream's own DwdpManager (no refusal: ours is not registered any more; creator diff in PR
    #14453's review thread). The next ModelLoader.load, which would register our fresh manager, refuses with our
    message instead of running both engines."""
    tree = era_tree(tmp_path, "lifecycle")
    r = _run(tmp_path, tree, prelude=STUB, code="""
        from types import SimpleNamespace
        from tensorrt_llm._torch.pyexecutor.py_executor import PyExecutor
        from tensorrt_llm._torch.pyexecutor.py_executor_creator import create_py_executor
        from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
        from tensorrt_llm._torch.pyexecutor.dwdp import get_global_dwdp_manager
        from dwdp_trtllm.integration.process_role import process_manager
        ours = process_manager()
        ours.attach(StubRuntime(), [3], "upstream")
        PyExecutor(model_engine=None).shutdown()
        cfg = SimpleNamespace(dwdp_size=2, num_groups=1, num_experts_per_worker=4, num_prefetch_experts=4)
        try:  # our creator wrap refuses the config before upstream's manager is built
            create_py_executor(SimpleNamespace(dwdp_config=cfg), None)
        except ValueError as e:
            print("creator refused:", type(e).__name__)
        from tensorrt_llm._torch.pyexecutor.dwdp import DwdpManager
        DwdpManager(config=cfg, dist=None, mapping=None).__enter__()  # as an unwrapped creator would
        print("upstream's registered:", type(get_global_dwdp_manager()).__name__)
        for args in (SimpleNamespace(quant=None, seed=7, dwdp_config=cfg), SimpleNamespace(quant=None, seed=7)):
            try:
                ModelLoader(args).load("ckpt", None)
            except (RuntimeError, ValueError) as e:
                print("refused:", type(e).__name__, str(e).replace(chr(10), " | "))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "creator refused: ServingFeaturesRefused" in r.stdout, r.stdout
    assert "upstream's registered: DwdpManager" in r.stdout, r.stdout
    # the loader's llm_args carry dwdp_config: the serving-feature check refuses it first, before anything is built
    both = "engine dwdp_trtllm but the TensorRT-LLM YAML also sets dwdp_config"
    assert "refused: ServingFeaturesRefused dwdp_trtllm: 1 TensorRT-LLM setting(s)" in r.stdout, r.stdout
    assert f"dwdp_config = SimpleNamespace(...): {both}" in r.stdout, r.stdout
    # llm_args without it (upstream's manager registered all the same): registering ours refuses
    assert f"refused: RuntimeError {both}" in r.stdout, r.stdout


def test_layout_checked_once_per_moe_by_its_owner(tmp_path):
    """The rank's layout has one owner, trtllm/moe_layout.py (contiguous_range): run once per MoE instance by the
    MoE.__init__ wrapper, whose result the registered manager reads (plain reads, no second check) and
    override_layout applies. The manager used to re-check the placement itself (use_placement + each attribute
    read) beside moe_layout's check. A placement that wraps around is refused by that owner before upstream's
    MoE.__init__ runs (nothing allocated for it)."""
    tree = era_tree(tmp_path, "lifecycle")
    r = _run(tmp_path, tree, f"""
        import dwdp_trtllm.integration.trtllm.moe_layout as ml
        from {MOE}.interface import MoE
        import {MOE}.configurable_moe  # our manager registered
        from tensorrt_llm._torch.pyexecutor.dwdp import get_global_dwdp_manager
        calls = []
        check = ml.contiguous_range
        ml.contiguous_range = lambda p, r: calls.append(r) or check(p, r)
        m = tiny()
        moes = [x for x in m.modules() if isinstance(x, MoE)]
        mgr = get_global_dwdp_manager()
        print(len(calls), len(moes), mgr.num_experts_per_worker, mgr.start_expert_id, len(calls))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    n_calls, n_moes, size, start, after_reads = map(int, r.stdout.split())
    assert n_calls == n_moes == 6 and after_reads == n_calls, r.stdout  # 3 layers x (wrapper + backend)
    assert (size, start) == (4, 4)
    # rank 2 of DWDP3 with a redundant expert holds 6, 7, 0 (derived placement wraps around)
    r = _run(tmp_path, tree, f"""
        from {MOE}.interface import MoE
        import {MOE}.configurable_moe
        upstream_ran = []
        last_step = MoE._init_dwdp_expert_layout  # upstream's __init__ ends with it (our wrap)
        MoE._init_dwdp_expert_layout = lambda self: upstream_ran.append(1) or last_step(self)
        try:
            tiny()
        except ValueError as e:
            print("refused:", e, "| upstream __init__ finished:", len(upstream_ran))
    """, rank=2, dwdp_size=3, dwdp={"redundant_experts": 1})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "refused: dwdp_rank 2 holds experts" in r.stdout and "not one contiguous range" in r.stdout, r.stdout
    assert r.stdout.strip().endswith("upstream __init__ finished: 0"), r.stdout
