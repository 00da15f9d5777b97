"""`dwdp calibrate`'s peer-copy records (calibrate/peer.py) and interference (calibrate/interference.py) pinned
against fake timers whose answers are known analytically: each pair's link rate, a slice size's rate, a source
shared by N destinations, a group pull slowed by a known factor, compute and copy slowing each other only while
they overlap. GB/s = bytes / ms / 1e6."""
from types import SimpleNamespace

import pytest

from dwdp_trtllm.calibrate import interference as itf
from dwdp_trtllm.calibrate import peer
from dwdp_trtllm.core.copy_plan import ExpertLayout


class _Links:
    """Pull rate (GB/s) of dst <- src: 100 + 10 x src + dst, read from the plan itself (its destination and its
    ops' source); cut in slices: x 0.5 at 1 MiB, x 0.8 at 4 MiB; N destinations on one source share it (each at
    1 / N); a group pull (every rank pulling) is 1.5x slower than the pair rate, rank 1's 1.6x (the slowest)."""

    def __init__(self, ranks):
        self.ranks = ranks

    def rate(self, plan):
        (src,) = {op.source_rank for op in plan.ops}
        r = 100.0 + 10 * src + plan.dwdp_rank
        if plan.sliced:
            r *= {1 << 20: 0.5, 4 << 20: 0.8}[plan.ops[0].nbytes]
        return r

    def time_pulls(self, jobs):
        assert all(d == p.dwdp_rank for d, p in jobs)
        srcs = {op.source_rank for _, p in jobs for op in p.ops}
        if len(jobs) == self.ranks and len(jobs) > 1:  # the whole group at once
            # (sliced: only the 1 MiB slices the tests ask for have a rate; any other slice size is a bug)
            return [p.total_bytes / (100.0 * ({1 << 20: 0.5}[max(op.nbytes for op in p.ops)] if p.sliced else 1.0)
                                     * 1e6) * (1.6 if d == 1 else 1.5) for d, p in jobs]
        if len(jobs) > 1:  # many to one
            assert len(srcs) == 1
            return [p.total_bytes / (self.rate(p) / len(jobs) * 1e6) for d, p in jobs]
        (d, p), = jobs
        return [p.total_bytes / (self.rate(p) * 1e6)]


def test_pair_bandwidth_every_ordered_pair():
    recs = peer.pair_bandwidth(_Links(3), 64 << 20)
    assert recs == [{"src": s, "dst": d, "gbps": pytest.approx(100 + 10 * s + d, rel=1e-12)}
                    for s in range(3) for d in range(3) if s != d]


def test_slice_sweep_and_its_efficiency():
    sweep = peer.slice_sweep(_Links(2), 64 << 20, (0, 1 << 20, 4 << 20))
    assert sweep == [(0, pytest.approx(101.0, rel=1e-12)), (1 << 20, pytest.approx(50.5, rel=1e-12)),
                     (4 << 20, pytest.approx(80.8, rel=1e-12))]
    keys = peer.summary_keys(peer.pair_bandwidth(_Links(3), 1 << 26), sweep, [])
    assert keys["peer_copy_gbps"] == pytest.approx(111.0)  # median of 101, 102, 110, 112, 120, 121
    assert keys["slice_efficiency"] == [[1 << 20, pytest.approx(0.5)], [4 << 20, pytest.approx(0.8)]]
    assert "contention_slowdown" not in keys
    assert peer.summary_keys([], [(1 << 20, 50.0)], []) == {}  # no one-op pull: no efficiency


def test_many_to_one_slowdown_is_the_number_of_destinations():
    recs = peer.many_to_one(_Links(4), 32 << 20, (0, 1 << 20))
    r, sliced = recs
    assert sliced["alone_gbps"] == pytest.approx(50.5, rel=1e-12) and sliced["slowdown"] == pytest.approx(3.0)
    # 3 destinations share rank 0: the slowest (dst 1, 101 / 3 GB/s) against dst 1 alone (101 GB/s)
    assert r["destinations"] == 3 and r["slice_bytes"] == 0
    assert r["alone_gbps"] == pytest.approx(101.0) and r["together_gbps"] == pytest.approx(101.0 / 3)
    assert r["slowdown"] == pytest.approx(3.0)


