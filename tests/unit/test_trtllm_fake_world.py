"""A fake disaggregated TensorRT-LLM world on CPU: DWDP context ranks + generation ranks (which never call
into DWDP) in one fake MPI COMM_WORLD, the fake tensorrt_llm tree of tests/fakes (each behaviour cites the
upstream source it mirrors), and our integration activated from DWDP_TRTLLM_CONFIG.

Shows: setup does not hang (D2), and `model.forward(...)` called directly by the engine reproduces the
single-process full-expert reference bit-exact over several forwards (D1: a stale or uninitialised slot
would show), for BF16 and FP8 block scales, on both lifecycles (upstream's manager call sites; MoE hooks).
On CPU the composite view cannot be mapped (CUDA VMM): gemm composite_view runs as a CPU stand-in with the
same slot runs and copy plan (integration/composite_cpu.py); the mapping runs in tests/gpu/test_trtllm_adapter_cuda.py.
gemm multi_buffer runs our execution unit (integration/trtllm/moe_unit.py) in place of CutlassFusedMoE.run_moe, reached
through the fake's upstream call path (ConfigurableMoE -> quantize_input -> run_moe with keywords, or with a
MoERunContext in the VA era), computing with dwdp::grouped_gemm (its CPU build) over [local, slot]. Its reference is
the single-process model whose backends compute through the same unit and op on their full [E, ...] tensors
(moe_unit.install_reference): the stock kernel stand-in (float32, unquantised activations) adds differently rounded
numbers, so bit-exactness is judged against the same arithmetic; test_multi_buffer_unit_matches_stock_kernel checks
the unit against the stand-in kernel with a tolerance (the w3/w1 order included).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"


ERAS = ("lifecycle", "ipc", "hooks")


def era_tree(root: Path, era: str) -> Path:
    """Copy of the fake tree for `era` (see tests/fakes/tensorrt_llm/__init__.py): "lifecycle" (VA era: upstream's
    ConfigurableMoE calls wait_and_bind; MoE package under tensorrt_llm._torch.moe.fused_moe), "ipc" (IPC era: DWDP
    block without wait_and_bind), "hooks" (no DWDP); the last two under tensorrt_llm._torch.modules.fused_moe."""
    assert era in ERAS, era
    dst = root / f"fake_{era}"
    shutil.copytree(FAKES / "tensorrt_llm", dst / "tensorrt_llm")
    shutil.copytree(FAKES / "mpi4py", dst / "mpi4py")
    shutil.copy(FAKES / "trtllm_worker.py", dst)  # run from the tree: sys.path[0] must be this era's tree
    drop = {"lifecycle": ("IPC", "PREVA"), "ipc": ("VA",), "hooks": ("IPC", "VA", "DWDP")}[era]
    if era == "hooks":
        (dst / "tensorrt_llm/_torch/pyexecutor/dwdp.py").unlink()
    if era != "lifecycle":  # MoERunContext / run_moe(ctx) exist from the MoEImplBase (VA) era on
        (dst / "tensorrt_llm/_torch/modules/fused_moe/impl_contract.py").unlink()
    if era == "lifecycle":  # VA era: the MoE package is tensorrt_llm._torch.moe.fused_moe (configurable_moe id 67533515591)
        (dst / "tensorrt_llm/_torch/moe").mkdir()
        (dst / "tensorrt_llm/_torch/moe/__init__.py").write_text('"""Fake TensorRT-LLM package (tests only)."""\n')
        shutil.move(dst / "tensorrt_llm/_torch/modules/fused_moe", dst / "tensorrt_llm/_torch/moe/fused_moe")
    for p in (dst / "tensorrt_llm").rglob("*.py"):
        s = s2 = p.read_text()
        for tag in drop:
            s2 = re.sub(rf"# {tag}-BEGIN\n.*?# {tag}-END\n", "", s2, flags=re.S)
        s2 = re.sub(r"(?m)^# [A-Z]+-(BEGIN|END)\n", "", s2)
        if era == "hooks":
            s2 = re.sub(r"(?m)^# HOOKS-ERA: ", "        ", s2)
        if era == "lifecycle":
            s2 = s2.replace("modules.fused_moe", "moe.fused_moe").replace("modules/fused_moe", "moe/fused_moe")
        if s2 != s:
            p.write_text(s2)
    return dst


def _env(tree: Path, tmp: Path, extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DWDP_TRTLLM", "OMPI_", "PMI_", "TRTLLM_DWDP_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=os.pathsep.join([str(tree), str(REPO)]), FAKE_MPI_DIR=str(tmp / "mpi"),
               FAKE_MPI_TIMEOUT=str(WORLD_WAIT_S // 2), **extra)
    return env


#: bounds of a world's processes and rendezvous: against a hang, never a pace (a loaded 2-core machine takes minutes)
WORLD_WAIT_S = 600


def run_world(tmp: Path, era: str, quant: str, *, ctx=2, gen=1, dwdp: dict | None = None, steps=3,
              env_extra: dict | None = None, ref_gemm: str | None = None, cfg_extra: dict | None = None,
              reference: bool = True, rendezvous_port: int | None = None):
    """Runs the world and the reference; returns (per context rank: saved dict, reference outputs). With gemm
    multi_buffer (or ref_gemm multi_buffer: the ranks are expected to fall back to it) the reference computes
    through the same unit on the full expert set (FAKE_REF_GEMM). cfg_extra: top-level keys of the integration YAML
    besides engine and dwdp_config (shutdown_timeout_s). reference False: no reference process (outputs None).
    rendezvous_port: a rendezvous launch (TRTLLM_DWDP_RANK / MASTER_ADDR / PORT, no MPI world; gen must be 0)."""
    tree = era_tree(tmp, era)
    if "multi_buffer" in ((dwdp or {}).get("gemm"), ref_gemm):
        env_extra = {"FAKE_REF_GEMM": "multi_buffer", **(env_extra or {})}
    cfg = tmp / "dwdp.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", **(cfg_extra or {}), "dwdp_config": {
        "dwdp_size": ctx, "contention_opt": True, "slice_bytes": 8192, **(dwdp or {})}}))
    common = {"FAKE_CTX_RANKS": str(ctx), "FAKE_GEN_RANKS": str(gen), "FAKE_QUANT": quant, "FAKE_STEPS": str(steps),
              **(env_extra or {})}
    procs = []
    for r in range(ctx + gen):
        launch = ({"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(ctx + gen)} if rendezvous_port is None
                  else {"TRTLLM_DWDP_RANK": str(r), "TRTLLM_DWDP_MASTER_ADDR": "127.0.0.1",
                        "TRTLLM_DWDP_MASTER_PORT": str(rendezvous_port), "TRTLLM_DWDP_RENDEZVOUS_TIMEOUT_S": "300"})
        env = _env(tree, tmp, {**common, "DWDP_TRTLLM_CONFIG": str(cfg), **launch})
        procs.append(subprocess.Popen([sys.executable, str(tree / "trtllm_worker.py"), str(tmp), "world"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    if reference:
        ref = subprocess.run([sys.executable, str(tree / "trtllm_worker.py"), str(tmp), "reference"],
                             env=_env(tree, tmp, common), capture_output=True, text=True, timeout=WORLD_WAIT_S)
        assert ref.returncode == 0, ref.stderr[-3000:]
    for r, p in enumerate(procs):
        _, err = p.communicate(timeout=WORLD_WAIT_S)
        assert p.returncode == 0, f"rank {r}: {err[-3000:]}"
    ref_out = torch.load(tmp / "ref.pt") if reference else None
    return [torch.load(tmp / f"out_{r}.pt") for r in range(ctx)], ref_out


def assert_transport_released(got: dict, r: int) -> None:
    """After executor shutdown the rank's transport is closed (adapter.close, after the group's shutdown barrier, which
    every peer reached): no /dev/shm segment of it mapped any more (the peers' read-only maps and its own; they were
    mapped before), no file of it in /dev/shm, no buffer left in the transport, the owners' expert tensors empty."""
    assert got["shm_before_shutdown"]["maps"], f"rank {r}: the check needs the segments mapped before shutdown"
    assert got["shm_after_shutdown"] == {"maps": [], "files": []}, f"rank {r}: {got['shm_after_shutdown']}"
    assert got["transport_buffers_after"] == 0 and set(got["expert_numel_after"]) == {0}, got["expert_numel_after"]
    assert got["barrier_missing"] == {} and got["released_at"] is not None, (got["barrier_missing"], got["log"][-3:])


