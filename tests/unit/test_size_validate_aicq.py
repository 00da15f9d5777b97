"""scripts/size_validate.py's aiconfigurator questions: its MoE-TP / attention-TP decode shapes pinned as `dwdp size`
flags, and the question asked the way aiconfigurator answers it (the most requests/s within the GPU budget)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from script_module import load_script  # noqa: E402  (tests/unit on sys.path)
from dwdp_trtllm.cli import build_parser


@pytest.fixture(scope="module")
def sv():
    return load_script("size_validate", "size_validate_aicq")


def _answer(decode: str, gpus: int, batch: int, prefill: str = "tp8pp1dp1etp1ep8") -> dict:
    return {"prefill": {"workers": 1, "gpus_per_worker": 8, "parallel": prefill, "batch_per_rank": 1},
            "decode": {"workers": 1, "gpus_per_worker": gpus, "parallel": decode, "batch_per_rank": batch}}


def test_aiconfigurators_decode_shapes_become_size_flags(sv):
    """tpApp1dpDetpEepF: attention TP A, MoE TP E (both of the 16-GPU answers), pinned as --gen-attn-tp A
    --gen-moe-tp E; an attention TP inside the server (neither 1 nor its size) is not priced: no ablation."""
    def flags(a):
        argv = sv.aicq_shape_argv(a)
        return None if argv is None else dict(zip(argv[::2], argv[1::2]))
    f = flags(_answer("tp1pp1dp8etp2ep4", 8, 6))
    assert (f["--gen-tp"], f["--gen-attn-tp"], f["--gen-moe-tp"], f["--gen-batch"]) == ("8", "1", "2", "6")
    f = flags(_answer("tp8pp1dp1etp2ep4", 8, 56, prefill="tp1pp1dp8etp1ep8"))
    assert (f["--gen-attn-tp"], f["--gen-moe-tp"], f["--dep-size"], f["--tp-size"]) == ("8", "2", "8", "0")
    assert flags(_answer("tp1pp1dp16etp1ep16", 16, 11))["--gen-moe-tp"] == "1"
    assert flags(_answer("tp4pp1dp2etp1ep8", 8, 6)) is None
    # every flag parses with dwdp size's own parser
    data = sv.aic_questions_data()
    for q in data["questions"]:
        argv = sv.aicq_shape_argv(q["answer"])
        if argv is not None:
            build_parser().parse_args(["size", *sv._override(sv.aicq_argv(q, data), argv)])


def test_max_rate_within_bisects_to_the_highest_rate_the_budget_answers(sv, monkeypatch):
    """A search that answers up to 13.3 req/s (a fake of size_outcomes, keyed on the --rate it is given): the
    bisection over [10, 20] in 4 steps (15 no, 12.5 yes, 13.75 no, 13.125 yes, asked as 13.12) keeps the highest
    answered rate and that rate's outcome."""
    asked = []

    def fake(argv, modes=("dep", "tp"), **kw):
        r = float(argv[argv.index("--rate") + 1])
        asked.append(r)
        return {m: SimpleNamespace(deployment=("d", r) if r <= 13.3 else None) for m in modes}
    monkeypatch.setattr(sv, "size_outcomes", fake)
    r, o = sv.max_rate_within(["--rate", "10"], "tp", 10.0, "at-lo", 20.0, steps=4)
    assert asked == [15.0, 12.5, 13.75, 13.12]
    assert r == pytest.approx(13.12) and o.deployment == ("d", 13.12)
    # nothing above the lower end answers: the lower end's own outcome
    monkeypatch.setattr(sv, "size_outcomes", lambda argv, modes=("tp",), **kw: {"tp": SimpleNamespace(deployment=None)})
    assert sv.max_rate_within(["--rate", "10"], "tp", 10.0, "at-lo", 20.0, steps=2) == (10.0, "at-lo")


def test_context_scaled_prices_only_that_modes_iterations_and_restores(sv):
    """The ablation hook: inside context_scaled("tp", f) the search's TP context iterations cost f x their price,
    DEP's are unchanged, and on exit the search prices as before; tp_static_ms is TpCost's one-request iteration
    under the question's stated routing and communication (dwdp size's own parser)."""
    import argparse
    from dwdp_trtllm.commands import size as sz
    from dwdp_trtllm.sizing import search as se
    from dwdp_trtllm.sizing.context_cost import Segments
    from dwdp_trtllm.sizing.tp_cost import TpCost
    data = sv.aic_questions_data()
    q = next(q for q in data["questions"] if q["isl"] == 8192 and q["total_gpus"] == 64)
    argv = sv.aicq_argv(q, data)
    ap = argparse.ArgumentParser()
    sz.add_parser(ap.add_subparsers())
    spec, probs = sz.problems(ap.parse_args(["size", *argv]))
    p = probs[0][1]
    seg = [Segments(((0, 8192, 8192),))]
    base = {m: se._costs(p, m, 8, 0)[1](None, seg * (1 if m == "tp" else 8)) for m in ("tp", "dep")}
    real = se._costs
    with sv.context_scaled("tp", 1.5):
        inside = {m: se._costs(p, m, 8, 0)[1](None, seg * (1 if m == "tp" else 8)) for m in ("tp", "dep")}
    assert se._costs is real
    assert inside["tp"] == pytest.approx(1.5 * base["tp"]) and inside["dep"] == pytest.approx(base["dep"])
    assert sv.tp_static_ms(argv, 8, 8192) == pytest.approx(TpCost(spec, "tp", 8).seconds(seg) * 1e3)
    assert spec.dep_comm == "allgather_reducescatter"  # the question's assumptions reached the spec