def test_group_pull_slowdown_over_the_slice_sizes_own_rate():
    t = _Links(4)
    layout = ExpertLayout(("w1", "w2"), (3 << 20, 5 << 20))  # 8 MiB per expert
    groups = peer.group_pull(t, layout, 16, (0, 1 << 20), 100.0, {0: 80.0, 1 << 20: 50.0})
    # 16 experts over 4 ranks: each pulls the other 12 experts' 8 MiB; the fake's slowest rank (1) takes 1.6x what
    # the rate 100 (one op: the pair's, not a slice entry) or 50 (1 MiB slices) gives: slowdown 1.6 both ways
    assert [g["slice_bytes"] for g in groups] == [0, 1 << 20] and all(g["ranks"] == 4 for g in groups)
    assert [g["bytes_per_rank"] for g in groups] == [12 * (8 << 20)] * 2
    assert [g["slowdown"] for g in groups] == pytest.approx([1.6, 1.6], rel=1e-12)
    assert groups[0]["max_ms"] == pytest.approx(12 * (8 << 20) / (100.0 * 1e6) * 1.6)
    # the ideal at the pair's one-op rate when the slice size has no rate of its own: the slices' own 0.5
    # efficiency is then counted as contention (1.6 / 0.5)
    fallback = peer.group_pull(t, layout, 16, (1 << 20,), 100.0, {})
    assert fallback[0]["slowdown"] == pytest.approx(3.2, rel=1e-12)


def test_contention_keys_prefer_the_planners_slice_and_floor_at_one():
    groups = [{"slice_bytes": 0, "slowdown": 2.5}, {"slice_bytes": 1 << 20, "slowdown": 1.4},
              {"slice_bytes": peer.PLANNER_SLICE, "slowdown": 1.2}, {"slice_bytes": 8 << 20, "slowdown": 1.1}]
    assert peer.summary_keys([], [], groups)["contention_slowdown"] == {"unsliced": 2.5, "sliced": 1.2}
    no_default = [g for g in groups if g["slice_bytes"] != peer.PLANNER_SLICE]
    assert peer.summary_keys([], [], no_default)["contention_slowdown"] == {"unsliced": 2.5, "sliced": 1.4}
    assert peer.summary_keys([], [], [{"slice_bytes": 0, "slowdown": 0.9}])["contention_slowdown"] == {"unsliced": 1.0}
    assert peer.PLANNER_SLICE == 2 << 20


class _Overlap:
    """Beside a pull of P ms, K ms of compute take K + min(K, P) x (S - 1) and the pull P + min(K, P) x (C - 1)."""
    S, C, GBPS, ranks = 1.2, 1.5, 400.0, 2

    def __init__(self):
        self.pulls = []

    def time_pulls(self, jobs):
        self.pulls.append(jobs[0][1].total_bytes)
        return [p.total_bytes / (self.GBPS * 1e6) for _, p in jobs]

    def time_compute(self, rank, compute, calls):
        return compute.ms * calls

    def time_with_compute(self, jobs, compute, calls):
        k, p = compute.ms * calls, jobs[0][1].total_bytes / (self.GBPS * 1e6)
        both = min(k, p)
        return [p + both * (self.C - 1)], k + both * (self.S - 1)


def test_a_long_kernel_gets_a_longer_pull_in_whole_slices_up_to_the_cap():
    t, nbytes, s = _Overlap(), 64 << 20, 2 << 20
    one_pull = nbytes / (t.GBPS * 1e6)
    kernel = SimpleNamespace(ms=one_pull * 2.6)  # 2.6 pulls long: 166.4 MiB -> 84 slices of 2 MiB = 168 MiB
    comp, copy = itf.phase_interference(t, kernel, nbytes, s, max_bytes=1 << 30)
    assert t.pulls == [nbytes, 84 * s]
    # 168 MiB pull = 2.625 kernel... lengths 168/160 of one call: one call; overlap min(K, P) = K
    k, p = kernel.ms, 84 * s / (t.GBPS * 1e6)
    assert comp == pytest.approx((k + k * 0.2) / k) and copy == pytest.approx((p + k * 0.5) / p)
    capped = _Overlap()
    itf.phase_interference(capped, kernel, nbytes, s, max_bytes=100 << 20)  # the cap: 100 MiB
    assert capped.pulls == [nbytes, 100 << 20]
    small_cap = _Overlap()
    itf.phase_interference(small_cap, kernel, nbytes, s, max_bytes=1 << 20)  # a cap below the pull: the pull
    assert small_cap.pulls == [nbytes, nbytes]
    unsliced = _Overlap()
    itf.phase_interference(unsliced, kernel, nbytes, 0, max_bytes=1 << 30)  # one op: whole pulls of nbytes
    assert unsliced.pulls == [nbytes, 3 * nbytes]


