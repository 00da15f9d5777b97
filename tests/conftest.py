"""Shared test setup: one torch thread (2-core CI machines: OpenMP spin-waits cost more than they give)."""
import pytest
import torch

torch.set_num_threads(1)


def _assert_run_consistent(run: dict) -> None:
    """One `dwdp bench` point (a results.json run): consistency ok, both modes did every token, ratios derived."""
    dep, dwdp, ratio = run["metrics"]["dep"], run["metrics"]["dwdp"], run["metrics"]["ratio"]
    assert run["consistency"]["ok"] is True
    assert dep["total_tokens"] == dwdp["total_tokens"] == run["consistency"]["expected_tokens"] > 0
    assert ratio["tps_per_gpu"] == pytest.approx(dwdp["tps_per_gpu"] / dep["tps_per_gpu"])
    assert ratio["ttft_speedup_p50"] == pytest.approx(dep["ttft_p50_ms"] / dwdp["ttft_p50_ms"])


@pytest.fixture
def assert_run_consistent():
    return _assert_run_consistent


@pytest.fixture
def engine(monkeypatch):
    """The synthetic engine (bench/synthetic.py) in place of engine.launcher.run_mode; the (mode, imbalance_cv) of
    every call, in order."""
    from dwdp_trtllm.bench import runner
    from dwdp_trtllm.bench.synthetic import synthetic_run_mode

    calls = []

    def fake(cfg, mode, queues, *, progress=None):
        calls.append((mode, cfg.workload.imbalance_cv))
        return synthetic_run_mode(cfg, mode, queues, progress=progress)

    monkeypatch.setattr(runner, "engine_run_mode", lambda: fake)
    return calls