@pytest.mark.slow  # a multi-process fake world per case: 2-17 s each, ~70 s in all on 2 cores
@pytest.mark.parametrize("era,quant,gemm", [("lifecycle", "fp8_block_scales", "merge"), ("hooks", "bf16", "merge"),
                                            ("lifecycle", "bf16", "composite_view"),
                                            ("hooks", "fp8_block_scales", "composite_view"), ("ipc", "bf16", "merge"),
                                            ("lifecycle", "bf16", "multi_buffer"),
                                            ("lifecycle", "fp8_block_scales", "multi_buffer"),
                                            ("hooks", "bf16", "multi_buffer"),
                                            ("hooks", "fp8_block_scales", "multi_buffer")])
def test_fake_disaggregated_world_matches_reference(tmp_path, era, quant, gemm):
    """composite_view runs as its CPU stand-in (integration/composite_cpu.py: same slot runs and copy plan, the
    [E, ...] tensor concatenated at bind; the VMM mapping itself runs in tests/gpu/test_trtllm_adapter_cuda.py).
    multi_buffer: our unit replaced run_moe on every DWDP layer and ran on every forward (3 per layer), reading
    [local, slot] with dwdp::grouped_gemm; bit-exact against the same unit on the full expert set.
    ipc: upstream's IPC-era ConfigurableMoE has the DWDP gate but never calls wait_and_bind for a CUTLASS
    backend (only CuteDSL gets a weight view, in the scheduler): our manager must not be enabled there."""
    outs, ref = run_world(tmp_path, era, quant, dwdp={"gemm": gemm})
    for r, got in enumerate(outs):
        assert got["lifecycle"] == ("upstream" if era == "lifecycle" else "hooks")
        assert got["gemm"] == gemm, got["gemm_reason"]
        # 3 forwards, and layer 0 once more through forward_precomputed_route after them (bound like forward_impl)
        assert got["unit_calls"] == ([4, 3, 3] if gemm == "multi_buffer" else [])
        if gemm == "multi_buffer":
            assert got["gemm_reason"].startswith("gemm: multi_buffer requested"), got["gemm_reason"]
        # merge's [E, ...] slots (memory.slot_experts) are more than the deployment was priced for: said, with bytes
        merge_warn = [ln for ln in got["log"] if "merge holds every expert" in ln]
        assert len(merge_warn) == (gemm == "merge") and all(ln.startswith("WARNING") for ln in merge_warn), got["log"]
        for key, y in got["outs"].items():
            assert torch.equal(y, ref[key]), f"rank {r} step {key[1]}: max diff {(y - ref[key]).abs().max()}"
        assert got["precomputed_refused"] is None and torch.equal(got["precomputed_out"], ref[("precomputed", r)])
        if era != "lifecycle":
            assert got["trace"][:4] == [("wait", 0), ("release", 0), ("wait", 1), ("release", 1)]
        # PyExecutor.shutdown (upstream exits only its own manager) closed ours and unregistered it (audit N3)
        assert got["closed_at_shutdown"]
        assert_transport_released(got, r)
        assert "ModelLoader.reload refused" in (got["reload_refused"] or "")  # would write moved Parameters
        # upstream's update path is refused at its preflight, before the destructive pre_reload_weights walk
        assert "weight update (check_reload_capability) refused" in (got["update_refused"] or "")
        assert got["weights_changed_by_refused_update"] == []
        assert got["global_after_shutdown"] == (None if era == "hooks" else "None")