def test_a_short_kernel_is_repeated_to_the_pulls_length():
    t, nbytes = _Overlap(), 64 << 20
    one_pull = nbytes / (t.GBPS * 1e6)
    kernel = SimpleNamespace(ms=one_pull / 3.4)  # 3 calls (round(3.4)) beside the one pull
    comp, copy = itf.phase_interference(t, kernel, nbytes, 2 << 20)
    k = 3 * kernel.ms
    assert t.pulls == [nbytes] and comp == pytest.approx(1.2) and copy == pytest.approx((one_pull + k * 0.5) / one_pull)


def test_interference_by_phase_reads_below_one_as_one():
    class _Fast(_Overlap):
        S, C = 0.9, 1.3

    t = _Fast()
    kernel = SimpleNamespace(ms=(64 << 20) / (t.GBPS * 1e6))
    comp, copy = itf.interference_by_phase(t, {"gemm": kernel, "attention_core": kernel}, 64 << 20, 2 << 20)
    assert comp == {"gemm": 1.0, "attention_core": 1.0}
    assert copy == {"gemm": pytest.approx(1.3), "attention_core": pytest.approx(1.3)}
    assert itf.MAX_PULL_BYTES == 8 << 30 and itf.MEMORY_BOUND_BYTES == 256 << 20


class _Rank0PullsFrom1(_Overlap):
    """_Overlap that also checks the setting: rank 0 computes while it pulls from rank 1 (into rank 0), in the
    slices asked (the pulls' slicing recorded)."""

    def __init__(self):
        super().__init__()
        self.sliced = []

    def _check(self, jobs):
        ((dest, plan),) = jobs
        assert dest == 0 and plan.dwdp_rank == 0 and {op.source_rank for op in plan.ops} == {1}
        self.sliced.append(plan.sliced)

    def time_pulls(self, jobs):
        self._check(jobs)
        return super().time_pulls(jobs)

    def time_compute(self, rank, compute, calls):
        assert rank == 0
        return super().time_compute(rank, compute, calls)

    def time_with_compute(self, jobs, compute, calls):
        self._check(jobs)
        return super().time_with_compute(jobs, compute, calls)


@pytest.mark.parametrize("kernel_over_pull", [0.3, 2.6])
def test_rank_0_computes_while_pulling_from_rank_1_in_the_slices_asked(kernel_over_pull):
    t, nbytes, s = _Rank0PullsFrom1(), 64 << 20, 2 << 20
    kernel = SimpleNamespace(ms=nbytes / (t.GBPS * 1e6) * kernel_over_pull)
    comp, copy = itf.interference_by_phase(t, {"gemm": kernel}, nbytes, s, max_bytes=100 << 20)
    assert t.sliced and all(t.sliced)
    assert t.pulls[0] == nbytes
    if kernel_over_pull > 1:
        assert t.pulls[1] == 100 << 20  # max_bytes passed through: 168 MiB capped at 100, not at the default 8 GiB
        # the capped pull (100 MiB) overlaps only part of the 166.4 MiB-long kernel
        assert comp["gemm"] == pytest.approx(1 + 0.2 * 100 / (2.6 * 64), rel=1e-9)
    else:
        assert comp["gemm"] == pytest.approx(1.2)


def test_memory_bound_phase_adds_two_seeded_bf16_operands_into_one_buffer():
    """The memory-bound phase on the CPU (the same code the GPU runs): operands of `nbytes` each (BF16: nbytes / 2
    elements), drawn from a generator seeded 0 (every rank and run times the same data), and each call writes x + y
    into one preallocated output (a timed call allocates nothing)."""
    import torch

    nbytes = 4096
    fn = itf.memory_bound_fn(torch.device("cpu"), nbytes)
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(nbytes // 2, generator=g).to(torch.bfloat16)
    y = torch.randn(nbytes // 2, generator=g).to(torch.bfloat16)
    out = fn()
    assert out.dtype == torch.bfloat16 and out.numel() * out.element_size() == nbytes
    assert torch.equal(out, x + y)
    again = fn()
    assert again.data_ptr() == out.data_ptr() and torch.equal(again, x + y)
