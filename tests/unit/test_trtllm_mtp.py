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
            assert got["unit_calls"] == runs, got["unit_calls"]
        if era == "hooks":  # the hooks saw the MTP layer once per draft step
            first = [("wait", 0), ("release", 0), ("wait", 1), ("release", 1), ("wait", 2), ("release", 2)]
            assert got["trace"][:6 + 2 * mtp] == first + [("wait", 3), ("release", 3)] * mtp
        # only the first repeat of the MTP layer (not yet seen) is fetched on demand; a stopped forward's next start
        # re-primes the first layers, and the repeat count is remembered across the stopped forwards
        assert got["misses"] == (1 if mtp > 1 else 0), got["misses"]
        # ConfigurableMoE.forward_precomputed_route bypasses forward_impl and the hooks: refused on DWDP layers by name
        assert "forward_precomputed_route (layer 3) is not supported on DWDP layers" in (got["precomputed_refused"] or "")
        assert_transport_released(got, r)


def test_precomputed_route_is_refused_only_where_the_class_has_it():
    from dwdp_trtllm.integration.moe_hooks import PrecomputedRouteRefused, refuse_precomputed_route

    class WithRoute(torch.nn.Linear):
        def forward_precomputed_route(self, x, ids, scales):
            return x

    a, b = WithRoute(2, 2), torch.nn.Linear(2, 2)
    assert refuse_precomputed_route([a, b], [7, 8]) == 1
    with pytest.raises(PrecomputedRouteRefused, match=r"WithRoute.forward_precomputed_route \(layer 7\).*forward\(\)"):
        a.forward_precomputed_route(torch.zeros(1, 2), None, None)
    assert not hasattr(b, "forward_precomputed_route")
    assert torch.equal(WithRoute.forward_precomputed_route(a, torch.ones(1), None, None), torch.ones(1))  # class kept
