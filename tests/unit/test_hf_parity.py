"""The engine against HuggingFace transformers' own implementations, on tiny random checkpoints built here.

Every family (tests/unit/hf_tiny.py) is written with save_pretrained, read back by the engine from its
config.json alone (model.checkpoint), and its final hidden states compared with transformers' on the same
tokens: in-process (reference mode) and through spawned ranks in reference, DEP and DWDP modes.
Lines starting "HF-PARITY" (pytest -s) are the family x mode table of docs/MODELS.md.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="HF parity tests need transformers (pip install -e .[dev])")

sys.path.insert(0, str(Path(__file__).parent))
from hf_tiny import FAMILIES, hf_hidden, make_checkpoint  # noqa: E402

from dwdp_trtllm.spec.config import load_bench_points  # noqa: E402
from dwdp_trtllm.engine.launcher import run_modes  # noqa: E402
from dwdp_trtllm.engine.loader import load_checkpoint  # noqa: E402
from dwdp_trtllm.engine.local_experts import LocalExperts  # noqa: E402
from dwdp_trtllm.engine.model import MoETransformer  # noqa: E402
from dwdp_trtllm.engine.records import Request, Segment  # noqa: E402
from dwdp_trtllm.engine.worker import request_token_ids  # noqa: E402
from dwdp_trtllm.spec.hf_config import spec_from_hf_config  # noqa: E402

#: fp32 on the CPU: max|x - x_hf| / max|x_hf| of the final hidden states
REL_TOL = 1e-5


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = {}
    for fam in FAMILIES:
        d = tmp_path_factory.mktemp(fam)
        out[fam] = (d, make_checkpoint(fam, d, seed=len(out)))
    return out


def _engine(spec, path) -> MoETransformer:
    dense, loader = load_checkpoint(path, spec, dtype=torch.float32, device="cpu")
    return MoETransformer(spec, dense, LocalExperts.from_loader(spec, loader, "float32", "cpu"), device="cpu",
                          dtype=torch.float32)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reference_matches_transformers(checkpoints, family):
    path, hf = checkpoints[family]
    spec = spec_from_hf_config(path)
    model = _engine(spec, path)
    ids = torch.randint(0, spec.vocab_size, (45,), generator=torch.Generator().manual_seed(7))
    got, ref = model.forward(ids, [Segment(0, 0, 45, True)]), hf_hidden(hf, ids)
    rel = _rel(got, ref)
    print(f"HF-PARITY {family} in-process {rel:.2e}")
    assert rel <= REL_TOL, f"{family}: relative error {rel:.2e} against transformers"


def test_yarn_and_latent_eps_are_what_makes_deepseek_match(checkpoints):
    """Negative controls: without YaRN, or with rms_norm_eps on the latent norms, DeepSeek-V3 is off."""
    path, hf = checkpoints["deepseek_v3"]
    spec = spec_from_hf_config(path)
    assert spec.rope_scaling is not None and spec.rope_scaling.factor == 40.0 and spec.rms_eps == 1e-3
    ids = torch.randint(0, spec.vocab_size, (45,), generator=torch.Generator().manual_seed(7))
    ref = hf_hidden(hf, ids)
    seg = [Segment(0, 0, 45, True)]
    no_yarn = _rel(_engine(dataclasses.replace(spec, rope_scaling=None), path).forward(ids, seg), ref)
    eps = _rel(_engine(dataclasses.replace(spec, latent_norm_eps=spec.rms_eps), path).forward(ids, seg), ref)
    assert no_yarn > 1e-2, no_yarn
    assert eps > 10 * REL_TOL, eps


@pytest.mark.slow  # DEP and DWDP ranks per family: 6-14 s each on 2 cores
@pytest.mark.timeout(900)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_modes_match_transformers(checkpoints, family):
    """reference, DEP and DWDP (2 ranks, dwdp_size 2, chunked prefill) from model.checkpoint alone."""
    path, hf = checkpoints[family]
    cfg = load_bench_points({"model": {"checkpoint": str(path), "dtype": "float32", "seed": 3},
                             "dwdp": {"dwdp_size": 2, "weight_dtype": "float32", "gemm": "reference"},
                             "workload": {"max_num_tokens": 40},
                             "run": {"ranks": 2, "warmup_iters": 0, "timeout_s": 120}})[1][0]
    reqs = [[Request(request_id=r * 100 + i, rank=r, isl=17 + 13 * i + 5 * r, arrival_s=0.0) for i in range(3)]
            for r in range(2)]
    out = run_modes(cfg, ["reference", "dep", "dwdp"], reqs, collect_outputs=True)
    spec = cfg.model.spec()
    for mode, results in out.items():
        hidden = {rid: h for res in results for rid, h in res.extra["hidden"].items()}
        assert sorted(hidden) == sorted(r.request_id for q in reqs for r in q), mode
        worst = 0.0
        for q in reqs:
            for r in q:
                ids = request_token_ids(spec.vocab_size, cfg.model.seed, r.request_id, r.isl)
                worst = max(worst, _rel(hidden[r.request_id], hf_hidden(hf, ids)))
        print(f"HF-PARITY {family} {mode} {worst:.2e}")
        assert worst <= REL_TOL, f"{family} {mode}: relative error {worst:.2e} against transformers"
