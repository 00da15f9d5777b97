"""`dwdp calibrate` end to end on the CPU with fake tools for an 8-GPU node (tests/fakes/calibrate_fakes.py): the file
is written whole or not at all, validates strictly, marks priors, shows progress, and changes `dwdp plan` exactly in
the inputs it sets."""
from __future__ import annotations

import importlib.util
import io
import contextlib
import json
from pathlib import Path

import pytest

from dwdp_trtllm.calibrate import pipeline
from dwdp_trtllm.cli import main
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.perf.calibration import load_calibration
from dwdp_trtllm.perf.calibration_detail import FUNCTIONAL, SCHEMA_VERSION
from dwdp_trtllm.spec.schema import ConfigError

_spec = importlib.util.spec_from_file_location("calibrate_fakes", Path(__file__).parents[1] / "fakes" / "calibrate_fakes.py")
fakes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fakes)  # loaded by path: tests/fakes on sys.path would expose its fake tensorrt_llm

R1 = PRESETS["deepseek-r1"]
PEER = ("peer_copy_gbps", "slice_efficiency", "contention_slowdown", "peer_pairs", "slice_gbps", "many_to_one",
        "group_pull", "interference_by_phase", "copy_slowdown_by_phase", "all_to_all_gbps", "dep_comm")


