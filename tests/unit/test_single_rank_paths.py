"""One rank owns every expert (DEP ep_size 1, DWDP dwdp_size 1): no collective, no merge copy, same answer.

The end-to-end case runs reference, DEP and DWDP on one CPU rank; the in-process case checks that DWDP's GEMM
reads the runtime's local buffers themselves (no gather of the whole layer into a merged buffer) when the
rank holds all experts."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dwdp_trtllm.engine.dwdp import DwdpExperts
from dwdp_trtllm.engine.moe_compute import GEMM_PATHS, register_gemm, routed_experts_forward, identity_map
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.core.runtime import ExpertSources

from test_engine_equivalence import _cfg, _check, _requests  # noqa: E402  (tests/unit is on sys.path)
from dwdp_trtllm.engine.launcher import run_modes


@pytest.mark.timeout(900)
def test_one_rank_dep_and_dwdp_match_the_reference():
    cfg = _cfg(1, {"dwdp_size": 1, "gemm": "merge"})
    reqs = _requests(1, 3, seed=7)
    out = run_modes(cfg, ["reference", "dep", "dwdp"], reqs, collect_outputs=True)
    _check(out, reqs)
    dep = out["dep"][0]
    assert all(p not in ("all_to_all", "sync_wait") for it in dep.iterations for p, *_ in it.phases), \
        "DEP on one rank ran a collective"
    assert out["dwdp"][0].copy_bytes == 0


def test_dwdp_all_local_reads_the_local_buffers_in_place():
    spec = get_model("tiny")
    E, H = spec.num_experts, spec.hidden_size
    I = spec.moe_intermediate
    g = torch.Generator().manual_seed(0)
    local = {"w13": torch.randn(E, 2 * I, H, generator=g), "w2": torch.randn(E, H, I, generator=g)}
    slot = {"w13": torch.empty(0, 2 * I, H), "w2": torch.empty(0, H, I)}
    seen = []

    def spy(a, offs, weights, buf_idx, row, scales=None):
        seen.append([w.data_ptr() for w in weights])
        return GEMM_PATHS["merge"].fn(a, offs, weights, buf_idx, row, scales)
    if "spy_all_local" not in GEMM_PATHS:
        register_gemm("spy_all_local", spy)
    rt = SimpleNamespace(spec=spec, cfg=SimpleNamespace(weight_dtype="float32"), device=torch.device("cpu"), local_ids=list(range(E)), composite=None,
                         prefetcher=SimpleNamespace(acquire=lambda m: 0, release=lambda m: None, timer=None),
                         local_tensor=lambda m, n: local[n],
                         expert_sources=lambda m, s: ExpertSources(
                             {n: [local[n], slot[n]] for n in local}, torch.zeros(E, dtype=torch.int32),
                             torch.arange(E, dtype=torch.int32)))
    backend = DwdpExperts(rt, gemm="spy_all_local")
    assert backend.all_local
    x = torch.randn(11, H, generator=g)
    ids = torch.stack([torch.randperm(E, generator=g)[:spec.top_k] for _ in range(11)])
    w = torch.rand(11, spec.top_k, generator=g)
    y = backend.forward(0, x, ids, w)
    assert seen == [[local["w13"].data_ptr()], [local["w2"].data_ptr()]]  # one buffer each, the local one itself
    want = routed_experts_forward(x, ids, w, [local["w13"]], [local["w2"]], *identity_map(E, "cpu"), gemm="reference")
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
