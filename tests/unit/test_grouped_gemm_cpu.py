"""dwdp::grouped_gemm on CPU: the C++ op (JIT-built), the torch reference, argument errors, fallback, fake impl,
and the merge baseline. Random data only; tolerances are fp32-accumulation ones."""
from __future__ import annotations

import warnings

import pytest
import torch

import importlib

from dwdp_trtllm.ops import build
from dwdp_trtllm.ops import grouped_gemm, grouped_gemm_reference, merge_experts, quantize_fp8_blockwise
from dwdp_trtllm.core.composite_view import check_chunks
from dwdp_trtllm.ops.merge import copy_runs

# the package re-exports the function under the module's name: fetch the module itself
gg_mod = importlib.import_module("dwdp_trtllm.ops.grouped_gemm")


def make_case(counts, buffer_rows, bidx, rows, K=64, N=48, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = sum(counts)
    a = torch.randn(T, K, generator=g).to(dtype)
    weights = [torch.randn(r, N, K, generator=g).to(dtype) for r in buffer_rows]
    offs = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(torch.int32)
    return a, offs, weights, torch.tensor(bidx, dtype=torch.int32), torch.tensor(rows, dtype=torch.int32)


def rel_err(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.fixture(scope="module")
def op_ready():
    if not gg_mod.available():
        pytest.fail(f"the CPU op must build in CI: {gg_mod.why_unavailable()}")


CASES = {
    # 0-token and 1-token experts, counts off any tile size, experts from two buffers in mixed order
    "mixed": ([0, 1, 17, 5, 0, 33], [4, 3], [1, 0, 1, 0, 1, 0], [2, 0, 0, 3, 1, 1]),
    # every expert from its own buffer
    "one_buffer_each": ([3, 9, 1, 12], [1, 2, 1, 3], [0, 1, 2, 3], [0, 1, 0, 2]),
    # all experts from one buffer, permuted rows
    "all_one_buffer": ([4, 0, 7, 2, 1], [5], [0] * 5, [4, 2, 0, 1, 3]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_float64_reference(op_ready, case):
    a, offs, w, bidx, rows = make_case(*CASES[case])
    out = grouped_gemm(a, offs, w, bidx, rows, backend="op")
    ref = grouped_gemm_reference(a, offs, w, bidx, rows, dtype=torch.float64)
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert rel_err(out, ref) < 1e-5
    # per expert, against a hand-written matmul: catches a wrong buffer/row that a global norm could average out
    start = 0
    for e, end in enumerate(offs.tolist()):
        wt = w[int(bidx[e])][int(rows[e])].double()
        torch.testing.assert_close(out[start:end].double(), a[start:end].double() @ wt.T, rtol=1e-4, atol=1e-4)
        start = end


def test_op_bf16_and_fp8_on_cpu(op_ready):
    a, offs, w, bidx, rows = make_case(*CASES["mixed"], dtype=torch.bfloat16, seed=1)
    out = grouped_gemm(a, offs, w, bidx, rows, backend="op")
    assert out.dtype == torch.bfloat16
    assert rel_err(out, grouped_gemm_reference(a, offs, w, bidx, rows, dtype=torch.float64)) < 1e-2
    K, N = 256, 128
    a32, offs, w32, bidx, rows = make_case([3, 0, 5, 2], [2, 2], [0, 1, 1, 0], [1, 0, 1, 0], K=K, N=N, seed=2)
    aq, sa = quantize_fp8_blockwise(a32, (1, 128))
    wq_sq = [quantize_fp8_blockwise(w, (128, 128)) for w in w32]
    wq, sw = [q for q, _ in wq_sq], [s for _, s in wq_sq]
    out = grouped_gemm(aq, offs, wq, bidx, rows, sa, sw, backend="op")
    ref = grouped_gemm_reference(aq, offs, wq, bidx, rows, sa, sw, dtype=torch.float64)
    assert out.dtype == torch.bfloat16 and rel_err(out, ref) < 1e-2
    # and the quantised result is close to the unquantised one (e4m3: ~2^-4 relative per element)
    assert rel_err(out, grouped_gemm_reference(a32, offs, w32, bidx, rows, dtype=torch.float64)) < 0.1


def test_op_checks_maps_in_cpp(op_ready):
    a, offs, w, bidx, rows = make_case(*CASES["mixed"])
    with pytest.raises(RuntimeError, match="expert_row"):
        torch.ops.dwdp.grouped_gemm(a, offs, w, bidx, rows + 10)
    with pytest.raises(RuntimeError, match="expert_buffer_idx"):
        torch.ops.dwdp.grouped_gemm(a, offs, w, bidx + 5, rows)
    bad = offs.clone()
    bad[2] = 0
    with pytest.raises(RuntimeError, match="non-decreasing"):
        torch.ops.dwdp.grouped_gemm(a, bad, w, bidx, rows)


@pytest.mark.parametrize("mutate,match", [
    (lambda c: c.update(offs=c["offs"].long()), "offs must be an int32"),
    (lambda c: c.update(bidx=c["bidx"][:-1]), "expert_buffer_idx must be an int32"),
    (lambda c: c.update(rows=c["rows"].long()), "expert_row must be an int32"),
    (lambda c: c.update(w=[c["w"][0][:, :, :8]] + c["w"][1:]), r"weights\[0\] must be \[rows"),
    (lambda c: c.update(w=[c["w"][0].double()] + c["w"][1:]), r"weights\[0\] is torch.float64"),
    (lambda c: c.update(a=c["a"][0]), "a must be a"),
])
def test_wrapper_errors_name_the_argument(mutate, match):
    a, offs, w, bidx, rows = make_case(*CASES["mixed"])
    c = dict(a=a, offs=offs, w=w, bidx=bidx, rows=rows)
    mutate(c)
    with pytest.raises(ValueError, match=match):
        grouped_gemm(c["a"], c["offs"], c["w"], c["bidx"], c["rows"], backend="reference")


def test_fp8_needs_scales():
    a, offs, w, bidx, rows = make_case([2, 2], [2], [0, 0], [0, 1], K=128, N=128)
    with pytest.raises(ValueError, match="a_scale must be float32"):
        grouped_gemm(a.to(torch.float8_e4m3fn), offs, [x.to(torch.float8_e4m3fn) for x in w], bidx, rows,
                     backend="reference")


def test_auto_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setattr(gg_mod, "_state", {})

    def broken(*args, **kwargs):
        raise build.OpsBuildError("no C++ compiler (c++/g++/clang++) on PATH")

    monkeypatch.setattr(build, "load", broken)
    a, offs, w, bidx, rows = make_case(*CASES["mixed"], seed=3)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out1 = grouped_gemm(a, offs, w, bidx, rows)
        out2 = grouped_gemm(a, offs, w, bidx, rows)
    msgs = [str(r.message) for r in rec if issubclass(r.category, RuntimeWarning)]
    assert len(msgs) == 1 and "no C++ compiler" in msgs[0]
    ref = grouped_gemm_reference(a, offs, w, bidx, rows, dtype=torch.float64)
    assert rel_err(out1, ref) < 1e-5 and torch.equal(out1, out2)
    assert not gg_mod.available() and "no C++ compiler" in gg_mod.why_unavailable()
    with pytest.raises(build.OpsBuildError):
        grouped_gemm(a, offs, w, bidx, rows, backend="op")


def test_fake_impl_gives_shape_without_data(op_ready):
    from torch._subclasses.fake_tensor import FakeTensorMode

    a, offs, w, bidx, rows = make_case(*CASES["mixed"])
    with FakeTensorMode() as mode:
        fa, fo, fb, fr = (mode.from_tensor(t) for t in (a, offs, bidx, rows))
        fw = [mode.from_tensor(t) for t in w]
        out = torch.ops.dwdp.grouped_gemm(fa, fo, fw, fb, fr)
    assert tuple(out.shape) == (a.shape[0], w[0].shape[1]) and out.dtype == a.dtype


def test_cutlass_include_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("CUTLASS_DIR", str(tmp_path))
    with pytest.raises(build.OpsBuildError, match="no cutlass/cutlass.h"):
        build.cutlass_include_dirs()


def test_merge_experts_gathers_runs():
    a, offs, w, bidx, rows = make_case(*CASES["mixed"])
    merged = merge_experts(w, bidx, rows)
    for e in range(len(bidx)):
        assert torch.equal(merged[e], w[int(bidx[e])][int(rows[e])])
    assert copy_runs([0, 0, 0, 1, 1], [0, 1, 2, 0, 1]) == [(0, 0, 0, 3), (3, 1, 0, 2)]
    with pytest.raises(ValueError, match="out of range"):
        merge_experts(w, [0], [9])


def test_composite_view_refuses_off_granularity_sizes():
    mib = 2**20
    assert check_chunks([(0, 56 * mib), (0, 2 * mib)], 2 * mib, [56 * mib, 2 * mib]) == 58 * mib
    with pytest.raises(ValueError, match=r"size 3145728 bytes .* granularity 2097152"):
        check_chunks([(0, 3 * mib)], 2 * mib, [4 * mib])
    with pytest.raises(ValueError, match="whole allocations only"):
        check_chunks([(2 * mib, 2 * mib)], 2 * mib, [4 * mib])
    with pytest.raises(ValueError, match="whole allocations only"):
        check_chunks([(0, 2 * mib)], 2 * mib, [4 * mib])


def test_a_carried_library_for_this_build_key_is_loaded_without_building(op_ready, tmp_path):
    """build.load() takes a library placed in its key's folder without a build tree (one carried from the machine
    that built it) as is: no compiler runs (a build would write build.ninja), the op is registered."""
    import shutil
    import subprocess
    import sys

    built = build.load(cuda=False)
    dest = tmp_path / "ops" / built.parent.name
    dest.mkdir(parents=True)
    shutil.copy(built, dest / built.name)
    code = ("import torch; from dwdp_trtllm.ops import build; p = build.load(cuda=False); "
            "print(p.parent.name, hasattr(torch.ops.dwdp, 'grouped_gemm'))")
    env = {**__import__("os").environ, "DWDP_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [built.parent.name, "True"]
    assert not (dest / "build.ninja").exists()
