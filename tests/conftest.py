"""Shared test setup: one torch thread (2-core CI machines: OpenMP spin-waits cost more than they give) and a pinned
terminal width, so no test depends on the terminal it runs in."""
import pytest
import torch

torch.set_num_threads(1)

#: The width every test sees, in-process (rich reads COLUMNS when a Console is made) and in the subprocesses it
#: starts (they inherit the environment): 80, what rich gives piped output when COLUMNS is unset, the width the
#: tests' expected output was written for. A test that checks another width sets its own.
TEST_COLUMNS = "80"


#: Tests marked slow here rather than in their files: each one spawns processes (fake TensorRT-LLM worlds, engine
#: ranks, fresh interpreters) or runs a whole script (the planner matrix of a campaign), and took over ~5 s in the
#: full suite's or the fast subset's --durations on a loaded 2-core machine (2026-12-05; the number is that run's
#: seconds). `-m "not slow"` leaves them out; the full suite runs them.
#: tests/unit/test_slow_marks.py checks that every entry still names a test.
SLOW = {
    "tests/unit/test_trtllm_fp8_default.py::test_fake_world_without_gemm_does_not_run_merge": 138,
    "tests/unit/test_trtllm_fp8_default.py::test_check_trtllm_gemm_line_follows_the_config": 40,
    "tests/unit/test_trtllm_fp8_default.py::test_integration_yaml_without_gemm_gets_the_measured_default": 18,
    "tests/unit/test_trtllm_multi_buffer.py::test_multi_buffer_unit_matches_stock_kernel": 92,
    "tests/unit/test_trtllm_group.py::test_group_forms_beside_generation_ranks[4-2]": 36,
    "tests/unit/test_trtllm_fake_world.py::test_second_model_in_a_process_gets_a_fresh_registered_manager": 36,
    "tests/unit/test_trtllm_fake_world.py::test_fake_engine_bypasses_model_hooks_but_not_moe_hooks": 25,
    "tests/unit/test_trtllm_fake_world.py::test_check_trtllm_names_the_lifecycle_and_why": 19,
    "tests/unit/test_skew_engine.py::test_skew_off_is_bit_exact": 33,
    "tests/unit/test_trtllm_lifecycle.py::test_layout_checked_once_per_moe_by_its_owner": 30,
    "tests/unit/test_trtllm_lifecycle.py::test_executor_shutdown_exits_our_manager": 29,
    "tests/unit/test_trtllm_lifecycle.py::test_reload_refused_once_dwdp_set_the_model_up": 18,
    "tests/unit/test_trtllm_lifecycle.py::test_load_after_shutdown_refuses_upstreams_own_manager": 18,
    "tests/unit/test_trtllm_lifecycle.py::test_dwdp_config_with_our_engine_fails_with_our_message": 16,
    "tests/unit/test_trtllm_lifecycle.py::test_upstream_layout_read_from_our_manager_is_our_placement": 14,
    "tests/unit/test_trtllm_lifecycle.py::test_layout_wrap_is_required_once_our_manager_is_registered": 13,
    "tests/unit/test_trtllm_lifecycle.py::test_exit_unregisters_so_create_py_executor_rolls_back": 12,
    "tests/unit/test_trtllm_host_layout.py::test_host_neutral_modules_import_without_tensorrt_llm": 27,
    "tests/unit/test_trtllm_host_layout.py::test_only_integration_trtllm_imports_tensorrt_llm": 11,
    "tests/unit/test_transport_shm.py::test_shm_transport_and_scheduler_bit_exact_three_processes": 19,
    "tests/unit/test_trtllm_serve.py::test_check_trtllm_without_tensorrt_llm": 18,
    "tests/unit/test_trtllm_hook.py::test_env_var_and_fake_trtllm_tree_get_patched": 16,
    "tests/unit/test_trtllm_hook.py::test_missing_target_does_not_stop_processes_our_engine_does_not_patch": 15,
    "tests/unit/test_plan_recalibration.py::test_plan_matrix_reads_the_campaign_it_is_given": 15,
    "tests/unit/test_import_graph.py::test_the_bench_path_leaves_transformers_unimported": 8,
}


def slow_entry(nodeid: str) -> str | None:
    """The SLOW key that marks this test: its node id, or its function (every parameter set) without the brackets."""
    for key in (nodeid, nodeid.split("[", 1)[0]):
        if key in SLOW:
            return key
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if slow_entry(item.nodeid) is not None:
            item.add_marker(pytest.mark.slow)


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
