"""Activation: the .pth/boot hook is inert without the variables; with them and a fake tensorrt_llm
module tree the finder applies the patches; patch-target checks name version and attribute."""
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import yaml

from dwdp_trtllm.integration import hook
from dwdp_trtllm.integration.trtllm import targets
from dwdp_trtllm.integration.trtllm.targets import PatchTargetMissing

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, env_extra: dict, path_extra: list[str] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DWDP_TRTLLM_CONFIG", "DWDP_TRTLLM")}
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *path_extra])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300)


FAKE_INTERFACE = '''
class MoE:
    def __init__(self, num_experts, rank_attrs=True):
        self.num_experts = num_experts
        self.layer_load_balancer = None
        self.mapping = type("M", (), {"moe_ep_size": 1, "moe_tp_size": 1})()
        self.expert_size_per_partition = num_experts
        self.num_slots = num_experts
        self.slot_start, self.slot_end = 0, num_experts
        self.initial_local_expert_ids = list(range(num_experts))
    def _init_load_balancer(self):
        pass
'''


def _fake_tree(root: Path, interface: str = FAKE_INTERFACE) -> None:
    pkgs = ["tensorrt_llm", "tensorrt_llm/_torch", "tensorrt_llm/_torch/modules", "tensorrt_llm/_torch/modules/fused_moe",
            "tensorrt_llm/_torch/pyexecutor"]
    for p in pkgs:
        (root / p).mkdir(parents=True, exist_ok=True)
        (root / p / "__init__.py").write_text("__version__ = '9.9.9fake'\n" if p == "tensorrt_llm" else "")
    (root / "tensorrt_llm/_torch/modules/fused_moe/interface.py").write_text(interface)
    (root / "tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py").write_text(
        "from .interface import MoE\nclass CutlassFusedMoE(MoE):\n    pass\n")
    (root / "tensorrt_llm/_torch/pyexecutor/model_loader.py").write_text(
        "class ModelLoader:\n    def load(self, checkpoint_dir, checkpoint_loader):\n        return ('model', None)\n")


def test_boot_is_inert_without_env_var():
    r = _run("""
        import sys
        before = list(sys.meta_path)
        import dwdp_trtllm.integration.boot as b
        from dwdp_trtllm.integration.hook import installed_finders
        assert b.state()["finder"] is None, b.state()
        assert installed_finders() == [] and sys.meta_path == before
        assert not [m for m in sys.modules if m.startswith("tensorrt_llm")]
        assert "dwdp_trtllm.integration.trtllm.patches" not in sys.modules
        print("inert")
    """, {})
    assert r.returncode == 0 and "inert" in r.stdout, r.stderr


