"""DeepGEMM's padded contiguous layout (dwdp_trtllm/ops/deepgemm.py) against a loop over experts, and the clear error
when deep_gemm is missing. CPU only: the layout is plain torch; the kernel itself is tests/gpu/test_deepgemm_cuda.py."""
import sys

import pytest
import torch

from dwdp_trtllm.ops import deepgemm as dgl


def loop_layout(counts, align=128):
    """The layout DeepGEMM's tests build (tests/generators.py generate_m_grouped_contiguous at 54e2261), by loop."""
    dest, m_idx, psum, start = [], [], [], 0
    for e, c in enumerate(counts):
        aligned = (c + align - 1) // align * align
        dest += list(range(start, start + c))
        m_idx += [e] * c + [-1] * (aligned - c)
        psum.append(start + c)
        start += aligned
    return dest, m_idx, psum, start


@pytest.mark.parametrize("counts", [[5, 0, 128, 129, 1], [0, 0, 3], [256], [1] * 7])
def test_layout_matches_loop(counts):
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    lay = dgl.padded_layout(offs)
    dest, m_idx, psum, rows = loop_layout(counts)
    assert lay.rows_padded == rows
    assert lay.dest_R.tolist() == dest
    assert lay.m_indices_M.tolist() == m_idx
    assert lay.psum_E.tolist() == psum
    # DeepGEMM's psum rule: expert e starts at align(psum[e-1], 128) and its padded start is where dest puts row 0
    for e, c in enumerate(counts):
        if c:
            first = sum(counts[:e])
            start = 0 if e == 0 else (psum[e - 1] + 127) // 128 * 128
            assert lay.dest_R[first].item() == start


def test_layout_with_bound_marks_tail_rows_minus_one():
    counts = [3, 200, 0, 17]
    offs = torch.tensor(counts).cumsum(0)
    bound = dgl.padded_rows_bound(sum(counts), len(counts))
    lay = dgl.padded_layout(offs, rows_padded=bound)
    exact = dgl.padded_layout(offs)
    assert lay.rows_padded == bound > exact.rows_padded
    assert lay.m_indices_M[: exact.rows_padded].tolist() == exact.m_indices_M.tolist()
    assert (lay.m_indices_M[exact.rows_padded:] == -1).all()
    with pytest.raises(ValueError, match="rows_padded=10 <"):
        dgl.padded_layout(offs, rows_padded=10)


