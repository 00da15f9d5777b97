"""Refusals that came late or with the wrong exit code (issue 22): exit 2, one line, nothing started."""
from __future__ import annotations

import pytest

from dwdp_trtllm import cli


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0.5"])
def test_validate_plan_interference_not_a_finite_number_at_least_1(tmp_path, capsys, value):
    assert cli.main(["validate-plan", str(tmp_path / "results.json"), f"--interference={value}"]) == 2
    err = capsys.readouterr().err
    assert "--interference: expected a finite number >= 1" in err and len(err.strip().splitlines()) == 1, err


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
