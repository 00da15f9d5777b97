"""tests/gpu's gates, checked on the CPU: a GPU test whose optional dependency is absent skips with the reason (it does
not error), and one whose dependency was named but does not load fails."""
import importlib.util
from pathlib import Path

import pytest

from dwdp_trtllm import env
from dwdp_trtllm.ops import deepgemm as dgl

GPU_TESTS = Path(__file__).resolve().parents[1] / "gpu"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU_TESTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _no_deepgemm(monkeypatch):
    def missing():
        raise dgl.DeepGEMMUnavailable("DeepGEMM is not available (ModuleNotFoundError: No module named 'deep_gemm'); "
                                      "build it with scripts/gpu/deepgemm_build.sh")
    monkeypatch.setattr(dgl, "module", missing)


def test_deepgemm_tests_skip_with_the_reason_when_deepgemm_is_absent(monkeypatch):
    mod = _load("test_deepgemm_cuda")
    _no_deepgemm(monkeypatch)
    monkeypatch.delenv(env.DWDP_DEEPGEMM_DIR, raising=False)
    with pytest.raises(pytest.skip.Exception) as info:
        mod.deepgemm_gate()
    assert "No module named 'deep_gemm'" in str(info.value) and "deepgemm_build.sh" in str(info.value)


def test_deepgemm_tests_fail_when_a_named_build_does_not_load(monkeypatch, tmp_path):
    mod = _load("test_deepgemm_cuda")
    _no_deepgemm(monkeypatch)
    monkeypatch.setenv(env.DWDP_DEEPGEMM_DIR, str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as info:
        mod.deepgemm_gate()
    assert f"DWDP_DEEPGEMM_DIR={tmp_path} is set" in str(info.value)


def test_deepgemm_tests_run_when_deepgemm_loads(monkeypatch):
    mod = _load("test_deepgemm_cuda")
    monkeypatch.setattr(dgl, "module", lambda: object())
    mod.deepgemm_gate()  # neither skip nor fail
