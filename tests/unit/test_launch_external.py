"""`dwdp bench` under external launchers: torchrun (every CI machine has it) and mpirun (where Open MPI and
mpi4py are installed, e.g. the GPU machine). Each process is one rank; rank 0 writes the results."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # torchrun / mpirun launches: ~11 s and more on 2 cores

ROOT = Path(__file__).resolve().parents[2]
CFG = ROOT / "configs/bench/ci_smoke.yaml"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check(out: Path, proc: subprocess.CompletedProcess, assert_run_consistent) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert_run_consistent(run)


@pytest.mark.timeout(900)
def test_bench_under_torchrun(tmp_path, assert_run_consistent):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(_port()), "-m", "dwdp_trtllm.cli", "bench", str(CFG), "--out", str(out)],
                          capture_output=True, text=True, timeout=280, env=env, cwd=tmp_path)
    _check(out, proc, assert_run_consistent)


@pytest.mark.timeout(900)
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed here (Open MPI; run on the GPU machine)")
def test_bench_under_mpirun(tmp_path, assert_run_consistent):
    pytest.importorskip("mpi4py", reason="mpi4py not installed here (run on the GPU machine)")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, "-m",
                           "dwdp_trtllm.cli", "bench", str(CFG), "--out", str(out)],
                          capture_output=True, text=True, timeout=280, env=env, cwd=tmp_path)
    _check(out, proc, assert_run_consistent)
