"""Needs a real tensorrt_llm (NGC TensorRT-LLM container): patch targets exist in the installed version,
and importing its MoE interface with our hook active applies the patches. Skipped here with the reason."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.trtllm,
              pytest.mark.skipif(importlib.util.find_spec("tensorrt_llm") is None,
                                 reason="tensorrt_llm is not importable (not installable on the CPU/CI machines)")]
REPO = Path(__file__).resolve().parents[2]


def test_every_patch_target_exists_in_installed_trtllm():
    from dwdp_trtllm.integration.trtllm import targets
    rows = targets.report()
    assert [(t.attribute, s) for t, s, _ in rows if s != "present" and not t.optional] == []


def test_hook_patches_real_moe_interface(tmp_path):
    cfg = tmp_path / "d.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 4}}))
    env = {**os.environ, "DWDP_TRTLLM_CONFIG": str(cfg), "PYTHONPATH": str(REPO)}
    code = ("import dwdp_trtllm.integration.boot\n"
            "import importlib\n"
            "from dwdp_trtllm.integration.trtllm.targets import MOE_INTERFACE, _import_first, PATCH_TARGETS\n"
            "t = next(t for t in PATCH_TARGETS if t.module == MOE_INTERFACE)\n"
            "MoE = _import_first(t.modules, importlib.import_module)[1].MoE  # whichever package root exists\n"
            "from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader\n"
            "assert MoE.__init__._dwdp_trtllm_patched and ModelLoader.load._dwdp_trtllm_patched\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
