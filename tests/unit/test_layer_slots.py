"""prefetcher.LayerSlots on CPU (real CopyScheduler, peers simulated by local tensors): whatever order a forward runs
its MoE layers in (the trunk, then one-model MTP's layer repeated once per draft step; a forward that stops early),
every acquire reads exactly that layer's fetched experts (bit-exact), a repeated layer is read again without a copy
once seen, a skipped tail costs no copy on demand, and with neither it issues the Prefetcher's copies (p + S into p's
slot)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from dwdp_trtllm.core.copy_plan import ExpertLayout, build_copy_plan
from dwdp_trtllm.core.copy_scheduler import CopyScheduler
from dwdp_trtllm.core.prefetcher import RECENT_ISSUES, LayerSlots

sys.path.insert(0, str(Path(__file__).parent))
from test_copy_scheduler_cpu import World  # noqa: E402  (every rank's exported buffers, random bytes per expert)

pytestmark = pytest.mark.timeout(900)

L = 5  # positions 0..3: the trunk's MoE layers; 4: the checkpoint's MTP layer (DeepSeek-V3: one)


def forward(slots: LayerSlots, world: World, bufs, rank: int, seq) -> None:
    """One forward: begin (the manager does it at the first position's bind), then acquire/check/release each."""
    slots.begin_forward()
    for pos in seq:
        s = slots.acquire(pos)
        world.check_slot(rank, pos, bufs[s])  # the bytes the kernel would read are this layer's
        slots.release(pos)


@pytest.fixture
def ring():
    layout = ExpertLayout(("w13", "w2", "s"), (3000, 1501, 37))
    world = World(3, 9, layout, range(L), redundant=1)
    rank = 2
    plan = build_copy_plan(world.placement, layout, rank, sliced=True, slice_bytes=700)

    def make(S: int):
        bufs = world.slots(rank, S)
        sched = CopyScheduler(plan, src_buffer=lambda p, layer, t: world.bufs[(p, layer, t)],
                              dst_buffer=lambda s, t: bufs[s][t], layers=range(L), num_slots=S, device="cpu")
        ls = LayerSlots(sched, num_layers=L, num_slots=S, device=torch.device("cpu"), timeout_s=30)
        make.open.append(sched)
        return ls, bufs
    make.open = []
    yield make, world, rank
    for sched in make.open:
        sched.close()


@pytest.mark.parametrize("S", [2, 3])
def test_in_order_forwards_issue_the_prefetchers_copies(ring, S):
    make, world, rank = ring
    ls, bufs = make(S)
    ls.start()
    for _ in range(3):
        forward(ls, world, bufs, rank, range(L))
    # the sequence-numbered ring: execution n in slot n % S, n + S issued when n is released
    ring_issues = [(n % L, n % S) for n in range(3 * L + S)]
    assert list(ls.recent) == ring_issues and ls.copies == len(ring_issues) and ls.misses == 0  # S, one per release
    for _ in range(60):  # a serving process: its record of issues stays bounded
        forward(ls, world, bufs, rank, range(L))
    assert ls.copies == 63 * L + S and len(ls.recent) == RECENT_ISSUES


@pytest.mark.parametrize("mtp", [1, 3])
@pytest.mark.parametrize("S", [2, 3])
def test_mtp_layer_repeated_per_draft_step(ring, mtp, S):
    """upstream's recipe runs context servers with mtp 1 and 3 (examples/dwdp/dwdp_reproduce.yaml @ d897f44d); one-model
    MTP runs `mtp_layers[0]` once per draft step (speculative/mtp.py @ 23ee85ee, MTPEagleWorker.forward)."""
    make, world, rank = ring
    ls, bufs = make(S)
    ls.start()
    seq = list(range(L - 1)) + [L - 1] * mtp
    forward(ls, world, bufs, rank, seq)
    first_misses = ls.misses
    assert first_misses == (1 if mtp > 1 else 0)  # the second run of the MTP layer was not predicted yet
    forward(ls, world, bufs, rank, seq)
    assert ls.misses == first_misses  # learned: later forwards keep the MTP layer's slot across its runs
    before = ls.copies
    for _ in range(3):
        forward(ls, world, bufs, rank, seq)
    assert ls.misses == first_misses
    assert ls.copies - before == 3 * L  # steady state: one copy per layer per forward, none for the repeats


def test_skipped_tails_and_changing_forwards_stay_bit_exact(ring):
    make, world, rank = ring
    ls, bufs = make(2)
    ls.start()
    seqs = [[0, 1], [0, 1], [0, 1], [0, 1, 2, 3, 4, 4, 4], [0, 1, 2], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0],
            [0, 1, 2, 3, 4, 4]]
    misses, issued = [], []
    for seq in seqs:
        n = ls.copies
        forward(ls, world, bufs, rank, seq)  # bit-exact at every acquire
        misses.append(ls.misses)
        issued.append(ls.copies - n)
    # a stop is never predicted (full forwards are the usual case): each stopped forward issued layers 2, 3, which did
    # not run, and the next forward's start re-primed layers 0, 1; never a copy on demand
    assert issued[:3] == [2, 4, 4] and misses[2] == 0
    assert misses[6] == misses[5]  # a repeated full forward is predicted from the previous one
    assert misses[-1] > misses[2]  # forwards that left the record did need copies on demand (and stayed exact)


def test_mtp_repeat_count_survives_a_stopped_forward(ring):
    """A forward that stops early between MTP forwards (e.g. a short warmup) does not make the next MTP forward
    forget that the MTP layer runs three times: its slot is kept across the runs, no copy on demand."""
    make, world, rank = ring
    ls, bufs = make(2)
    ls.start()
    mtp3 = [0, 1, 2, 3, 4, 4, 4]
    for seq in (mtp3, [0, 1], mtp3, [0], mtp3):
        forward(ls, world, bufs, rank, seq)
    assert ls.misses == 1  # the first forward's second run of the MTP layer only


def test_misuse_is_refused_by_name(ring):
    make, world, rank = ring
    ls, bufs = make(2)
    ls.start()
    ls.acquire(0)
    with pytest.raises(RuntimeError, match="while MoE position 0 is bound"):
        ls.acquire(1)
    with pytest.raises(RuntimeError, match="forward start while MoE position 0 is bound"):
        ls.begin_forward()
    with pytest.raises(RuntimeError, match=r"release\(1\) without acquire\(1\)"):
        ls.release(1)
    ls.release(0)
    with pytest.raises(ValueError, match="out of range"):
        ls.acquire(L)
    ls.drain()
