"""gemm: deepgemm in the engine's routed-expert op (engine/moe_deepgemm.py) on CPU, through a stand-in for DeepGEMM.

DeepGEMM needs CUDA (tests/gpu/test_deepgemm_cuda.py runs the real kernel); here `deep_gemm` is FakeDeepGEMM, which
follows DeepGEMM's documented semantics at deepseek-ai/DeepGEMM 54e2261 (git dir /work/.mirror/deepseek-ai+DeepGEMM/repo):
- m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, grouped_layout, use_psum_layout=False): the host checks of
  csrc/apis/gemm.hpp m_grouped_fp8_fp4_gemm_nt_contiguous (int32 contiguous layout, bf16 d of [M, N], M ==
  len(grouped_layout) for m_indices, num_groups == len(grouped_layout) for psum); rows of group e are computed as
  tests/generators.py generate_m_grouped_contiguous's reference `ref_d = a @ b[e].t()` (on the dequantised operands:
  1x128 activation scales, 128x128 weight scales); rows whose m_indices is -1 (and, with psum, rows outside
  [align(psum[e-1], 128), psum[e])) are not computed: DeepGEMM leaves them undefined (tests/test_fp8_fp4.py compares
  psum outputs on [start, end) only), so the stand-in POISONS them with NaN: a padding row read into a real output
  fails these tests.
- get_mn_major_tma_aligned_tensor(sf): csrc/jit_kernels/impls/smxx_layout.hpp: returned as is when already MN-major
  with stride(1) == align(M, 4); else a transposed copy (counted here: the hot path must not need one).
"""
import sys

import pytest
import torch

from dwdp_trtllm.engine import moe_compute as mc
from dwdp_trtllm.engine import moe_deepgemm as mdg
from dwdp_trtllm.ops import deepgemm as dgl
from dwdp_trtllm.ops.reference import dequantize_fp8_blockwise, quantize_fp8_blockwise

E, H, I, K = 5, 256, 256, 3