def test_pad_unpad_roundtrip_fp8_and_scales():
    g = torch.Generator().manual_seed(1)
    counts = [130, 1, 0, 255]
    R, K = sum(counts), 256
    offs = torch.tensor(counts).cumsum(0)
    a = (torch.randn(R, K, generator=g) * 64).to(torch.float8_e4m3fn)
    sa = torch.rand(R, K // 128, generator=g) + 0.1
    lay = dgl.padded_layout(offs)
    a_pad, sa_pad = dgl.pad_rows(a, lay), dgl.pad_rows(sa, lay)
    assert a_pad.shape == (lay.rows_padded, K) and a_pad.dtype == torch.float8_e4m3fn
    assert torch.equal(dgl.unpad_rows(a_pad, lay).view(torch.uint8), a.view(torch.uint8))
    assert torch.equal(dgl.unpad_rows(sa_pad, lay), sa)
    pad_rows = lay.m_indices_M < 0
    assert int(pad_rows.sum()) == lay.rows_padded - R
    assert (a_pad[pad_rows].float() == 0).all() and (sa_pad[pad_rows] == 0).all()


def test_padded_gemm_equals_reference_on_cpu():
    """The padded layout fed to a per-expert loop (what DeepGEMM computes for each aligned segment) gives the
    unpadded grouped GEMM's rows back: the layout, not the kernel, is what this checks."""
    from dwdp_trtllm.ops.reference import dequantize_fp8_blockwise, grouped_gemm_reference
    g = torch.Generator().manual_seed(2)
    counts, N, K, E = [3, 0, 130, 7], 256, 256, 4
    R = sum(counts)
    offs = torch.tensor(counts).cumsum(0)
    a = (torch.randn(R, K, generator=g) * 8).to(torch.float8_e4m3fn)
    sa = torch.rand(R, K // 128, generator=g) * 1e-2 + 1e-3
    w = (torch.randn(E, N, K, generator=g) * 8).to(torch.float8_e4m3fn)
    sw = torch.rand(E, N // 128, K // 128, generator=g) * 1e-2 + 1e-3
    lay = dgl.padded_layout(offs)
    a_pad, sa_pad = dgl.pad_rows(a, lay), dgl.pad_rows(sa, lay)
    y_pad = torch.zeros(lay.rows_padded, N)
    for e in range(E):
        rows = (lay.m_indices_M == e).nonzero().flatten()
        if rows.numel():
            y_pad[rows] = dequantize_fp8_blockwise(a_pad[rows], sa_pad[rows], (1, 128)) @ dequantize_fp8_blockwise(w[e], sw[e]).t()
    ref = grouped_gemm_reference(a, offs, [w], torch.zeros(E, dtype=torch.int32), torch.arange(E, dtype=torch.int32),
                                 sa, [sw])
    assert torch.allclose(dgl.unpad_rows(y_pad, lay), ref[:R], rtol=1e-5, atol=1e-5)


def test_missing_deep_gemm_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DWDP_DEEPGEMM_DIR", str(tmp_path))  # an empty tree: nothing to import
    monkeypatch.setitem(sys.modules, "deep_gemm", None)      # import deep_gemm raises ImportError
    assert not dgl.available()
    with pytest.raises(dgl.DeepGEMMUnavailable, match="deepgemm_build.sh"):
        dgl.module()
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        dgl.grouped_gemm_fp8(torch.zeros(2, 128), torch.tensor([2]), torch.zeros(1, 128, 128), torch.ones(2, 1),
                             torch.ones(1, 1, 1))


def test_bound_holds_with_fewer_rows_than_experts():
    """Fewer rows than experts (decode): at most `rows` experts are non-empty, so the bound is rows * ALIGN_M at
    most, not E * 127 rows more; it still covers the exact height when every row has its own expert."""
    E, rows = 256, 8
    offs = torch.arange(1, E + 1).clamp(max=rows)  # experts 0..7 one row each, the rest empty
    exact = dgl.padded_layout(offs)
    assert exact.rows_padded == rows * dgl.ALIGN_M == dgl.padded_rows_bound(rows, E)
    assert dgl.padded_height(rows, E) == rows * dgl.ALIGN_M
    assert dgl.padded_rows_bound(4096, E) == 4096 + E * (dgl.ALIGN_M - 1)


def test_layout_with_rows_and_height_given_reads_nothing_back(monkeypatch):
    """The hot path (rows and rows_padded given) must not read a device value: int() of a tensor would sync."""
    offs = torch.tensor([3, 3, 140])
    calls = []
    real = torch.Tensor.__int__
    monkeypatch.setattr(torch.Tensor, "__int__", lambda t: calls.append(1) or real(t))
    lay = dgl.padded_layout(offs, rows=140, rows_padded=dgl.padded_rows_bound(140, 3))
    assert calls == []
    assert lay.dest_R.tolist() == dgl.padded_layout(torch.tensor([3, 3, 140])).dest_R.tolist()


@pytest.mark.parametrize("dtype,width", [(torch.float8_e4m3fn, 7168), (torch.float8_e4m3fn, 3), (torch.bfloat16, 6),
                                         (torch.float32, 56), (torch.float32, 3)])
def test_rows_move_as_words_whatever_the_width(dtype, width):
    """pad/unpad move rows as the widest integer tiling a row: dtype, shape and bits come back unchanged."""
    g = torch.Generator().manual_seed(3)
    counts = [2, 0, 129]
    offs = torch.tensor(counts).cumsum(0)
    x = (torch.randn(sum(counts), width, generator=g) * 8).to(dtype)
    lay = dgl.padded_layout(offs)
    x_pad = dgl.pad_rows(x, lay)
    assert x_pad.dtype == dtype and x_pad.shape == (lay.rows_padded, width)
    back = dgl.unpad_rows(x_pad, lay)
    assert back.dtype == dtype and back.shape == x.shape
    assert torch.equal(back.view(torch.uint8) if dtype.itemsize == 1 else back, x.view(torch.uint8) if dtype.itemsize == 1 else x)


def test_one_gather_builds_the_padded_layout():
    """The engine's gather with padded_source_rows equals gather-then-pad on every real row."""
    g = torch.Generator().manual_seed(4)
    T, K, E, H = 50, 4, 6, 256
    ids = torch.randint(0, E, (T, K), generator=g)
    perm = torch.sort(ids.reshape(-1), stable=True).indices
    rows_A = torch.div(perm, K, rounding_mode="floor")
    offs = torch.bincount(ids.reshape(-1), minlength=E).cumsum(0)
    x = torch.randn(T, H, generator=g)
    lay = dgl.padded_layout(offs)
    one_pass = x.index_select(0, dgl.padded_source_rows(rows_A, lay))
    two_pass = dgl.pad_rows(x.index_select(0, rows_A), lay)
    real = lay.m_indices_M >= 0
    assert one_pass.shape == two_pass.shape
    assert torch.equal(one_pass[real], two_pass[real])
    assert torch.equal(dgl.unpad_rows(one_pass, lay), x.index_select(0, rows_A))


def test_deepgemm_variables_are_read_in_the_env_module(monkeypatch, tmp_path):
    """DWDP_DEEPGEMM_DIR / DWDP_DEEPGEMM_SOURCE go through dwdp_trtllm/env.py (DESIGN: environment variables are read
    in one module): module() puts env.deepgemm_dir() on sys.path, and neither ops/deepgemm.py nor
    scripts/bench_deepgemm.py reads os.environ itself."""
    from pathlib import Path

    from dwdp_trtllm import env
    root = str(tmp_path / "dg_tree")
    monkeypatch.setattr(env, "deepgemm_dir", lambda: root)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "deep_gemm", None)
    assert not dgl.available()
    assert root in sys.path
    repo = Path(__file__).resolve().parents[2]
    for rel in ("dwdp_trtllm/ops/deepgemm.py", "scripts/bench_deepgemm.py"):
        text = (repo / rel).read_text()
        assert "os.environ" not in text and "getenv" not in text, rel
    monkeypatch.delenv(env.DWDP_DEEPGEMM_SOURCE, raising=False)
    assert env.deepgemm_source() == env.DEEPGEMM_SOURCE_DEFAULT
    monkeypatch.setenv(env.DWDP_DEEPGEMM_SOURCE, "deepseek-ai/DeepGEMM abc1234")
    assert env.deepgemm_source() == "deepseek-ai/DeepGEMM abc1234"