def test_pth_line_installed_in_temp_site_dir(tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    p = hook.install_pth(site_dir)
    assert p.name == hook.PTH_NAME and p.read_text() == hook.PTH_LINE
    shipped = (REPO / "dwdp_trtllm/integration/dwdp_trtllm_boot.pth").read_text()
    assert shipped == hook.PTH_LINE  # the shipped file is the generated line
    with pytest.raises(FileNotFoundError):
        hook.install_pth(tmp_path / "missing")
    code = f"""
        import site, sys
        site.addsitedir({str(site_dir)!r})
        print("boot" if "dwdp_trtllm.integration.boot" in sys.modules else "no-boot")
    """
    assert _run(code, {}).stdout.strip() == "no-boot"  # without the variables: only `import os` ran
    r = _run(code, {"DWDP_TRTLLM": "1"})
    assert r.stdout.strip() == "boot", r.stderr
    assert hook.remove_pth(site_dir) and not p.exists()


def test_env_var_and_fake_trtllm_tree_get_patched(tmp_path):
    _fake_tree(tmp_path / "fake")
    cfg = tmp_path / "dwdp.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 4}}))
    r = _run("""
        import sys
        import dwdp_trtllm.integration.boot as b
        assert b.state()["finder"] is not None
        assert not [m for m in sys.modules if m.startswith("tensorrt_llm")]  # nothing imported eagerly
        from tensorrt_llm._torch.modules.fused_moe.interface import MoE
        from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
        assert getattr(MoE.__init__, "_dwdp_trtllm_patched", False)
        assert getattr(ModelLoader.load, "_dwdp_trtllm_patched", False)
        m = MoE(16)
        print(m.expert_size_per_partition, m.slot_start, m.slot_end, m.initial_local_expert_ids[0], m.num_slots)
    """, {"DWDP_TRTLLM_CONFIG": str(cfg), "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "5"}, [str(tmp_path / "fake")])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["4", "8", "12", "8", "16"]  # dwdp_rank 2 of 4 holds experts 8..11


def test_generation_server_ranks_and_upstream_engine_are_not_patched(tmp_path):
    _fake_tree(tmp_path / "fake")
    cfg = tmp_path / "dwdp.yaml"
    code = """
        from tensorrt_llm._torch.modules.fused_moe.interface import MoE
        print(getattr(MoE.__init__, "_dwdp_trtllm_patched", False), MoE(16).expert_size_per_partition)
    """
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 4}}))
    r = _run(code, {"DWDP_TRTLLM_CONFIG": str(cfg), "OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "5"}, [str(tmp_path / "fake")])
    assert r.stdout.split() == ["False", "16"], r.stderr  # rank 4 = generation server
    cfg.write_text(yaml.safe_dump({"engine": "upstream", "dwdp_config": {"dwdp_size": 4}}))
    r = _run(code, {"DWDP_TRTLLM_CONFIG": str(cfg)}, [str(tmp_path / "fake")])
    assert r.stdout.split() == ["False", "16"], r.stderr


def test_mpi_rank_wins_over_rank_under_mpirun(tmp_path):
    """Under mpirun the DWDP rank is the global MPI rank (audit N6): a RANK/WORLD_SIZE exported by some launcher
    layer (here instance-local 0 of 1) must not turn generation rank 4 into DWDP context rank 0, nor move a
    context rank's experts."""
    _fake_tree(tmp_path / "fake")
    cfg = tmp_path / "dwdp.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 4}}))
    code = """
        import dwdp_trtllm.integration.boot
        from dwdp_trtllm.integration.process_role import global_rank
        from tensorrt_llm._torch.modules.fused_moe.interface import MoE
        print(global_rank(), getattr(MoE.__init__, "_dwdp_trtllm_patched", False), MoE(16).slot_start)
    """
    torch_vars = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    for mpi_rank, want in (("4", ["4", "False", "0"]), ("2", ["2", "True", "8"])):
        r = _run(code, {"DWDP_TRTLLM_CONFIG": str(cfg), **torch_vars, "OMPI_COMM_WORLD_RANK": mpi_rank,
                        "OMPI_COMM_WORLD_SIZE": "5"}, [str(tmp_path / "fake")])
        assert r.stdout.split() == want, r.stderr
    r = _run(code, {"DWDP_TRTLLM_CONFIG": str(cfg), "RANK": "3", "WORLD_SIZE": "4"}, [str(tmp_path / "fake")])
    assert r.stdout.split() == ["3", "True", "12"], r.stderr  # torchrun alone: RANK is the rank


def test_missing_patch_target_fails_loudly_in_the_worker(tmp_path):
    _fake_tree(tmp_path / "fake", interface="class MoE:\n    def __init__(self):\n        pass\n")
    cfg = tmp_path / "dwdp.yaml"
    cfg.write_text(yaml.safe_dump({"dwdp_config": {"dwdp_size": 2}}))
    r = _run("import dwdp_trtllm.integration.boot; import tensorrt_llm._torch.modules.fused_moe.interface",
             {"DWDP_TRTLLM_CONFIG": str(cfg)}, [str(tmp_path / "fake")])
    assert r.returncode != 0
    assert "PatchTargetMissing" in r.stderr and "9.9.9fake" in r.stderr and "MoE._init_load_balancer" in r.stderr


def test_missing_target_does_not_stop_processes_our_engine_does_not_patch(tmp_path):
    """The engine is decided before targets are verified (conformance audit N1): on a TensorRT-LLM lacking a target
    only our engine needs, a generation rank, an `engine: upstream` process and a DWDP_TRTLLM=1-only process (upstream's
    dwdp_config drives) import it, patch nothing and log the missing target; the dwdp_trtllm rank still refuses."""
    _fake_tree(tmp_path / "fake", interface="class MoE:\n    def __init__(self):\n        pass\n")
    cfg = tmp_path / "dwdp.yaml"
    code = """
        import dwdp_trtllm.integration.boot
        from tensorrt_llm._torch.modules.fused_moe.interface import MoE
        print(getattr(MoE.__init__, "_dwdp_trtllm_patched", False))
    """
    gen_rank = {"DWDP_TRTLLM_CONFIG": str(cfg), "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"}
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 2}}))
    for env_extra in (gen_rank, {"DWDP_TRTLLM": "1"}):
        r = _run(code, env_extra, [str(tmp_path / "fake")])
        assert r.returncode == 0 and r.stdout.split() == ["False"], r.stderr
        assert "MoE._init_load_balancer" in r.stderr and "patches nothing" in r.stderr, r.stderr
    r = _run(code, {**gen_rank, "OMPI_COMM_WORLD_RANK": "0"}, [str(tmp_path / "fake")])
    assert r.returncode != 0 and "PatchTargetMissing" in r.stderr  # the dwdp_trtllm rank of the same world
    cfg.write_text(yaml.safe_dump({"engine": "upstream", "dwdp_config": {"dwdp_size": 2}}))
    r = _run(code, {"DWDP_TRTLLM_CONFIG": str(cfg)}, [str(tmp_path / "fake")])
    assert r.returncode == 0 and r.stdout.split() == ["False"], r.stderr
    assert "engine 'upstream'" in r.stderr


