"""`dwdp build-ops --deepgemm` (ops/deepgemm_build.py) on CPU: what it refuses before building anything, the pin check
of a git checkout, and where ops/deepgemm.module() looks for the build. The build itself needs CUDA (the device runs it:
scripts/gpu_check.sh routedop)."""
import subprocess
import sys

import pytest

from dwdp_trtllm.ops import deepgemm as dgl
from dwdp_trtllm.ops import deepgemm_build as dgb


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "dwdp_trtllm.cli", "build-ops", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def _tree(root):
    for n in dgb.NEEDED:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        (root / n).write_text("")
    return root


def test_deepgemm_with_cpu_is_refused_before_any_build(tmp_path):
    r = _cli("--cpu", "--deepgemm")
    assert r.returncode == 2 and "CUDA-only" in r.stderr and "dwdp ops" not in r.stdout


def test_a_source_tree_missing_files_is_named(tmp_path):
    r = _cli("--cuda", "--deepgemm-src", str(tmp_path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"--deepgemm-src {tmp_path}: csrc/python_api.cpp missing" in r.stderr and dgb.PIN_DEEPGEMM in r.stderr


def test_a_checkout_at_another_commit_is_refused(tmp_path):
    src = _tree(tmp_path / "dg")
    git = lambda *a: subprocess.run(["git", "-C", str(src), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x")
    with pytest.raises(dgb.DeepGEMMBuildError, match=f"not the pinned {dgb.PIN_DEEPGEMM}"):
        dgb.check_source(src)


def test_a_complete_tree_without_git_passes_the_check(tmp_path):
    dgb.check_source(_tree(tmp_path / "dg"))


def test_module_looks_in_the_build_cache_when_no_dir_is_set(tmp_path, monkeypatch):
    """A build in cache_dir()/deepgemm/<pin> is put on sys.path (no DWDP_DEEPGEMM_DIR needed)."""
    monkeypatch.setenv("DWDP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DWDP_DEEPGEMM_DIR", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "deep_gemm", None)
    assert not dgb.built() and dgb.build_dir() == tmp_path / "deepgemm" / dgb.PIN_DEEPGEMM
    (dgb.build_dir() / "deep_gemm").mkdir(parents=True)
    (dgb.build_dir() / "deep_gemm" / "_C.cpython-311-x86_64-linux-gnu.so").write_text("")
    assert dgb.built()
    with pytest.raises(dgl.DeepGEMMUnavailable, match="dwdp build-ops --deepgemm"):
        dgl.module()
    assert str(dgb.build_dir()) in sys.path
