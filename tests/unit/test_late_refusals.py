"""Refusals that came late or with the wrong exit code (issue 22): exit 2, one line, nothing started."""
from __future__ import annotations

import pytest

from dwdp_trtllm import cli


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0.5", "100", "1e308"])
@pytest.mark.parametrize("command", ["validate-plan", "plan"])
def test_interference_outside_the_one_bound_both_commands_share_exits_2(tmp_path, capsys, value, command):
    """validate-plan took 1e308 while plan capped it at 100: one bound (commands/plan.py INTERFERENCE_MAX) for both."""
    argv = [str(tmp_path / "results.json")] if command == "validate-plan" else ["--no-bench-results"]
    assert cli.main([command, *argv, f"--interference={value}"]) == 2
    err = capsys.readouterr().err
    assert f"--interference: expected a number in [1, 100), got {float(value)}" in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("target,make,needle", [
    ("trtllm", "dir", "--bench-results: calibrates --target engine only, got --target trtllm"),
    ("trtllm", None, "--bench-results: calibrates --target engine only, got --target trtllm"),
    ("engine", None, "(no such file or directory)"),
    ("engine", "file", "(a file)"),
])
def test_plan_bench_results_that_cannot_apply_is_refused_not_ignored(tmp_path, capsys, target, make, needle):
    """--bench-results was silently ignored unless --target engine, a missing path too."""
    path = tmp_path / "results"
    if make == "dir":
        path.mkdir()
    elif make == "file":
        path.write_text("{}")
    assert cli.main(["plan", "--isl", "8192", "--target", target, "--bench-results", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and str(path) in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv", [["serve", "MODEL", "--dwdp"], ["serve", "MODEL", "--dwdp", "--config", "x.yaml"]])
def test_serve_dwdp_without_a_path_exits_2(capsys, argv):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--dwdp: needs a path" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_build_ops_cuda_without_a_cuda_toolchain_exits_2(capsys, monkeypatch):
    """On this CPU machine torch is a CPU build; the refusal names --cuda and comes before any compiler runs."""
    import torch

    from dwdp_trtllm.ops import build

    if torch.version.cuda is not None:  # a CUDA torch: make the toolchain check fail the way a CPU machine's does
        def no_nvcc(cuda):
            raise build.OpsBuildError("nvcc not found (CUDA_HOME=None): install the CUDA toolkit to build the CUDA ops")
        monkeypatch.setattr(build, "_check_toolchain", no_nvcc)
    monkeypatch.setattr(build, "load", lambda **kw: pytest.fail("a build started"))
    assert cli.main(["build-ops", "--cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dwdp build-ops: --cuda: ") and len(err.strip().splitlines()) == 1, err