@pytest.fixture
def node(monkeypatch):
    """A node of 8 CUDA devices as `dwdp calibrate` sees it; its tools are the fakes (kwargs: set["copy"])."""
    import torch

    opts = {"copy": {}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H200 (sm_90)
    monkeypatch.setattr(pipeline, "real_tools", lambda device, gpus, spec, reps: fakes.fake_tools(spec, gpus, **opts["copy"]))
    return opts


def _calibrate(capsys, tmp_path, *argv, name="cal.json"):
    out = tmp_path / name
    rc = main(["calibrate", "--out", str(out), *argv])
    return rc, out, capsys.readouterr()


def test_eight_gpus_every_input_measured_with_provenance_and_progress(node, capsys, tmp_path):
    rc, out, cap = _calibrate(capsys, tmp_path, "--quick")
    assert rc == 0, cap.err
    for i in range(1, 8):
        assert f"[{i}/7]" in cap.out
    assert f"wrote {out}" in cap.out
    data = json.loads(out.read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["measured_on"]["host"] == "fake-node"
    cal = load_calibration(out)  # strict: every key known, provenance consistent
    for k in PEER + ("grouped_gemm_tflops", "attention_us_by_isl", "floor_tflops", "hbm_tbps"):
        assert data["provenance"][k] == {"measured": "fake-node", "at": fakes.MACHINE["at"],
                                         "how": data["provenance"][k]["how"]}, k
        assert cal.measured(k), k
    assert "prior" in data["provenance"]["interference"] and not cal.measured("interference")
    # each number is the measurement function's reading of the fake's model
    n = pipeline.shapes_for("cuda", True, R1).pull_bytes
    one_op = n / (n / (fakes.LINK_GBPS * 1e6) + fakes.OP_US * 1e-3) / 1e6
    assert cal.peer_copy_gbps == pytest.approx(one_op)
    assert len(cal.peer_pairs) == 8 * 7
    m2o = {r["slice_bytes"]: r for r in cal.many_to_one}
    t1 = n / (fakes.LINK_GBPS * 1e6)  # one source shared by 7 pullers: each gets 1/7 of its link
    assert m2o[0]["destinations"] == 7 and m2o[0]["slowdown"] == pytest.approx((7 * t1 + fakes.OP_US * 1e-3) / (t1 + fakes.OP_US * 1e-3))
    assert cal.contention_slowdown["unsliced"] > cal.contention_slowdown["sliced"] >= 1.0
    assert cal.interference_by_phase == pytest.approx(fakes.SLOWDOWN)
    assert cal.copy_slowdown_by_phase == pytest.approx(fakes.COPY_SLOWDOWN)
    assert cal.gemm_tflops("bf16", 8192) == pytest.approx(fakes.RATES["grouped_bf16"])
    assert cal.gemm_tflops("fp8", 8192) == pytest.approx(fakes.RATES["grouped_fp8"])
    assert cal.floor_tflops["attention_proj"] == pytest.approx(fakes.RATES["gemm"])
    assert cal.hbm_tbps == pytest.approx(fakes.HBM_TBPS)
    assert cal.all_to_all_gbps == pytest.approx(fakes.A2A_GBPS) == cal.dep_comm["nccl"]["gbps"]


def test_the_whole_routed_expert_op_is_recorded_per_tokens_and_routing_for_the_deployments_gemm(node, capsys,
                                                                                              tmp_path, monkeypatch):
    """The moe_op record: the fake op's ms at every (routing, tokens) of the run, the gemm the adapter defaults to on
    sm_90 for FP8 (multi_buffer), DWDP8 rank 0's [32 local | 224 slot] buffers, and where / when / which commit; the
    GEMM-only rates beside it. Fails on a calibrate without the step (no moe_op key)."""
    fakes.FakeMoeOp.made.clear()
    monkeypatch.delenv("DWDP_MOE_MAINLOOP", raising=False)  # the default mainloop
    rc, out, cap = _calibrate(capsys, tmp_path, "--quick", "--gpus", "1")
    assert rc == 0, cap.err
    assert "whole routed-expert op (multi_buffer, fp8)" in cap.out
    data = json.loads(out.read_text())
    rec = data["moe_op"]
    assert fakes.FakeMoeOp.made == [("fp8", "multi_buffer", 8)]
    assert rec["gemm"] == "multi_buffer" and rec["weight_dtype"] == "fp8"
    assert rec["split"] == {"dwdp_size": 8, "local_experts": 32, "slot_experts": 224}
    assert rec["model"] == {"name": "deepseek-r1", "hidden": 7168, "moe_inter": 2048, "experts": 256, "top_k": 8}
    tokens = pipeline.shapes_for("cuda", True, R1).moe_tokens
    assert tokens == (8192, 16384)
    for routing in ("balanced", "power_law_1.01"):  # independent: 0.5 ms + 6*T*8*7168*2048 FLOPs at 700 TFLOP/s
        want = [[T, (0.5 + 6 * T * 8 * 7168 * 2048 / 700e9) * (1.2 if routing != "balanced" else 1.0)] for T in tokens]
        assert [r[0] for r in rec["ms"][routing]] == list(tokens), routing
        assert [r[1] for r in rec["ms"][routing]] == pytest.approx([w[1] for w in want]), routing
    src = rec["source"]
    assert (src["gpu"], src["date"], src["commit"], src["host"]) == ("NVIDIA H200", fakes.MACHINE["at"], "abc1234",
                                                                     "fake-node")
    assert src["command"] == "dwdp calibrate --device cuda --model deepseek-r1 --gemm multi_buffer --dwdp-size 8 " \
                             "--quick --gpus 1"
    assert "routed_experts_forward" in src["how"] and "[32 local | 224 slot]" in src["how"]
    assert src["how"].endswith("FP8 mainloop cutlass (DWDP_MOE_MAINLOOP)")  # which mainloop the record timed
    assert "measured" in data["provenance"]["moe_op"] and "grouped_gemm_tflops" in data
    cal = load_calibration(out)
    assert cal.measured("moe_op") and cal.moe_op["ms"]["balanced"][0] == (8192.0, pytest.approx(want[0][1] / 1.2))


def test_no_op_record_when_the_gpu_would_run_the_torch_reference(node, capsys, tmp_path, monkeypatch):
    """Without dwdp ops on the GPU the engine's op falls back to the torch reference (about 30x slower on an H100):
    calibrate must not write that as the op a DWDP rank runs. The moe_op key stays a prior naming why, the run
    still writes every other measurement. Fails on a calibrate that times whatever path runs."""
    import dataclasses
    why = "dwdp ops unavailable here (CUTLASS headers not found): gemm multi_buffer would run the torch reference"
    monkeypatch.setattr(pipeline, "real_tools", lambda device, gpus, spec, reps: dataclasses.replace(
        fakes.fake_tools(spec, gpus), moe_op_blocked=lambda gemm: why if gemm == "multi_buffer" else ""))
    fakes.FakeMoeOp.made.clear()
    rc, out, cap = _calibrate(capsys, tmp_path, "--quick", "--gpus", "1")
    assert rc == 0, cap.err
    data = json.loads(out.read_text())
    assert "moe_op" not in data and fakes.FakeMoeOp.made == [] and "grouped_gemm_tflops" in data
    assert data["provenance"]["moe_op"]["why"] == f"not timed: {why}; run `dwdp build-ops`"
    assert "whole routed-expert op" not in cap.out and "prior: moe_op (not timed: dwdp ops unavailable" in cap.out
    rc, out, cap = _calibrate(capsys, tmp_path, "--quick", "--gpus", "1", "--gemm", "merge")  # no dwdp ops needed
    assert rc == 0 and json.loads(out.read_text())["moe_op"]["gemm"] == "merge"


def test_the_real_tools_block_the_op_only_where_it_needs_dwdp_ops_and_they_are_missing(monkeypatch):
    import importlib
    grouped_gemm = importlib.import_module("dwdp_trtllm.ops.grouped_gemm")  # ops/__init__ exports the function
    monkeypatch.setattr(grouped_gemm, "why_unavailable", lambda: "CUTLASS headers not found")
    gpu = pipeline.real_tools("cuda", 1, R1, 3).moe_op_blocked
    assert gpu("multi_buffer") == ("dwdp ops unavailable here (CUTLASS headers not found): gemm multi_buffer would "
                                   "run the torch reference")
    assert "composite_view" in gpu("composite_view") and gpu("merge") == "" and gpu("reference") == ""
    assert pipeline.real_tools("cpu", 1, R1, 3).moe_op_blocked("multi_buffer") == ""  # the CPU: a functional check
    monkeypatch.setattr(grouped_gemm, "why_unavailable", lambda: "")
    assert pipeline.real_tools("cuda", 1, R1, 3).moe_op_blocked("multi_buffer") == ""


def test_the_ops_gemm_and_group_follow_the_flags(node, capsys, tmp_path):
    fakes.FakeMoeOp.made.clear()
    rc, out, cap = _calibrate(capsys, tmp_path, "--quick", "--gpus", "1", "--gemm", "merge", "--dwdp-size", "4")
    assert rc == 0, cap.err
    rec = json.loads(out.read_text())["moe_op"]
    assert fakes.FakeMoeOp.made == [("fp8", "merge", 4)] and rec["gemm"] == "merge"
    assert rec["split"] == {"dwdp_size": 4, "local_experts": 64, "slot_experts": 192}
    for argv, flag in ((["--gemm", "cutlass"], "--gemm"), (["--dwdp-size", "0"], "--dwdp-size"),
                       (["--dwdp-size", "257"], "--dwdp-size")):
        assert main(["calibrate", "--out", str(tmp_path / "x.json"), "--quick", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flag in err, err


def test_one_gpu_keeps_every_peer_input_a_prior_and_says_why(node, capsys, tmp_path):
    rc, out, cap = _calibrate(capsys, tmp_path, "--quick", "--gpus", "1")
    assert rc == 0, cap.err
    data = json.loads(out.read_text())
    for k in PEER:
        assert k not in data and "one GPU" in data["provenance"][k]["why"], k
    assert "prior: peer_copy_gbps (one GPU: no peer to copy from" in cap.out
    cal = load_calibration(out)
    assert cal.peer_copy_gbps is None and cal.measured("grouped_gemm_tflops")


def test_a_failing_measurement_writes_nothing_and_keeps_the_old_file(node, capsys, tmp_path):
    (tmp_path / "cal.json").write_text("old")
    node["copy"] = {"fail_on": "group"}
    rc, out, cap = _calibrate(capsys, tmp_path, "--quick")
    assert rc == 1
    assert "measurement failed in step many-to-one and whole-group pulls" in cap.out and "not bit-exact" in cap.out
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["cal.json"]


def test_ctrl_c_writes_nothing(node, capsys, tmp_path):
    node["copy"] = {"interrupt": True}
    rc, out, cap = _calibrate(capsys, tmp_path, "--quick")
    assert rc == 130 and "interrupted" in cap.err
    assert list(tmp_path.iterdir()) == []


def test_write_interrupted_midway_leaves_no_file(tmp_path, monkeypatch):
    from dwdp_trtllm.bench import report

    def boom(fd):
        raise KeyboardInterrupt
    monkeypatch.setattr(report.os, "fsync", boom)  # the text written, not yet flushed to disk
    with pytest.raises(KeyboardInterrupt):
        pipeline.write_file(tmp_path / "c.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv,flag", [
    (["--gpus", "0"], "--gpus"), (["--gpus", "9"], "--gpus"), (["--device", "tpu"], "--device"),
    (["--model", "gpt-5"], "--model"), (["--out", "cal.txt"], "--out"),
])
def test_bad_arguments_are_refused_naming_the_flag(node, capsys, tmp_path, argv, flag):
    assert main(["calibrate", "--out", str(tmp_path / "c.json"), *argv]) == 2
    assert f"{flag}:" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_cuda_without_a_gpu_and_more_gpus_than_visible_are_refused(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["calibrate", "--out", str(tmp_path / "c.json")]) == 2
    assert "--device: cuda: no CUDA device is visible" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert main(["calibrate", "--gpus", "4", "--out", str(tmp_path / "c.json")]) == 2
    assert "--gpus: 4 GPUs asked, 2 visible" in capsys.readouterr().err


def _file(tmp_path, gpus=8) -> tuple[Path, dict]:
    data = pipeline.run_calibration(fakes.fake_tools(R1, gpus), R1, pipeline.shapes_for("cuda", True, R1), "cuda", gpus,
                                    lambda *a: None)
    path = tmp_path / "cal.json"
    pipeline.write_file(path, data)
    return path, data


def test_round_trip_and_strict_errors_name_file_and_key(tmp_path):
    path, data = _file(tmp_path)
    cal = load_calibration(path)
    assert cal.schema_version == 2 and cal.measured_on == data["measured_on"] and cal.provenance == data["provenance"]
    got = [dict(r) for r in cal.group_pull]  # pytest >= 9.1: approx compares one mapping at a time, not a list of them
    assert len(got) == len(data["group_pull"]) and all(g == pytest.approx(w) for g, w in zip(got, data["group_pull"]))
    assert [list(p) for p in cal.slice_gbps] == sorted(data["slice_gbps"])
    bad = [({"schema_version": 3}, "schema_version", "newer than this dwdp_trtllm reads"),
           ({"peer_pairz": []}, "peer_pairz", "unknown key"),
           ({"many_to_one": [{**data["many_to_one"][0], "extra": 1}]}, "many_to_one[0].extra", "unknown key"),
           ({"interference_by_phase": {"attention": 1.1}}, "interference_by_phase.attention", "unknown key"),
           ({"dep_comm": {"nccl": {**data["dep_comm"]["nccl"], "gbps": -1}}}, "dep_comm.nccl.gbps", "a number > 0"),
           ({"slice_gbps": [[0, 1.0], [0, 2.0]]}, "slice_gbps", "distinct"),
           ({"measured_on": {**data["measured_on"], "purpose": "guess"}}, "measured_on.purpose", "expected"),
           ({"provenance": {**data["provenance"], "interference": {"measured": "x", "at": "t", "how": "h"}}},
            "provenance.interference", "does not set interference"),
           ({"peer_copy_gbps": 1.0, "provenance": {"peer_copy_gbps": {"prior": "p", "why": "w"}}},
            "provenance.peer_copy_gbps", "says prior")]
    for change, key, words in bad:
        p = tmp_path / "bad.json"
        p.write_text(json.dumps({**data, **change}))
        with pytest.raises(ConfigError) as e:
            load_calibration(p)
        assert (e.value.file, e.value.key) == (str(p), key) and words in str(e.value), key
    old = tmp_path / "v1.json"
    old.write_text(json.dumps({"peer_copy_gbps": 300, "group_pull": data["group_pull"]}))
    with pytest.raises(ConfigError, match="schema_version 2 key in a schema_version 1 file"):
        load_calibration(old)


def _plan(argv) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["plan", "--isl", "8192", "--no-bench-results", "--json", *argv]) == 0
    return json.loads(buf.getvalue())


def test_the_file_changes_the_plan_exactly_in_the_inputs_it_sets(tmp_path):
    path, data = _file(tmp_path)
    base, cal = _plan([])["rows"][0], _plan(["--calibration", str(path)])["rows"][0]
    changed = {k for k in base if base[k] != cal[k]}
    # the peer inputs price DWDP's prefetch, the measured all-to-all DEP's communication; TensorRT-LLM's kernel
    # tables price compute (kernel keys unused)
    dep_comm = {"t_all2all_us", "t_dep_us", "t_dep_us_range", "tps_per_gpu_dep", "t_iteration_dep_us", "dep_comm"}
    assert changed and changed <= {"t_prefetch_us", "t_prefetch_wait_us", "t_dwdp_us", "speedup", "speedup_low",
                                   "speedup_high", "compute_over_prefetch", "contention_slowdown", "tps_per_gpu_dwdp",
                                   "t_dwdp_us_range", "break_even_tokens", "break_even_range", "t_iteration_dwdp_us",
                                   "prefetch_hidden", "verdict", "depends_on"} | dep_comm
    assert "all_to_all_gbps" in data and f"measured all-to-all bandwidth {data['all_to_all_gbps']:g} GB/s" in cal["dep_comm"]
    eff = dict(data["slice_efficiency"])[2 << 20]
    want = cal["fetch_gb"] * 1e9 / (data["peer_copy_gbps"] * 1e9 * eff) * data["contention_slowdown"]["sliced"] * 1e6
    assert cal["t_prefetch_us"] == pytest.approx(want, rel=1e-5) and cal["contention_slowdown"] == pytest.approx(
        data["contention_slowdown"]["sliced"], rel=1e-5)


def test_kernel_keys_alone_change_only_compute_for_the_engine_target(tmp_path):
    _, data = _file(tmp_path)
    kept = {k: data[k] for k in ("schema_version", "measured_on", "grouped_gemm_tflops")}
    kept["provenance"] = {"grouped_gemm_tflops": data["provenance"]["grouped_gemm_tflops"]}
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps(kept))
    base, cal = (_plan(["--target", "engine", *a])["rows"][0] for a in ([], ["--calibration", str(path)]))
    assert base["t_experts_dwdp_us"] != cal["t_experts_dwdp_us"]
    assert base["t_prefetch_us"] == cal["t_prefetch_us"] and base["t_attention_us"] == cal["t_attention_us"]


def test_measured_interference_per_phase_prices_the_plan_and_fixes_its_range(tmp_path):
    """`dwdp calibrate`'s interference_by_phase is what the planner slows DWDP's compute by: the same phase values as
    `--interference X` on every phase give the same DWDP time, the input is listed as measured, and DEP is untouched."""
    _, data = _file(tmp_path)
    assert set(data["interference_by_phase"]) <= {"attention_core", "gemm", "memory_bound", "grouped_gemm"}
    kept = {k: data[k] for k in ("schema_version", "measured_on")}
    kept["interference_by_phase"] = {k: 1.3 for k in ("attention_core", "gemm", "memory_bound", "grouped_gemm")}
    kept["provenance"] = {"interference_by_phase": data["provenance"]["interference_by_phase"]}
    path = tmp_path / "interference.json"
    path.write_text(json.dumps(kept))
    # one request per rank: the copy is exposed, so interference moves the prefetch wait
    base, measured, given = (_plan(["--batch", "1", *a]) for a in ([], ["--calibration", str(path)], ["--interference", "1.3"]))
    b, m, g = base["rows"][0], measured["rows"][0], given["rows"][0]
    for k in ("t_dwdp_us", "t_prefetch_wait_us", "speedup", "speedup_low", "speedup_high"):
        assert m[k] == pytest.approx(g[k]), k
    assert m["t_prefetch_wait_us"] != b["t_prefetch_wait_us"]  # compute slowed by 1.3x hides less of the copy
    assert m["t_dep_us"] == b["t_dep_us"]
    status = {i["input"]: i["status"] for i in measured["inputs"]}
    assert status["interference"] == "measured" and status["peer bandwidth"] == "prior"


@pytest.mark.slow
def test_cpu_functional_check_runs_the_real_pipeline_and_the_planner_refuses_its_file(capsys, tmp_path):
    rc, out, cap = _calibrate(capsys, tmp_path, "--device", "cpu")
    assert rc == 0, cap.err
    assert FUNCTIONAL in cap.out and "[6/6]" in cap.out
    data = json.loads(out.read_text())
    assert data["measured_on"]["purpose"] == FUNCTIONAL and "gpu" not in data
    assert load_calibration(out, functional_ok=True).dep_comm["gloo"]["ranks"] == 2
    assert main(["plan", "--no-bench-results", "--calibration", str(out)]) == 2
    assert "measured_on.purpose: CPU: functional, not a calibration" in capsys.readouterr().err


def test_machine_record_bounds_and_reports_nvidia_smi_failures(monkeypatch):
    import subprocess

    from dwdp_trtllm.calibrate import machine

    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    def hangs(cmd, **k):
        assert k["timeout"] == machine.SMI_TIMEOUT_S
        raise subprocess.TimeoutExpired(cmd, k["timeout"])
    assert machine._smi(["topo", "-m"], missing) == "not available: nvidia-smi not found"
    assert "took over" in machine._smi(["topo", "-m"], hangs)
    fails = lambda cmd, **k: subprocess.CompletedProcess(cmd, 9, "", "NVML: driver not loaded")  # noqa: E731
    assert machine._smi(["topo", "-m"], fails) == "not available: nvidia-smi topo -m exited 9: NVML: driver not loaded"
    cpu = machine.read_machine("cpu", 2, run=missing, at="2026-12-05T07:00:00Z")
    assert cpu["purpose"] == FUNCTIONAL and cpu["gpu_count"] == 2 and cpu["at"] == "2026-12-05T07:00:00Z"


def test_merged_files_keep_each_value_with_its_provenance(tmp_path):
    path, data = _file(tmp_path)
    kernels_only = tmp_path / "k.json"
    kernels_only.write_text(json.dumps({"schema_version": 2, "hbm_tbps": 3.5, "provenance": {
        "hbm_tbps": {"measured": "other-node", "at": "t", "how": "h"},
        "peer_copy_gbps": {"prior": "p", "why": "w"}}}))
    cal = load_calibration(path).merged(load_calibration(kernels_only))
    assert cal.hbm_tbps == 3.5 and cal.provenance["hbm_tbps"]["measured"] == "other-node"
    # the second file's prior does not hide the first file's measurement
    assert cal.peer_copy_gbps == data["peer_copy_gbps"] and cal.provenance["peer_copy_gbps"]["measured"] == "fake-node"
    assert cal.measured("peer_copy_gbps") and cal.schema_version == 2


def test_bad_out_paths_are_refused_before_anything_runs(node, capsys, tmp_path):
    (tmp_path / "loop_a.json").symlink_to("loop_b.json")
    (tmp_path / "loop_b.json").symlink_to("loop_a.json")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "elsewhere" / "c.json")
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "dir.json").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    for name, words in (("loop_a.json", "symbolic link loop"), ("dangling.json", "dangling symbolic link"),
                        ("FILE/c.json", "is a file, not a directory"), ("dir.json", "directory")):
        assert main(["calibrate", "--quick", "--out", str(tmp_path / name)]) == 2
        cap = capsys.readouterr()
        assert "--out: " in cap.err and words in cap.err and "[1/" not in cap.out, name
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not (tmp_path / "elsewhere").exists()


