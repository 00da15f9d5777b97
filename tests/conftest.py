"""Shared test setup: one torch thread (2-core CI machines: OpenMP spin-waits cost more than they give) and a pinned
terminal width, so no test depends on the terminal it runs in."""
import pytest
import torch

torch.set_num_threads(1)

#: The width every test sees, in-process (rich reads COLUMNS when a Console is made) and in the subprocesses it
#: starts (they inherit the environment): 80, what rich gives piped output when COLUMNS is unset, the width the
#: tests' expected output was written for. A test that checks another width sets its own.
TEST_COLUMNS = "80"


@pytest.fixture(autouse=True)
def pinned_terminal(monkeypatch):
    """COLUMNS pinned to TEST_COLUMNS; the variables that make rich treat a pipe as a terminal (colour codes,
    cursor moves in the output) removed."""
    monkeypatch.setenv("COLUMNS", TEST_COLUMNS)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


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