@pytest.mark.slow  # a multi-process fake world: ~20-40 s on 2 cores
def test_rendezvous_launch_serves_bit_exact(tmp_path):
    """A rendezvous launch (NVIDIA srt-slurm's DWDP prefill shape): every context rank its own process with
    TRTLLM_DWDP_RANK / TRTLLM_DWDP_MASTER_ADDR / TRTLLM_DWDP_MASTER_PORT and no MPI world; the group forms at the
    rendezvous (integration/group.py), the forwards are bit-exact against the reference, shutdown releases everything
    after the barrier, and two models in a row each get their own group. Today's code needed an MPI world."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    outs, ref = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge"}, gen=0, rendezvous_port=port,
                          env_extra={"FAKE_MODELS": "2"})
    for r, got in enumerate(outs):
        for key, y in got["outs"].items():
            assert torch.equal(y, ref[key]), f"rank {r} step {key[1]}"
        assert_transport_released(got, r)
        assert got["default_world_after_setup"] is False  # the DWDP group is private (integration/group.py)
        (later,) = got["later_models"]
        assert later["new_manager"] and later["barrier_missing"] == {}, later["log"][-3:]


def test_second_model_in_a_process_gets_a_fresh_registered_manager(tmp_path):
    """Upstream gives every executor a new DwdpManager, entered (registered) before the model is built and exited
    (unregistered) by PyExecutor.shutdown (py_executor_creator.py diff in PR #14453's review thread; dwdp.py stored
    id 56230681187; py_executor.py ids 54965565749, 67119085479, 57354091563). Ours is exited at shutdown too, so a
    second model built in the same process (VA era) must find a fresh manager registered when its ConfigurableMoEs
    read the global one: upstream's lifecycle again, outputs equal to the reference. Before, nothing registered the
    fresh manager and the second model quietly ran on the hooks path."""
    outs, ref = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge"}, env_extra={"FAKE_MODELS": "2"})
    for r, got in enumerate(outs):
        assert got["lifecycle"] == "upstream" and got["new_manager"]
        (second,) = got["later_models"]
        assert second["lifecycle"] == "upstream", f"rank {r}: second model on {second['lifecycle']}"
        assert second["new_manager"] and second["closed_at_shutdown"] and second["global_after_shutdown"] == "None"
        assert_transport_released(got, r)  # the first model's transport was gone before the second one attached
        assert_transport_released(second, r)
        for key, y in second["outs"].items():
            assert torch.equal(y, ref[key]), f"rank {r} second model step {key[1]}"


@pytest.mark.parametrize("era", ERAS)
def test_check_trtllm_names_the_lifecycle_and_why(tmp_path, era):
    tree = era_tree(tmp_path, era)
    r = subprocess.run([sys.executable, "-m", "dwdp_trtllm.cli", "check-trtllm", "--json"],
                       env=_env(tree, tmp_path, {}), capture_output=True, text=True, timeout=120)
    import json
    rep = json.loads(r.stdout)
    assert r.returncode == (0 if rep["verdict"]["ready"] else 1), r.stderr  # exit code follows the verdict
    assert rep["tensorrt_llm"] == "0.0.0+fake"
    assert rep["lifecycle"] == ("upstream" if era == "lifecycle" else "hooks")
    if era == "hooks":
        assert "pyexecutor.dwdp.set_global_dwdp_manager (module not importable" in rep["lifecycle_reason"]
        assert "ConfigurableMoE._should_enable_dwdp (missing)" in rep["lifecycle_reason"]
    run_moe = next(t for t in rep["patch_targets"] if t["attribute"] == "CutlassFusedMoE.run_moe")
    assert run_moe["status"] == "present" and run_moe["optional"]  # what gemm multi_buffer replaces per instance
    assert rep["our_mode"]["multi_buffer"].startswith("possible")  # what setup then chooses (multi_buffer world runs)
    assert "ActivationType.Swiglu = 5 here" in rep["our_mode"]["multi_buffer"]  # the fake tree's _torch/utils.py
    assert rep["our_mode"]["gemm"].startswith("multi_buffer (our execution unit replaces CutlassFusedMoE.run_moe")  # FP8 default
    interface = next(t for t in rep["patch_targets"] if t["attribute"] == "MoE.__init__")
    assert interface["status"] == "present"
    assert interface["module"] == ("tensorrt_llm._torch.moe.fused_moe.interface" if era == "lifecycle"
                                   else "tensorrt_llm._torch.modules.fused_moe.interface")
    if era == "ipc":
        assert rep["lifecycle_reason"].endswith("-> MoE forward hooks drive the same manager")
        assert "pyexecutor.dwdp.DwdpManager.wait_and_bind (missing)" in rep["lifecycle_reason"]


def test_fake_engine_bypasses_model_hooks_but_not_moe_hooks(tmp_path):
    """What makes the world test catch D1: the fake engine calls `model.forward(**kwargs)` (model_engine.py stored
    ids 5682132957, 69864124258), so a model-level forward pre-hook (what LayerPipeline.attach used before issue 13
    to issue layers 0..d-1) never fires, while the MoE modules are still called through __call__ (their hooks do).
    Run against the pre-issue-13 integration (b9fe433, CPU device patched in), the hooks-era world gave NaN on the
    first forward and max diffs of 229-368 on the next two."""
    tree = era_tree(tmp_path, "hooks")
    code = """
import torch
from types import SimpleNamespace
from tensorrt_llm._torch.pyexecutor.model_engine import PyTorchModelEngine
from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
from tensorrt_llm._torch.pyexecutor.py_executor_creator import create_py_executor
from tensorrt_llm._torch.models.modeling_tiny import H
args = SimpleNamespace(quant=None, seed=7, dwdp_config=None, disable_overlap_scheduler=True)
model, _ = ModelLoader(args).load("ckpt", None)
fired = []
model.register_forward_pre_hook(lambda m, a: fired.append("model"))
for i, blk in enumerate(model.mlp):
    blk.experts.register_forward_pre_hook(lambda m, a, i=i: fired.append(i))
create_py_executor(args, PyTorchModelEngine(model)).forward_step(torch.randn(4, H))
print(fired)
"""
    r = subprocess.run([sys.executable, "-c", code], env=_env(tree, tmp_path, {}), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "[0, 1, 2]"