class FakeDeepGEMM:
    __version__ = "stand-in"

    def __init__(self):
        self.transposed = 0   # get_mn_major_tma_aligned_tensor calls that had to copy
        self.calls = []       # (M, N, use_psum) per GEMM

    @staticmethod
    def get_mk_alignment_for_contiguous_layout():
        return 128

    def get_mn_major_tma_aligned_tensor(self, sf):
        M, G = sf.shape
        aligned = -(-M // 4) * 4
        if sf.stride(0) == 1 and sf.stride(1) == aligned:
            return sf
        self.transposed += 1
        out = torch.empty_strided((M, G), (1, aligned), dtype=sf.dtype)
        out.copy_(sf)
        return out

    def m_grouped_fp8_gemm_nt_contiguous(self, a, b, d, grouped_layout, use_psum_layout=False):
        (a_MK, sa), (w_ENK, sw) = a, b
        M, Kd = a_MK.shape
        G, N, _ = w_ENK.shape
        assert a_MK.dtype == w_ENK.dtype == torch.float8_e4m3fn and d.dtype == torch.bfloat16
        assert d.shape == (M, N) and grouped_layout.dtype == torch.int32 and grouped_layout.is_contiguous()
        assert grouped_layout.shape == ((G,) if use_psum_layout else (M,))
        self.calls.append((M, N, use_psum_layout))
        d.fill_(float("nan"))
        if use_psum_layout:
            ends, start = grouped_layout.tolist(), 0
            groups = []
            for e, end in enumerate(ends):
                groups.append((e, torch.arange(start, end)))
                start = -(-end // 128) * 128
        else:
            groups = [(e, (grouped_layout == e).nonzero().flatten()) for e in range(G)]
        for e, rows in groups:
            if rows.numel():
                x = dequantize_fp8_blockwise(a_MK[rows], sa[rows], (1, 128))
                d[rows] = (x @ dequantize_fp8_blockwise(w_ENK[e], sw[e]).t()).to(torch.bfloat16)


def _fp8_loop(a, offs, weights, bidx, row, scales=None):
    """What the multi_buffer path computes from Fp8Rows, by loop over experts (bf16 out)."""
    ends, begin = offs.tolist(), 0
    out = torch.empty(a.q.shape[0], weights[0].shape[1], dtype=torch.bfloat16)
    for e, end in enumerate(ends):
        if end > begin:
            b, r = int(bidx[e]), int(row[e])
            x = dequantize_fp8_blockwise(a.q[begin:end], a.scale[begin:end], (1, 128))
            out[begin:end] = (x @ dequantize_fp8_blockwise(weights[b][r], scales[b][r]).t()).to(torch.bfloat16)
        begin = end
    return out


@pytest.fixture
def fake_dg(monkeypatch):
    fake = FakeDeepGEMM()
    monkeypatch.setitem(sys.modules, "deep_gemm", fake)
    mc.register_gemm("fp8_loop", _fp8_loop, supports_fp8=True, fp8_activations=True, overwrite=True)
    yield fake
    mc.GEMM_PATHS.pop("fp8_loop", None)


def _experts(seed):
    g = torch.Generator().manual_seed(seed)
    (q13, s13) = quantize_fp8_blockwise(torch.randn(E, 2 * I, H, generator=g) / 16, (128, 128))
    (q2, s2) = quantize_fp8_blockwise(torch.randn(E, H, I, generator=g) / 11, (128, 128))
    return q13, s13, q2, s2


def _routing(T, skew, seed):
    g = torch.Generator().manual_seed(seed)
    if skew:  # expert 1 takes most pairs, expert 3 none: ragged groups, one empty, one > 128 rows
        ids = torch.stack([torch.tensor([1, 0, 4])[torch.randperm(3, generator=g)] for _ in range(T)])
        ids[: T // 3, 2] = 2
    else:
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    return ids, torch.rand(T, K, generator=g)


@pytest.mark.parametrize("T,skew,up_first,psum", [(70, False, False, False), (90, True, True, False),
                                                  (90, True, False, True), (1, False, True, False)])
def test_deepgemm_op_equals_the_fp8_loop_bit_for_bit(fake_dg, monkeypatch, T, skew, up_first, psum):
    """The whole op (one gather to the padded rows, fc1, SwiGLU + quant, fc2, combine through dest_A) equals the
    unpadded FP8 path on the same arithmetic; padding rows are NaN in the GEMM outputs and never reach y."""
    monkeypatch.setattr(mdg, "USE_PSUM", psum)
    q13, s13, q2, s2 = _experts(T)
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    ids, w = _routing(T, skew, T + 1)
    bidx, row = mc.identity_map(E, "cpu")
    kw = dict(w13_scale_sources=[s13], w2_scale_sources=[s2], up_first=up_first)
    y_dg = mc.routed_experts_forward(x, ids, w, [q13], [q2], bidx, row, gemm="deepgemm", **kw)
    y_ref = mc.routed_experts_forward(x, ids, w, [q13], [q2], bidx, row, gemm="fp8_loop", **kw)
    assert y_dg.dtype == x.dtype and torch.isfinite(y_dg).all()
    assert torch.equal(y_dg, y_ref)
    A = T * K
    M = dgl.padded_height(A, E)
    assert fake_dg.calls == [(M, 2 * I, psum), (M, H, psum)] and M % 128 == 0
    assert fake_dg.transposed == 0  # scales reached DeepGEMM MN-major and TMA-aligned: no transpose pass


def test_padding_rows_are_poisoned_and_the_combine_skips_them(fake_dg):
    """The padded output holds NaN on every padding row (the stand-in's undefined rows); the combine through dest_A
    reads none of them, and a combine reading row a instead of dest_A[a] would."""
    T = 40
    q13, s13, q2, s2 = _experts(3)
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    ids, w = _routing(T, True, 5)
    bidx, row = mc.identity_map(E, "cpu")
    y_MH, perm, dest_A = mdg.routed_mlp(x, ids, [q13], [q2], bidx, row, w13_scale_sources=[s13],
                                        w2_scale_sources=[s2], up_first=False, act=mc.silu_mul_quant)
    assert torch.equal(perm, mc.sort_by_expert(ids, E)[0])  # one buffer in expert order: the expert sort
    real = torch.zeros(y_MH.shape[0], dtype=torch.bool)
    real[dest_A] = True
    assert torch.isnan(y_MH[~real]).all() and torch.isfinite(y_MH[real]).all()
    assert torch.isfinite(mc.combine(y_MH, perm, w, T, torch.bfloat16, y_rows_A=dest_A)).all()
    assert torch.isnan(mc.combine(y_MH[: T * K], perm, w, T, torch.bfloat16)).any()  # row a, not dest_A[a]: leaks


def test_combine_through_the_padded_index_equals_combine_of_the_rows():
    g = torch.Generator().manual_seed(6)
    T, Hc = 30, 64
    ids = torch.randint(0, E, (T, K), generator=g)
    w = torch.rand(T, K, generator=g)
    perm, offs, _ = mc.sort_by_expert(ids, E)
    lay = dgl.padded_layout(offs, rows_padded=dgl.padded_height(T * K, E))
    y_A = torch.randn(T * K, Hc, generator=g)
    y_M = torch.full((lay.rows_padded, Hc), float("nan"))
    y_M[lay.dest_R] = y_A
    assert torch.equal(mc.combine(y_M, perm, w, T, y_rows_A=lay.dest_R), mc.combine(y_A, perm, w, T))


@pytest.mark.parametrize("T,skew,psum", [(90, True, True), (90, True, False), (41, False, True), (1, False, False)])
def test_split_buffers_run_one_call_per_buffer_and_equal_the_loop(fake_dg, monkeypatch, T, skew, psum):
    """A DWDP rank's [local | slot] split (and a shuffled map: slot rows out of expert order) runs DeepGEMM once per
    buffer on that buffer's section of the padded rows, weights read in place, and equals the unpadded FP8 path bit
    for bit; an empty section is skipped."""
    monkeypatch.setattr(mdg, "USE_PSUM", psum)
    q13, s13, q2, s2 = _experts(T + 3)
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    ids, w = _routing(T, skew, T + 7)
    order = torch.tensor([3, 0, 4, 1, 2])  # buffer 0 holds experts 3, 0; buffer 1 holds 4, 1, 2 in that row order
    split_idx, split_row = torch.tensor([0, 1, 1, 0, 1]), torch.tensor([1, 1, 2, 0, 0])
    split = lambda t: [t[order[:2]].clone(), t[order[2:]].clone()]  # noqa: E731
    kw = dict(w13_scale_sources=split(s13), w2_scale_sources=split(s2))
    y_dg = mc.routed_experts_forward(x, ids, w, split(q13), split(q2), split_idx, split_row, gemm="deepgemm", **kw)
    y_ref = mc.routed_experts_forward(x, ids, w, split(q13), split(q2), split_idx, split_row, gemm="fp8_loop", **kw)
    assert torch.isfinite(y_dg).all() and torch.equal(y_dg, y_ref)
    groups_by_call = [c for c in fake_dg.calls]
    used = {int(split_idx[e]) for e in ids.flatten().tolist()}
    assert len(groups_by_call) == 2 * len(used)  # fc1 + fc2 per buffer that has rows
    assert all(M % 128 == 0 for M, _, _ in groups_by_call) and fake_dg.transposed == 0


def test_split_sections_hold_each_buffers_rows_only(fake_dg):
    """section_rows orders groups buffer-major: every row of buffer b's section belongs to an expert of buffer b."""
    split_idx, split_row = torch.tensor([0, 1, 1, 0, 1]), torch.tensor([1, 1, 2, 0, 0])
    virt = mdg.section_rows(split_idx, split_row, (2, 3))
    assert virt.tolist() == [1, 3, 4, 0, 2]


def test_unpadded_split_and_bf16_weights_are_refused(fake_dg):
    T = 8
    q13, s13, q2, s2 = _experts(4)
    x = torch.randn(T, H).to(torch.bfloat16)
    ids, w = _routing(T, False, 7)
    split_idx = torch.tensor([0, 0, 1, 1, 1])
    split_row = torch.tensor([0, 1, 0, 1, 2])
    with pytest.raises(ValueError, match=r"gemm='deepgemm' \(grouped_gemm\) takes one \[E, N, K\] buffer, got 2"):
        mc.grouped_gemm(x, torch.tensor([8, 8, 8, 8, 8], dtype=torch.int32), [q13[:2], q13[2:]], split_idx, split_row,
                        gemm="deepgemm", scales=[s13[:2], s13[2:]])
    bidx, row = mc.identity_map(E, "cpu")
    w13 = torch.randn(E, 2 * I, H).to(torch.bfloat16)
    w2 = torch.randn(E, H, I).to(torch.bfloat16)
    with pytest.raises(ValueError, match="FP8 block-scale weights"):
        mc.routed_experts_forward(x, ids, w, [w13], [w2], bidx, row, gemm="deepgemm")
    assert fake_dg.calls == []


def test_multi_buffer_declines_where_deepgemm_cannot_run(fake_dg, monkeypatch):
    """gemm: multi_buffer runs DeepGEMM's mainloop only where moe_deepgemm.usable allows (CUDA, sm_90, FP8, dims,
    DeepGEMM built) and DWDP_MOE_MAINLOOP asks for it (auto from the crossover, deepgemm always; the default,
    cutlass, never); elsewhere the padded MLP declines (None) and the unpadded op runs. An unknown DWDP_MOE_MAINLOOP
    names the variable."""
    from dwdp_trtllm.engine import gemm_paths
    q13, s13, q2, s2 = _experts(11)
    ids, w = _routing(6, False, 12)
    bidx, row = mc.identity_map(E, "cpu")
    x = torch.randn(6, H).to(torch.bfloat16)
    kw = dict(w13_scale_sources=[s13], w2_scale_sources=[s2], up_first=False, act=mc.silu_mul_quant)
    assert mdg.usable([q13], [s13], [q2]) == "not on a CUDA device"
    assert gemm_paths._auto_mlp(x, ids, [q13], [q2], bidx, row, **kw) is None
    monkeypatch.setattr(mdg, "usable", lambda *a: None)  # as on an H100 / H200 with DeepGEMM built
    monkeypatch.setattr(gemm_paths, "usable", lambda *a: None)
    monkeypatch.delenv("DWDP_MOE_MAINLOOP", raising=False)
    monkeypatch.setattr(gemm_paths, "DEEPGEMM_MIN_ROWS_PER_EXPERT", 3.6)
    assert gemm_paths._auto_mlp(x, ids, [q13], [q2], bidx, row, **kw) is None and fake_dg.calls == []  # default: ours
    monkeypatch.setattr(gemm_paths, "DEEPGEMM_MIN_ROWS_PER_EXPERT", 384)
    monkeypatch.setenv("DWDP_MOE_MAINLOOP", "auto")
    # 6 tokens x top-3 over 5 experts: 3.6 rows per expert, far below the measured crossover: ours runs
    assert gemm_paths._auto_mlp(x, ids, [q13], [q2], bidx, row, **kw) is None and fake_dg.calls == []
    monkeypatch.setattr(gemm_paths, "DEEPGEMM_MIN_ROWS_PER_EXPERT", 3.6)  # a call at the crossover: DeepGEMM's
    y_MH, _, _ = gemm_paths._auto_mlp(x, ids, [q13], [q2], bidx, row, **kw)
    assert len(fake_dg.calls) == 2
    monkeypatch.setattr(gemm_paths, "DEEPGEMM_MIN_ROWS_PER_EXPERT", 384)
    monkeypatch.setenv("DWDP_MOE_MAINLOOP", "deepgemm")  # forced, whatever the size
    gemm_paths._auto_mlp(x, ids, [q13], [q2], bidx, row, **kw)
    assert len(fake_dg.calls) == 4
    monkeypatch.setenv("DWDP_MOE_MAINLOOP", "cutlass")
    assert gemm_paths._auto_mlp(x, ids, [q13], [q2], bidx, row, **kw) is None and len(fake_dg.calls) == 4
    monkeypatch.setenv("DWDP_MOE_MAINLOOP", "fast")
    with pytest.raises(ValueError, match="DWDP_MOE_MAINLOOP='fast'"):
        gemm_paths._auto_mlp(x, ids, [q13], [q2], bidx, row, **kw)


def test_identity_map_by_value_is_accepted(fake_dg):
    """A single buffer whose map equals the identity by value (not identity_map's tensors) runs (a host sync)."""
    T = 12
    q13, s13, q2, s2 = _experts(5)
    x = torch.randn(T, H).to(torch.bfloat16)
    ids, w = _routing(T, False, 8)
    bidx, row = torch.zeros(E, dtype=torch.int64), torch.arange(E)
    kw = dict(w13_scale_sources=[s13], w2_scale_sources=[s2])
    assert torch.equal(mc.routed_experts_forward(x, ids, w, [q13], [q2], bidx, row, gemm="deepgemm", **kw),
                       mc.routed_experts_forward(x, ids, w, [q13], [q2], bidx, row, gemm="fp8_loop", **kw))


def test_unpadded_gemm_contract_equals_the_loop(fake_dg):
    """grouped_gemm(gemm='deepgemm') on unpadded rows (DWDP / DEP backends call it this way): pad, GEMM, unpad."""
    g = torch.Generator().manual_seed(9)
    q13, s13, _, _ = _experts(6)
    counts = [3, 0, 130, 1, 7]
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    a = mc.quantize_act_1x128(torch.randn(sum(counts), H, generator=g).to(torch.bfloat16))
    bidx, row = mc.identity_map(E, "cpu")
    out = mc.grouped_gemm(a, offs, [q13], bidx, row, gemm="deepgemm", scales=[s13])
    assert torch.equal(out, _fp8_loop(a, offs, [q13], bidx, row, [s13]))


def test_missing_deep_gemm_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DWDP_DEEPGEMM_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "deep_gemm", None)  # import deep_gemm raises ImportError
    q13, s13, q2, s2 = _experts(7)
    ids, w = _routing(4, False, 9)
    bidx, row = mc.identity_map(E, "cpu")
    with pytest.raises(dgl.DeepGEMMUnavailable, match="deepgemm_build.sh"):
        mc.routed_experts_forward(torch.randn(4, H), ids, w, [q13], [q2], bidx, row, gemm="deepgemm",
                                  w13_scale_sources=[s13], w2_scale_sources=[s2])


def test_col_major_scales_survive_the_gather():
    g = torch.Generator().manual_seed(10)
    x = torch.randn(9, 384, generator=g)
    a_row, a_col = mc.quantize_act_1x128(x), mc.quantize_act_1x128(x, scale_col_major=True)
    assert a_col.scale_col_major and not a_row.scale_col_major and torch.equal(a_row.scale, a_col.scale)
    idx = torch.tensor([3, 3, 0, 8, 1, 5, 2, 7])
    s_row, s_col = a_row.index_select(idx), a_col.index_select(idx)
    assert s_col.scale_col_major and s_col.scale.stride() == (1, 8)
    assert torch.equal(s_row.scale, s_col.scale) and torch.equal(s_row.q.view(torch.uint8), s_col.q.view(torch.uint8))
    h = torch.randn(9, 256, generator=g).to(torch.bfloat16)
    r, c = mc.silu_mul_quant(h), mc.silu_mul_quant(h, scale_col_major=True)
    assert c.scale_col_major and torch.equal(r.scale, c.scale)


@pytest.mark.slow  # loads the CPU dwdp::grouped_gemm for the multi_buffer path
def test_moe_op_bench_times_deepgemm_beside_multi_buffer_interleaved(fake_dg):
    """scripts/bench_moe_op_vs_trtllm.py measure() with the deepgemm path (the stand-in here): every path once per
    round, rounds interleaved, the same inputs; deepgemm's first call, its difference to multi_buffer noted."""
    from pathlib import Path
    from types import SimpleNamespace
    from dwdp_trtllm import ops
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import bench_moe_op_vs_trtllm as bench
    if not ops.available():
        pytest.fail(f"dwdp::grouped_gemm CPU build unavailable: {ops.why_unavailable()}")
    spec = SimpleNamespace(num_experts=16, top_k=8, hidden_size=256, moe_intermediate=256, router="sigmoid_grouped",
                           norm_topk_prob=True, routed_scaling_factor=2.5)
    args = bench.parse_args(["--out", "x", "--tokens", "24", "--routings", "power_law", "--rounds", "2",
                             "--paths", "multi_buffer,deepgemm", "--local", "5"])
    order, notes = [], {}

    def time_fn(f):
        order.append(f)
        f()
        return float(len(order))
    timings, _ = bench.measure(args, spec, torch.device("cpu"), time_fn, notes)
    assert sorted(timings) == [("deepgemm", "power_law", 24), ("multi_buffer", "power_law", 24)]
    assert order[0] is order[2] and order[1] is order[3] and order[0] is not order[1]  # interleaved rounds
    assert timings[("multi_buffer", "power_law", 24)] == 3.0  # median (upper) of its rounds 1.0, 3.0
    assert set(notes) == {"first_call_s", "deepgemm_vs_multi_buffer_max_abs", "deepgemm_vs_multi_buffer_rel",
                          "deepgemm_equals_multi_buffer"}
    assert notes["deepgemm_vs_multi_buffer_rel"]["power_law/24"] < 1e-2
    assert len(fake_dg.calls) == 2 * 3  # fc1 + fc2 per op call: the first call, then one per round


def test_the_padded_op_reads_nothing_back_outside_the_gemm(fake_dg, monkeypatch):
    """One buffer: nothing between the sort and the combine reads a device value (the height is padded_height, the
    layout comes from offs on the device; any map, no identity check). The stand-in's own reads (it loops on the
    host) are not counted. A [local | slot] split reads its section heights back once, and nothing else."""
    T = 33
    q13, s13, q2, s2 = _experts(8)
    x = torch.randn(T, H).to(torch.bfloat16)
    ids, w = _routing(T, True, 10)
    bidx, row = mc.identity_map(E, "cpu")
    perm, offs, _ = mc.sort_by_expert(ids, E)
    rows_A = torch.div(perm, K, rounding_mode="floor")
    reads, inside = [], []
    real_gemm = fake_dg.m_grouped_fp8_gemm_nt_contiguous

    def gemm(*a, **k):
        inside.append(1)
        try:
            return real_gemm(*a, **k)
        finally:
            inside.pop()
    monkeypatch.setattr(fake_dg, "m_grouped_fp8_gemm_nt_contiguous", gemm)
    def counting(name):
        real = getattr(torch.Tensor, name)

        def read(t, *a):
            if not inside:
                reads.append(name)
            return real(t, *a)
        return read
    for name in ("item", "tolist", "__int__", "__bool__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    y_MH, _, dest_A = mdg.routed_mlp(x, ids, [q13], [q2], bidx, row, w13_scale_sources=[s13],
                                     w2_scale_sources=[s2], up_first=False, act=mc.silu_mul_quant)
    split_idx, split_row = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([0, 1, 0, 1, 2])
    mdg.routed_mlp(x, ids, [q13[:2], q13[2:]], [q2[:2], q2[2:]], split_idx, split_row,
                   w13_scale_sources=[s13[:2], s13[2:]], w2_scale_sources=[s2[:2], s2[2:]], up_first=False,
                   act=mc.silu_mul_quant)
    monkeypatch.undo()
    assert reads == ["tolist"], reads  # one buffer: none; the split: its section heights, once
    assert y_MH.shape == (dgl.padded_height(T * K, E), H) and dest_A.shape == (T * K,)


def test_a_split_makes_no_tensor_from_host_values_per_call_and_gathers_before_it_waits(fake_dg, monkeypatch):
    """A [local | slot] split builds its section constants once per device (a tensor made from host values on a GPU is
    a pageable copy that waits for all queued work: a full sync per MoE layer), and queues the quantisation and the
    gather before the host waits for the section heights (so the GPU has work while the host launches the GEMMs)."""
    T = 40
    q13, s13, q2, s2 = _experts(9)
    x = torch.randn(T, H).to(torch.bfloat16)
    ids, _ = _routing(T, False, 11)
    split_idx, split_row = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([0, 1, 0, 1, 2])
    kw = dict(w13_scale_sources=[s13[:2], s13[2:]], w2_scale_sources=[s2[:2], s2[2:]], up_first=False,
              act=mc.silu_mul_quant)
    mdg._SECTION_CONSTANTS.clear()
    y_first = mdg.routed_mlp(x, ids, [q13[:2], q13[2:]], [q2[:2], q2[2:]], split_idx, split_row, **kw)[0]
    events = []
    real_tensor, real_rows = torch.tensor, dgl.padded_source_rows
    real_tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch, "tensor", lambda *a, **k: events.append("tensor") or real_tensor(*a, **k))
    monkeypatch.setattr(dgl, "padded_source_rows", lambda *a: events.append("gather") or real_rows(*a))
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: events.append("wait") or real_tolist(t))
    y_again = mdg.routed_mlp(x, ids, [q13[:2], q13[2:]], [q2[:2], q2[2:]], split_idx, split_row, **kw)[0]
    monkeypatch.undo()
    assert "tensor" not in events and events.count("wait") == 1, events
    assert events.index("gather") < events.index("wait"), events
    assert torch.equal(torch.nan_to_num(y_first), torch.nan_to_num(y_again))


