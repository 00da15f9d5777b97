"""`dwdp check-trtllm` ends with one verdict line: ready, or not ready and why, the version range, the install hint."""
from __future__ import annotations

import json

import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.commands.check_trtllm import INSTALL_HINT, trtllm_requirement, verdict


def _rep(**kw):
    rep = {"tensorrt_llm": "1.2.0", "gpu": {"available": True, "name": "NVIDIA H200", "sm": 90},
           "lifecycle": "hooks", "our_mode": {"engine": "dwdp_trtllm", "reason": "auto"},
           "patch_targets": [{"module": "m", "attribute": "MoE.__init__", "status": "present", "optional": False},
                             {"module": "m", "attribute": "X.y", "status": "missing", "optional": True}]}
    rep.update(kw)
    return rep


def test_verdict_lines():
    assert trtllm_requirement().startswith("tensorrt_llm>=")  # the package's [trtllm] extra
    ok, line = verdict(_rep())
    assert ok and line == "READY: TensorRT-LLM 1.2.0, engine dwdp_trtllm, lifecycle hooks"
    ok, line = verdict(_rep(tensorrt_llm="not installed"))
    assert not ok and line == f"NOT READY: TensorRT-LLM is not installed; needs {trtllm_requirement()} ({INSTALL_HINT})"
    targets = [{"module": "m", "attribute": "MoE.__init__", "status": "missing", "optional": False}]
    ok, line = verdict(_rep(patch_targets=targets))
    assert not ok and "lacks what the dwdp_trtllm engine patches: m:MoE.__init__" in line and trtllm_requirement() in line
    ok, line = verdict(_rep(patch_targets=targets, our_mode={"engine": "upstream", "reason": "nvfp4"}))
    assert ok and line == "READY: TensorRT-LLM 1.2.0, engine upstream"  # upstream's engine patches nothing
    ok, line = verdict(_rep(gpu={"available": False, "reason": "torch.cuda.is_available() is False"}))
    assert not ok and line.startswith("NOT READY here: no CUDA GPU")
    ok, line = verdict(_rep(our_mode={"engine": "error", "reason": "engine: upstream needs ..."}))
    assert not ok and line == "NOT READY: no engine can run here: engine: upstream needs ..."


def test_the_last_line_is_the_verdict(capsys):
    assert cli.main(["check-trtllm"]) == 1  # this machine has no tensorrt_llm: NOT READY exits 1
    lines = capsys.readouterr().out.strip().splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.startswith("verdict:"))
    assert all(ln.startswith(" " * 16) for ln in lines[start + 1:])  # the verdict's own wrapped lines, nothing after
    last = " ".join(" ".join(lines[start:]).split())
    assert last.startswith("verdict: NOT READY: TensorRT-LLM is not installed; needs tensorrt_llm>=")
    assert " ".join(INSTALL_HINT.split()) in last
    assert cli.main(["check-trtllm", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"]["ready"] is False


def test_exit_code_follows_the_verdict(monkeypatch, capsys):
    """0 on READY, 1 on NOT READY (text and --json), so `dwdp check-trtllm && dwdp serve ...` gates on it."""
    from dwdp_trtllm.commands import check_trtllm

    real = check_trtllm.collect
    for ready, code in ((True, 0), (False, 1)):
        line = "READY: x" if ready else "NOT READY: y"
        monkeypatch.setattr(check_trtllm, "collect", lambda *a, _v={"ready": ready, "line": line}: {**real(*a), "verdict": _v})
        assert cli.main(["check-trtllm"]) == code
        assert capsys.readouterr().out.strip().splitlines()[-1].endswith("READY: x" if ready else "NOT READY: y")
        assert cli.main(["check-trtllm", "--json"]) == code
        assert json.loads(capsys.readouterr().out)["verdict"]["ready"] is ready
    with pytest.raises(SystemExit):
        cli.main(["check-trtllm", "--help"])
    assert "0 when the verdict is READY, 1 when it is NOT READY" in " ".join(capsys.readouterr().out.split())


def test_gpu_sm_is_the_adapters_device_sm(monkeypatch):
    """check-trtllm reports the GPU's sm through gemm_choice.device_sm, the function the adapter asks default_gemm
    with (it computed major * 10 + minor itself)."""
    import torch
    from dwdp_trtllm.commands import check_trtllm
    from dwdp_trtllm.integration import gemm_choice
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H200")
    asked = []
    monkeypatch.setattr(gemm_choice, "device_sm", lambda dev, capability=None: asked.append(dev) or 90)
    assert check_trtllm._gpu() == {"available": True, "name": "NVIDIA H200", "sm": 90}
    assert asked == [torch.device("cuda", 0)]

