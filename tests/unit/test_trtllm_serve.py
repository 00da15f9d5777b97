"""`dwdp serve` execs trtllm-serve with DWDP_TRTLLM_CONFIG set; `dwdp check-trtllm` reports without tensorrt_llm."""
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _env(path_dir: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DWDP_TRTLLM_CONFIG", "DWDP_TRTLLM")}
    env["PYTHONPATH"] = str(REPO)
    env["PATH"] = (f"{path_dir}{os.pathsep}" if path_dir else "") + "/usr/bin:/bin"
    return env


def _dwdp(args, env):
    return subprocess.run([sys.executable, "-m", "dwdp_trtllm.cli", *args], env=env, capture_output=True, text=True, timeout=300)


def _fake_serve(tmp_path: Path) -> Path:
    b = tmp_path / "bin"
    b.mkdir()
    s = b / "trtllm-serve"
    s.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                 "print(json.dumps({'argv': sys.argv[1:], 'cfg': os.environ.get('DWDP_TRTLLM_CONFIG')}))\n")
    s.chmod(0o755)
    return b


def test_serve_execs_trtllm_serve_with_config_and_hook(tmp_path, monkeypatch):
    b = _fake_serve(tmp_path)
    cfg = tmp_path / "d.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 4}}))
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    monkeypatch.chdir(tmp_path)
    r = _dwdp(["serve", "--hook-site-dir", str(site_dir), "/ckpt/m", "--dwdp", "d.yaml", "--config", "x.yaml", "--tp_size", "1"], _env(b))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["argv"] == ["/ckpt/m", "--config", "x.yaml", "--tp_size", "1"]  # --dwdp removed, the rest unchanged
    assert out["cfg"] == str(cfg.resolve())  # absolute path
    from dwdp_trtllm.integration.hook import PTH_LINE, PTH_NAME
    assert (site_dir / PTH_NAME).read_text() == PTH_LINE


def test_serve_errors_exit_2(tmp_path):
    cfg = tmp_path / "d.yaml"
    cfg.write_text(yaml.safe_dump({"dwdp_config": {"dwdp_size": 2}}))
    r = _dwdp(["serve", "--dwdp", str(cfg), "--hook-site-dir", str(tmp_path), "/ckpt/m"], _env(None))
    assert r.returncode == 2 and "trtllm-serve not found" in r.stderr
    cfg.write_text(yaml.safe_dump({"dwdp_config": {"dwdp_size": 2, "bogus": 1}}))
    r = _dwdp(["serve", "--dwdp", str(cfg), "/ckpt/m"], _env(_fake_serve(tmp_path)))
    assert r.returncode == 2 and "dwdp_config.bogus" in r.stderr
    r = _dwdp(["serve", "/ckpt/m"], _env(None))
    assert r.returncode == 2 and "--dwdp" in r.stderr


def test_check_trtllm_without_tensorrt_llm(tmp_path):
    r = _dwdp(["check-trtllm", "--json"], _env(None))
    assert r.returncode == 1, r.stderr  # NOT READY (no tensorrt_llm): exit 1
    rep = json.loads(r.stdout)
    assert rep["verdict"]["ready"] is False
    assert rep["tensorrt_llm"] == "not installed" and rep["upstream_dwdp"] is None
    # written out, not derived from PATCH_TARGETS: a target dropped, added or re-flagged there must show here
    fm = "tensorrt_llm._torch.modules.fused_moe"
    assert [(t["module"], t["attribute"], t["optional"], t["lifecycle"]) for t in rep["patch_targets"]] == [
        (f"{fm}.interface", "MoE.__init__", False, False),
        (f"{fm}.interface", "MoE._init_load_balancer", False, False),
        (f"{fm}.interface", "MoE._init_dwdp_expert_layout", True, False),
        ("tensorrt_llm._torch.pyexecutor.model_loader", "ModelLoader.load", False, False),
        ("tensorrt_llm._torch.pyexecutor.model_loader", "ModelLoader.reload", True, False),
        (f"{fm}.fused_moe_cutlass", "CutlassFusedMoE", False, False),
        (f"{fm}.fused_moe_cutlass", "CutlassFusedMoE.run_moe", True, False),
        (f"{fm}.configurable_moe", "ConfigurableMoE._should_enable_dwdp", True, True),
        ("tensorrt_llm._torch.pyexecutor.dwdp", "set_global_dwdp_manager", True, True),
        ("tensorrt_llm._torch.pyexecutor.dwdp", "DwdpManager.__init__", True, False),
        ("tensorrt_llm._torch.pyexecutor.py_executor_creator", "create_py_executor", True, False),
        ("tensorrt_llm._torch.pyexecutor.py_executor", "PyExecutor.shutdown", True, False),
        ("tensorrt_llm._torch.pyexecutor.dwdp", "DwdpManager.wait_and_bind", True, True),
    ]
    assert all(t["status"] == "not checked (no tensorrt_llm)" for t in rep["patch_targets"])
    assert rep["lifecycle"] is None and "not importable" in rep["lifecycle_reason"]
    assert rep["our_mode"]["engine"] == "dwdp_trtllm" and rep["upstream_can_run_here"] is False
    r = _dwdp(["check-trtllm"], _env(None))
    assert r.returncode == 1 and "TensorRT-LLM:   not installed" in r.stdout and "MoE.__init__" in r.stdout


def test_check_trtllm_reports_upstream_requested_without_tensorrt_llm(tmp_path):
    cfg = tmp_path / "dwdp.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "upstream", "dwdp_config": {"dwdp_size": 2}}))
    r = _dwdp(["check-trtllm", "--json", "--dwdp", str(cfg)], _env(None))
    assert r.returncode == 1, r.stderr  # a report, NOT READY: exit 1
    mode = json.loads(r.stdout)["our_mode"]
    assert mode["engine"] == "error" and "no DwdpConfig" in mode["reason"]
