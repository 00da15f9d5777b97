"""Benchmark scripts' correctness verdicts (dwdp_trtllm.bench.checks)."""
from dwdp_trtllm.bench.checks import exit_code, failed_checks


def test_failed_checks_finds_every_kind_and_nothing_else(capsys):
    res = {"bulk": {"torch_GBps": 4000.0},
           "sliced": [{"size": 1, "graph_exact": True, "batch_exact": False}, {"size": 2, "exact": True}],
           "issue": [{"fp8": {"exact": False}}],
           "rows": [{"relerr_a_vs_d": 3e-3}, {"relerr_b_vs_d": 0.2}, {"relerr_b_vs_d": float("nan")}],
           "errors": {"gemm_overlap": "RuntimeError('x')"}}
    assert failed_checks(res) == ["sliced[0].batch_exact", "issue[0].fp8.exact", "errors.gemm_overlap: RuntimeError('x')"]
    assert failed_checks(res, max_rel_err=1e-2) == [
        "sliced[0].batch_exact", "issue[0].fp8.exact", "rows[1].relerr_b_vs_d=0.2 > 0.01", "rows[2].relerr_b_vs_d=nan > 0.01",
        "errors.gemm_overlap: RuntimeError('x')"]
    assert exit_code(res, name="bench_copy") == 1 and "bench_copy: check failed: sliced[0].batch_exact" in capsys.readouterr().out
    assert exit_code({"sliced": [{"exact": True}], "rows": [{"relerr_a_vs_d": 1e-3}]}, max_rel_err=1e-2) == 0