def test_moe_op_bench_adds_deepgemm_only_when_it_imports(monkeypatch, tmp_path):
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import bench_moe_op_vs_trtllm as bench
    monkeypatch.setenv("DWDP_DEEPGEMM_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "deep_gemm", None)
    use, why = bench.deepgemm_wanted("auto", ["multi_buffer", "contiguous"])
    assert not use and "not importable" in why
    assert bench.deepgemm_wanted("off", ["multi_buffer"]) == (False, "--deepgemm off")
    for mode, paths in (("on", ["multi_buffer"]), ("auto", ["multi_buffer", "deepgemm"])):
        with pytest.raises(SystemExit, match="deepgemm path was asked for.*deepgemm_build.sh"):
            bench.deepgemm_wanted(mode, paths)
    monkeypatch.setitem(sys.modules, "deep_gemm", FakeDeepGEMM())
    monkeypatch.setattr(FakeDeepGEMM, "__file__", str(tmp_path / "deep_gemm" / "__init__.py"), raising=False)
    use, why = bench.deepgemm_wanted("auto", ["multi_buffer"])
    assert use and why.startswith("deep_gemm stand-in from")


def test_no_tokens_gives_an_empty_result_without_a_gemm(fake_dg):
    q13, s13, q2, s2 = _experts(11)
    bidx, row = mc.identity_map(E, "cpu")
    y = mc.routed_experts_forward(torch.zeros(0, H).to(torch.bfloat16), torch.zeros(0, K, dtype=torch.long),
                                  torch.zeros(0, K), [q13], [q2], bidx, row, gemm="deepgemm",
                                  w13_scale_sources=[s13], w2_scale_sources=[s2])
    assert y.shape == (0, H) and y.dtype == torch.bfloat16 and fake_dg.calls == []
