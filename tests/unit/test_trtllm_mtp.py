"""One-model MTP and forwards that stop early on DWDP context ranks, in the fake disaggregated world
(test_trtllm_fake_world.py: fake MPI world, fake tensorrt_llm tree, our integration activated from its YAML).

The fake model (tests/fakes/tensorrt_llm/_torch/models/modeling_tiny.py) mirrors upstream's one-model MTP: the
checkpoint's MTP layer is one more ConfigurableMoE (layer_idx num_hidden_layers + i, models/modeling_speculative.py
@ b35ac1b6) run once per draft step inside model.forward (speculative/mtp.py @ 23ee85ee, MTPEagleWorker.forward),
1 or 3 steps as upstream's DWDP recipe sets `mtp` (examples/dwdp/dwdp_reproduce.yaml @ d897f44d). FAKE_SKIP makes
some forwards stop after the first trunk layers (no MTP step). The MTP layer is a DWDP layer like the others (its
experts split over the group, fetched into the slots). Before the manager was keyed by layer, the first repeated
MTP layer raised "DWDP prefetch order broken" and a forward after a stopped one raised at its start."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_trtllm_fake_world import assert_transport_released, run_world  # noqa: E402

STEPS, SKIP = 5, {1: 1, 3: 2}  # step 1 stops after 1 trunk layer, step 3 after 2


@pytest.mark.slow  # a multi-process fake world per case (~1-2 min each on 2 cores)
@pytest.mark.parametrize("era,quant,gemm,mtp", [("lifecycle", "bf16", "multi_buffer", 3),
                                                ("hooks", "fp8_block_scales", "composite_view", 1)])
def test_mtp_and_skipped_tails_match_the_reference(tmp_path, era, quant, gemm, mtp):
    outs, ref = run_world(tmp_path, era, quant, dwdp={"gemm": gemm}, steps=STEPS,
                          env_extra={"FAKE_MTP": str(mtp), "FAKE_SKIP": ",".join(f"{s}:{n}" for s, n in SKIP.items())})
    full = [s for s in range(STEPS) if s not in SKIP]
    for r, got in enumerate(outs):
        assert got["gemm"] == gemm, got["gemm_reason"]
        assert got["layer_ids"] == [3, 4, 5, 6]  # the MTP layer (num_hidden_layers + 0) is DWDP position 3
        for key, y in got["outs"].items():
            assert torch.equal(y, ref[key]), f"rank {r} step {key[1]}: max diff {(y - ref[key]).abs().max()}"
        if gemm == "multi_buffer":  # our unit computed every run of every layer: trunk layers as far as each ran
            runs = [sum(1 for s in range(STEPS) if SKIP.get(s, 3) > i) for i in range(3)] + [mtp * len(full)]
            runs[0] += 1  # and layer 0 once more through forward_precomputed_route, after the forwards
            assert got["unit_calls"] == runs, got["unit_calls"]
        if era == "hooks":  # the hooks saw the MTP layer once per draft step
            first = [("wait", 0), ("release", 0), ("wait", 1), ("release", 1), ("wait", 2), ("release", 2)]
            assert got["trace"][:6 + 2 * mtp] == first + [("wait", 3), ("release", 3)] * mtp
        # only the first repeat of the MTP layer (not yet seen) is fetched on demand; a stopped forward's next start
        # re-primes the first layers, and the repeat count is remembered across the stopped forwards
        assert got["misses"] == (1 if mtp > 1 else 0), got["misses"]
        # ConfigurableMoE.forward_precomputed_route bypasses forward_impl and the hooks: bound by our wrapper, it
        # computes on the layer's own experts (before: refused on every DWDP layer, per call)
        assert got["precomputed_refused"] is None, got["precomputed_refused"]
        assert torch.equal(got["precomputed_out"], ref[("precomputed", r)])
        assert_transport_released(got, r)


def test_precomputed_route_is_bound_like_forward_impl():
    """route_precomputed wraps forward_precomputed_route where the class has it: wait_and_bind(owner, layer) before,
    record_compute_and_prefetch_next(layer) after, once even when it calls itself; nothing recorded when it raises;
    a module without the method is left alone and the class keeps its own."""
    from dwdp_trtllm.integration.moe_hooks import route_precomputed
    seen = []

    class Manager:
        def wait_and_bind(self, owner, layer):
            seen.append(("wait", owner, layer))

        def record_compute_and_prefetch_next(self, layer):
            seen.append(("release", layer))

    class WithRoute(torch.nn.Linear):
        def forward_precomputed_route(self, x, ids, scales, nested=False):
            seen.append(("route", ids))
            if ids == "boom":
                raise RuntimeError("scheduler failed")
            return self.forward_precomputed_route(x, "inner", scales) if nested else x

    a, b, owner = WithRoute(2, 2), torch.nn.Linear(2, 2), object()
    assert route_precomputed(Manager(), [a, b], [owner, b], [7, 8]) == 1
    x = torch.ones(1, 2)
    assert a.forward_precomputed_route(x, "ids", None, nested=True) is x
    assert seen == [("wait", owner, 7), ("route", "ids"), ("route", "inner"), ("release", 7)]
    seen.clear()
    with pytest.raises(RuntimeError, match="scheduler failed"):
        a.forward_precomputed_route(x, "boom", None)
    assert seen == [("wait", owner, 7), ("route", "boom")]
    assert not hasattr(b, "forward_precomputed_route")
    assert WithRoute.forward_precomputed_route(a, x, "plain", None) is x  # the class is untouched