def test_the_real_copy_timer_pulls_through_the_scheduler_and_refuses_a_wrong_copy():
    from dwdp_trtllm.calibrate.copy_timer import SchedulerCopyTimer, pull_plan
    from dwdp_trtllm.core.copy_plan import CopyOp, CopyPlan

    timer = SchedulerCopyTimer("cpu", 4, reps=1)
    two = CopyPlan(0, (CopyOp(1, 0, 0, 0, 4096), CopyOp(2, 0, 4096, 4096, 4096)), sliced=True)
    assert (timer.lanes(pull_plan(1 << 16, 1, 0)), timer.lanes(pull_plan(1 << 16, 1, 1 << 12)), timer.lanes(two)) == (1, 3, 0)
    jobs = [(0, two), (3, pull_plan(1 << 16, 1, 1 << 12, 3))]
    assert all(t > 0 for t in timer.time_pulls(jobs))
    assert timer._dst[3][: 1 << 16].equal(timer._src[1][: 1 << 16])
    timer._dst[0][5000] ^= 1  # one flipped byte in the second op's range
    with pytest.raises(RuntimeError, match="into rank 0 from rank 2 is not bit-exact"):
        timer._check(jobs)


@pytest.mark.parametrize("ratio", [0.1, 10.0, 1000.0])
def test_interference_overlaps_compute_and_pull_of_about_equal_length(ratio):
    from dwdp_trtllm.calibrate.copy_timer import pull_plan
    from dwdp_trtllm.calibrate.interference import phase_interference

    timer = fakes.FakeCopyTimer(2)
    n, s = 64 << 20, 2 << 20
    copy_alone = fakes.copy_ms([(0, pull_plan(n, 1, s, 0))])[0]
    kernel = fakes.FakeKernel("gemm", copy_alone * ratio)
    comp, copy = phase_interference(timer, kernel, n, s, max_bytes=16 * n)
    assert (comp, copy) == pytest.approx((fakes.SLOWDOWN["gemm"], fakes.COPY_SLOWDOWN["gemm"]))
    pulled = [c[2] for c in timer.calls if c[0] == "pulls"]
    if ratio > 1:  # the long kernel got a longer pull, in whole slices, at most max_bytes
        assert pulled == [n, {10.0: 10 * n, 1000.0: 16 * n}[ratio]]
    else:
        assert pulled == [n]
