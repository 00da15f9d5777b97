"""RankScheduler: FCFS chunked prefill up to max_num_tokens, arrival gating, completion."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dwdp_trtllm.engine.records import Request, Segment
from dwdp_trtllm.spec.batching import RankScheduler


def req(i, isl, arrival=0.0):
    return Request(request_id=i, rank=0, isl=isl, arrival_s=arrival)


def test_packs_whole_requests_and_chunks_the_one_that_does_not_fit():
    s = RankScheduler([req(0, 300), req(1, 500), req(2, 200)], max_num_tokens=512)
    assert s.next_batch(0.0) == [Segment(0, 0, 300, True), Segment(1, 0, 212, False)]
    assert s.remaining_tokens() == 488
    assert s.next_batch(0.0) == [Segment(1, 212, 288, True), Segment(2, 0, 200, True)]
    assert s.done() and s.next_arrival_s() is None
    assert s.next_batch(0.0) is None


def test_a_request_longer_than_several_budgets_is_split_across_iterations():
    s = RankScheduler([req(7, 1000), req(8, 10)], max_num_tokens=384)
    assert s.next_batch(0.0) == [Segment(7, 0, 384, False)]
    assert s.next_batch(0.0) == [Segment(7, 384, 384, False)]
    assert s.next_batch(0.0) == [Segment(7, 768, 232, True), Segment(8, 0, 10, True)]
    assert s.next_batch(1.0) is None


def test_only_arrived_requests_are_eligible_and_fcfs_is_by_arrival():
    s = RankScheduler([req(0, 100, 5.0), req(1, 100, 0.5), req(2, 50, 5.0)], max_num_tokens=1000)
    assert s.next_arrival_s() == 0.5
    assert s.next_batch(0.1) == []  # nothing arrived: caller sleeps until next_arrival_s()
    assert s.next_batch(0.5) == [Segment(1, 0, 100, True)]
    assert s.next_batch(1.0) == [] and s.next_arrival_s() == 5.0
    assert s.next_batch(5.0) == [Segment(0, 0, 100, True), Segment(2, 0, 50, True)]
    assert s.next_batch(6.0) is None


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="max_num_tokens"):
        RankScheduler([req(0, 10)], 0)
    with pytest.raises(ValueError, match="duplicate request_id"):
        RankScheduler([req(0, 10), req(0, 20)], 8)
    with pytest.raises(ValueError, match="isl"):
        RankScheduler([req(0, 0)], 8)


@settings(max_examples=150, deadline=None)
@given(isls=st.lists(st.integers(1, 3000), min_size=1, max_size=20), mnt=st.integers(1, 4096),
       arrivals=st.lists(st.floats(0, 10, allow_nan=False), min_size=20, max_size=20), offline=st.booleans())
def test_every_token_scheduled_once_in_order_within_budget(isls, mnt, arrivals, offline):
    if offline:
        arrivals = [0.0] * len(arrivals)
    reqs = [req(i, n, arrivals[i]) for i, n in enumerate(isls)]
    s = RankScheduler(reqs, mnt)
    covered = {r.request_id: 0 for r in reqs}
    order, now, batches = [], 0.0, 0
    while (b := s.next_batch(now)) is not None:
        if not b:
            nxt = s.next_arrival_s()
            assert nxt is not None and nxt > now
            now = nxt
            continue
        batches += 1
        assert sum(g.length for g in b) <= mnt
        for g in b:
            r = reqs[g.request_id]
            assert r.arrival_s <= now
            assert g.start == covered[g.request_id] and g.length >= 1  # contiguous chunks from 0
            covered[g.request_id] += g.length
            assert g.is_last == (covered[g.request_id] == r.isl)
            if g.start == 0:
                order.append(g.request_id)
    assert covered == {r.request_id: r.isl for r in reqs}
    assert order == [r.request_id for r in sorted(reqs, key=lambda r: (r.arrival_s, r.request_id))]
    if offline:  # offline: every batch but the last is full
        assert batches == math.ceil(sum(isls) / mnt)


def test_without_chunked_prefill_whole_prompts_wait_for_the_next_iteration():
    """TensorRT-LLM's "skip chunking" branch (microBatchScheduler.cpp @ b8b7b782): FCFS whole requests while the
    next fits the budget; the one that does not fit is not cut (the chunked scheduler cut request 1 at 212)."""
    s = RankScheduler([req(0, 300), req(1, 500), req(2, 200)], max_num_tokens=512, chunked=False)
    assert s.next_batch(0.0) == [Segment(0, 0, 300, True)]  # 300 + 500 > 512: request 1 waits whole
    assert s.next_batch(0.0) == [Segment(1, 0, 500, True)]  # 500 + 200 > 512
    assert s.next_batch(0.0) == [Segment(2, 0, 200, True)]
    assert s.next_batch(0.0) is None


def test_max_batch_caps_the_requests_of_an_iteration_with_or_without_chunking():
    qs = [req(i, 100) for i in range(7)]
    for chunked in (True, False):
        s = RankScheduler(list(qs), max_num_tokens=10_000, max_batch=4, chunked=chunked)
        assert [g.request_id for g in s.next_batch(0.0)] == [0, 1, 2, 3]  # 700 tokens fit; 4 requests at most
        assert [g.request_id for g in s.next_batch(0.0)] == [4, 5, 6]
    s = RankScheduler([req(0, 300), req(1, 500)], max_num_tokens=512, max_batch=4)
    assert s.next_batch(0.0) == [Segment(0, 0, 300, True), Segment(1, 0, 212, False)]  # a chunk counts as one


def test_without_chunking_a_prompt_over_the_budget_is_refused():
    with pytest.raises(ValueError, match="exceeds max_num_tokens 512 without chunked prefill"):
        RankScheduler([req(0, 513)], max_num_tokens=512, chunked=False)
    s = RankScheduler([], max_num_tokens=512, chunked=False)
    with pytest.raises(ValueError, match="request 3: isl 600"):
        s.append(req(3, 600))
    with pytest.raises(ValueError, match="max_batch"):
        RankScheduler([], max_num_tokens=512, max_batch=0)


@settings(max_examples=150, deadline=None)
@given(mnt=st.integers(1, 4096), min_isl=st.integers(1, 600), extra=st.lists(st.integers(0, 900), min_size=1,
                                                                                max_size=40),
       chunked=st.booleans())
def test_no_iteration_holds_more_requests_than_the_bound(mnt, min_isl, extra, chunked):
    """max_requests_per_iteration bounds every batch the scheduler packs from prompts of at least min_isl tokens
    (all queued at once, no max_batch)."""
    from dwdp_trtllm.spec.batching import max_requests_per_iteration

    isls = [min_isl + e for e in extra]
    if not chunked:
        isls = [min(i, mnt) for i in isls]  # whole prompts only: longer than the budget is refused
        if min(isls) < min_isl:
            return
    s = RankScheduler([Request(i, 0, n, 0.0) for i, n in enumerate(isls)], mnt, None, chunked)
    bound = max_requests_per_iteration(mnt, min_isl, chunked)
    while (b := s.next_batch(0.0)):
        assert len(b) <= bound


@pytest.mark.parametrize("mnt, isl, chunked, want", [(16384, 8192, True, 3), (16385, 8192, True, 3),
                                                      (16384, 1024, True, 17), (16384, 8192, False, 2),
                                                      (1, 5, True, 1), (100, 30, False, 3)])
def test_the_bound_is_reached(mnt, isl, chunked, want):
    """A first prompt one token longer than the budget leaves a 1-token tail: the next iteration holds it, whole
    prompts of min_isl, and the first chunk of the next: the bound exactly (whole prompts: budget // isl of them)."""
    from dwdp_trtllm.spec.batching import max_requests_per_iteration

    assert max_requests_per_iteration(mnt, isl, chunked) == want
    first = mnt + 1 if chunked else isl
    reqs = [Request(0, 0, first, 0.0)] + [Request(i, 0, isl, 0.0) for i in range(1, 64)]
    s = RankScheduler(reqs, mnt, None, chunked)
    most = 0
    while (b := s.next_batch(0.0)):
        most = max(most, len(b))
    assert most == want
    with pytest.raises(ValueError, match="min_isl"):
        max_requests_per_iteration(mnt, 0)
