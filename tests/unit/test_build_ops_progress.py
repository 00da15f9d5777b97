"""`dwdp build-ops` shows its progress on stderr while it compiles (the CUDA build takes about 2 minutes and printed
nothing until the end); stdout keeps the one line with the library's path."""
from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.commands import build_ops
from dwdp_trtllm.ops import build


def test_compiled_counts_the_objects_written_since_the_start(tmp_path):
    old = tmp_path / "a.o"
    old.write_bytes(b"")
    os.utime(old, (1000.0, 1000.0))  # an object of an earlier build
    (tmp_path / "b.o").write_bytes(b"")
    (tmp_path / "c.cuda.o").write_bytes(b"")
    (tmp_path / "build.ninja").write_text("")
    assert build_ops.compiled(tmp_path, since=time.time() - 60) == 2
    assert build_ops.compiled(tmp_path, since=0) == 3


def _fake_build(tmp_path, built: bool):
    """ops.build's interface as build-ops uses it; load() writes one object per source and the library."""
    sources = [tmp_path / f"s{i}.cu" for i in range(3)]
    build_dir = tmp_path / "ops" / "dwdp_ops_cuda-key"
    loads = []

    def load(cuda, verbose):
        build_dir.mkdir(parents=True, exist_ok=True)
        for s in sources:
            (build_dir / f"{s.stem}.cuda.o").write_bytes(b"")
        lib = build_dir / "dwdp_ops_cuda.so"
        lib.write_bytes(b"")
        loads.append(cuda)
        return lib

    fake = SimpleNamespace(CUDA_ARCH="sm90a", OpsBuildError=build.OpsBuildError, default_cuda=lambda: True,
                           _check_toolchain=lambda cuda: None, build_plan=lambda cuda: ("dwdp_ops_cuda", build_dir, sources),
                           is_built=lambda cuda: built, load=load)
    return fake, build_dir, loads


@pytest.mark.parametrize("built", [False, True])
def test_build_ops_progress_on_stderr_path_on_stdout(tmp_path, monkeypatch, capsys, built):
    import dwdp_trtllm.ops as ops_pkg

    fake, build_dir, loads = _fake_build(tmp_path, built)
    monkeypatch.setattr(ops_pkg, "build", fake)
    assert cli.main(["build-ops", "--cuda"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [f"dwdp ops (cuda sm90a): {build_dir / 'dwdp_ops_cuda.so'}"]
    err = " ".join(out.err.split())
    assert loads == [True]
    if built:
        assert err.startswith("dwdp build-ops: dwdp_ops_cuda (cuda sm90a) is already built in ") and "compiling" not in err
    else:
        assert err.startswith("dwdp build-ops: compiling 3 source(s) of dwdp_ops_cuda (cuda sm90a) in ")
        assert "the CUDA kernels take about 2 minutes" in err
        assert "compiling, then linking" in err and "4/4" in err  # 3 objects and the link
        assert "dwdp build-ops: built dwdp_ops_cuda in " in err
    assert max(map(len, out.err.splitlines())) <= 80


def test_build_plan_is_where_load_builds():
    """build_plan names the directory and sources load() compiles (one place for both)."""
    name, build_dir, sources = build.build_plan(False)
    assert name == "dwdp_ops_cpu" and build_dir.name == f"dwdp_ops_cpu-{build.build_key(False)}"
    assert [s.name for s in sources] == list(build.CPU_SOURCES) and all(Path(s).is_file() for s in sources)