def test_verify_names_version_module_and_attribute(monkeypatch):
    fake_root = types.ModuleType("tensorrt_llm")
    fake_root.__version__ = "1.3.0rc99"
    mod = types.ModuleType(targets.MODEL_LOADER)
    mod.ModelLoader = type("ModelLoader", (), {})  # no .load
    monkeypatch.setitem(sys.modules, "tensorrt_llm", fake_root)
    with pytest.raises(PatchTargetMissing) as ei:
        targets.verify(mod)
    e = ei.value
    assert (e.version, e.module, e.attribute) == ("1.3.0rc99", targets.MODEL_LOADER, "ModelLoader.load")
    assert "TensorRT-LLM 1.3.0rc99" in str(e) and "'ModelLoader.load'" in str(e)
    mod.ModelLoader.load = lambda self: None
    assert [t.attribute for t in targets.verify(mod)] == ["ModelLoader.load"]


def test_finder_fires_for_already_imported_and_later_imports(tmp_path, monkeypatch):
    (tmp_path / "dwdp_fake_target_mod.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    pre = types.ModuleType("dwdp_fake_loaded")
    monkeypatch.setitem(sys.modules, "dwdp_fake_loaded", pre)
    cb = lambda m: seen.append((m.__name__, getattr(m, "VALUE", None)))  # noqa: E731
    f = hook.install(["dwdp_fake_loaded", "dwdp_fake_target_mod"], cb)
    try:
        assert seen == [("dwdp_fake_loaded", None)]
        import dwdp_fake_target_mod  # noqa: F401
        assert seen[-1] == ("dwdp_fake_target_mod", 3)  # body ran before the callback
        assert hook.install(["x"], cb) is f  # idempotent per callback
    finally:
        hook.uninstall(f)
        sys.modules.pop("dwdp_fake_target_mod", None)
    assert f not in sys.meta_path


def test_custom_module_dir_is_an_importable_package_that_activates(tmp_path):
    d = hook.CUSTOM_MODULE_DIR
    assert (d / "__init__.py").is_file() and d.name.isidentifier()
    r = _run(f"""
        import importlib, sys
        sys.path.insert(0, {str(d.parent)!r})  # what import_custom_module_from_dir does
        importlib.import_module({d.name!r})
        from dwdp_trtllm.integration import boot
        print(boot.state()["reason"], boot.state()["finder"] is not None)
    """, {})
    assert r.stdout.split() == ["custom_module_dirs", "True"], r.stderr
