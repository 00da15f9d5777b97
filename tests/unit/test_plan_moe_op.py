"""`dwdp plan --target trtllm` prices DWDP's routed experts with the op the TensorRT-LLM host runs: under gemm
multi_buffer (the FP8 default on Hopper) this project's whole op, from a calibration file's moe_op record or the
table shipped for the GPU; under gemm merge (and the composite view) TensorRT-LLM's CUTLASS MoE table, as before.
The plan says which op priced each side; a record measured on another GPU is refused, never used. Expected times are
computed here by hand from the files (not through the planner's lookups)."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from dwdp_trtllm.cli import main
from dwdp_trtllm.commands import calibrate as cal_cmd
from dwdp_trtllm.commands import plan as plan_cmd
from dwdp_trtllm.perf import moe_op, moe_op_record
from wrapped_text import paragraph  # noqa: E402  (pytest puts tests/unit on sys.path: no __init__.py)

ROOT = Path(__file__).resolve().parents[2]
R1 = ["--model", "deepseek-r1", "--gpu", "h200", "--weight-dtype", "fp8", "--dwdp-size", "8"]
#: one rank's iteration: ISL 8K requests packed up to MNT 8K = 8192 tokens per rank
ONE_8K = ["--mnt", "8192", "--isl", "8192", "--routing-skew", "none"]


def _record(gpu="NVIDIA H200", rows=((4096, 4.0), (16384, 16.0)), gemm="multi_buffer", **kw) -> dict:
    return {"gemm": gemm, "weight_dtype": kw.get("weight_dtype", "fp8"),
            "model": {"name": "deepseek-r1", "hidden": 7168, "moe_inter": 2048, "experts": 256, "top_k": 8},
            "split": {"dwdp_size": 8, "local_experts": 32, "slot_experts": 224},
            "ms": {"balanced": [list(r) for r in rows]},
            "source": {"gpu": gpu, "date": "2026-12-07T10:00:00Z", "commit": "abc1234",
                       "command": "dwdp calibrate --gpus 1", "host": "node-a"}}


def _cal(tmp_path, rec: dict, name="cal.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps({"gpu": rec["source"]["gpu"], "moe_op": rec}))
    return str(p)


def _plan(capsys, *argv) -> dict:
    assert main(["plan", *R1, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _trtllm_ep1_ms(tokens: float, dist: str = "balanced") -> float:
    """TensorRT-LLM's fused MoE, EP1, read from the shipped table file and interpolated linearly by hand."""
    d = json.loads((ROOT / "dwdp_trtllm" / "data" / "kernel_tables" / "h200.json").read_text())
    rows = d["models"]["deepseek-v3"]["moe"]["fp8"]["ep"]["1"][dist]
    for (x0, y0), (x1, y1) in zip(rows, rows[1:]):
        if x0 <= tokens <= x1:
            return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
    raise AssertionError(f"{tokens} outside the table")


def test_dwdp_experts_priced_from_the_calibration_files_moe_op_record(capsys, tmp_path):
    """4 ms at 4K and 16 ms at 16K tokens, log-log between: at 8192 tokens sqrt(4 * 16) = 8 ms per layer. DEP's
    experts stay TensorRT-LLM's (the same as without the file)."""
    out = _plan(capsys, *ONE_8K, "--calibration", _cal(tmp_path, _record()))
    base = _plan(capsys, *ONE_8K, "--gemm", "merge")
    for r, b in zip(out["rows"], base["rows"]):
        assert r["tokens_per_rank"] == 8192
        assert r["t_experts_dwdp_us"] == pytest.approx(8000.0)
        assert r["t_experts_dep_us"] == pytest.approx(b["t_experts_dep_us"])
        assert not any("DWDP" in k for k in r["extrapolated"])  # inside the record's rows
    assert "this project's op (multi_buffer, fp8, [32 local | 224 slot]; calibration" in out["experts"]["dwdp"]
    assert out["experts"]["dep"] == {"trtllm": "TensorRT-LLM's CUTLASS MoE table at EP=G",
                                     "deepep_deepgemm": "DeepGEMM's published grouped-GEMM rates"}


def test_under_gemm_merge_dwdp_experts_are_tensorrt_llms_table_even_with_a_record(capsys, tmp_path):
    out = _plan(capsys, *ONE_8K, "--gemm", "merge", "--calibration", _cal(tmp_path, _record()))
    want = _trtllm_ep1_ms(8192) * 1e3
    assert {round(r["t_experts_dwdp_us"], 6) for r in out["rows"]} == {round(want, 6)}
    assert out["experts"]["dwdp"].startswith("TensorRT-LLM's CUTLASS MoE table at EP1; gemm merge (--gemm)")


def test_without_a_file_the_shipped_table_of_the_gpu_prices_the_hopper_fp8_default(capsys):
    """FP8 on h200: the adapter's default multi_buffer, priced from data/moe_op/h200.json (read here by hand)."""
    d = json.loads((ROOT / "dwdp_trtllm" / "data" / "moe_op" / "h200.json").read_text())
    (rec,) = d["records"]
    rows = dict(rec["ms"]["balanced"])
    out = _plan(capsys, "--mnt", "16384", "--isl", "8192", "--routing-skew", "none", "--dep", "trtllm")
    assert out["rows"][0]["t_experts_dwdp_us"] == pytest.approx(rows[16384] * 1e3)
    assert "shipped table data/moe_op/h200.json: NVIDIA H200" in out["experts"]["dwdp"]
    assert "gemm multi_buffer (moe_evidence.default_gemm for fp8 on h200 (sm_90))" in out["experts"]["dwdp"]
    # BF16 defaults to the composite view, which feeds TensorRT-LLM's kernel: its table
    bf = _plan(capsys, "--weight-dtype", "bf16", "--mnt", "16384", "--isl", "8192", "--routing-skew", "none")
    assert bf["experts"]["dwdp"].startswith("TensorRT-LLM's CUTLASS MoE table at EP1; gemm composite_view")


def test_past_the_records_last_row_constant_rate_and_a_widened_range(capsys, tmp_path):
    """Rows up to 4096 tokens; 8192 per rank is one doubling past: 2 x the last row's 4 ms, marked extrapolated."""
    cal = _cal(tmp_path, _record(rows=((2048, 2.5), (4096, 4.0))))
    out = _plan(capsys, *ONE_8K, "--dep", "trtllm", "--calibration", cal)
    (r,) = out["rows"]
    assert r["t_experts_dwdp_us"] == pytest.approx(8000.0)
    assert r["extrapolated"]["routed experts (DWDP, this project's op)"] == "2.0x the last row"


def test_a_routing_the_record_lacks_is_balanced_times_tensorrt_llms_ratio(capsys, tmp_path):
    rec = _record()
    out = _plan(capsys, "--mnt", "8192", "--isl", "8192", "--routing-skew", "power_law_1.01", "--dep", "trtllm",
                "--calibration", _cal(tmp_path, rec))
    ratio = _trtllm_ep1_ms(8192, "power_law_1.01") / _trtllm_ep1_ms(8192)
    assert out["rows"][0]["t_experts_dwdp_us"] == pytest.approx(8000.0 * ratio)
    rec["ms"]["power_law_1.01"] = [[4096, 5.0], [16384, 20.0]]  # now measured: sqrt(5 * 20) = 10 ms
    out = _plan(capsys, "--mnt", "8192", "--isl", "8192", "--routing-skew", "power_law_1.01", "--dep", "trtllm",
                "--calibration", _cal(tmp_path, rec, "pl.json"))
    assert out["rows"][0]["t_experts_dwdp_us"] == pytest.approx(10000.0)


def test_the_plans_text_names_the_op_of_each_side(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    cal = _cal(tmp_path, _record())
    assert main(["plan", *R1, *ONE_8K, "--calibration", cal]) == 0
    line = paragraph(capsys.readouterr().out, "experts: ")
    assert line.startswith(f"experts: DWDP this project's op (multi_buffer, fp8, [32 local | 224 slot]; calibration "
                           f"{cal}: NVIDIA H200, 2026-12-07T10:00:00Z, commit abc1234); gemm multi_buffer")
    assert line.endswith("; DEP (trtllm) TensorRT-LLM's CUTLASS MoE table at EP=G; DEP (deepep_deepgemm) DeepGEMM's "
                         "published grouped-GEMM rates")
    assert main(["plan", *R1, *ONE_8K, "--gemm", "merge", "--dep", "trtllm"]) == 0
    line = paragraph(capsys.readouterr().out, "experts: ")
    assert line == ("experts: DWDP TensorRT-LLM's CUTLASS MoE table at EP1; gemm merge (--gemm); DEP TensorRT-LLM's "
                    "CUTLASS MoE table at EP=G")
    assert main(["plan", *R1, *ONE_8K, "--target", "engine", "--no-bench-results"]) == 0
    assert "experts: " not in capsys.readouterr().out  # the engine's cost model prices both sides


def test_a_record_from_another_gpu_is_refused_not_used(capsys, tmp_path):
    cal = _cal(tmp_path, _record(gpu="NVIDIA H100 80GB HBM3"))
    assert main(["plan", *R1, *ONE_8K, "--calibration", cal]) == 2  # the file's GPU is not the plan's: refused whole
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVIDIA H100 80GB HBM3" in err and "h200" in err
    # accepted on purpose, the file's other records may be used, but its op record still prices no H200
    assert main(["plan", *R1, *ONE_8K, "--calibration", cal, "--accept-calibration-gpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "moe_op.source.gpu" in err and "NVIDIA H100 80GB HBM3" in err


def test_bad_records_are_refused_naming_the_key(tmp_path):
    from dwdp_trtllm.perf.calibration import load_calibration
    from dwdp_trtllm.spec.schema import ConfigError
    cases = [(("ms", "balanced"), [[4096, 0.0]], "moe_op.ms.balanced[0][1]"),
             (("ms",), {"power_law_1.01": [[1, 1.0]]}, "moe_op.ms.balanced"),
             (("gemm",), "cutlass", "moe_op.gemm"),
             (("split", "slot_experts"), 100, "moe_op.split"),
             (("source", "commit"), "", "moe_op.source.commit")]
    for path, value, key in cases:
        rec = _record()
        node = rec
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        with pytest.raises(ConfigError) as e:
            load_calibration(_cal(tmp_path, rec))
        assert e.value.key == key, (path, e.value)


def test_curve_is_log_log_inside_and_marks_both_ends():
    rows = ((4096.0, 5.0), (16384.0, 20.0))
    ms, b = moe_op.curve_ms(rows, [1024, 4096, 8192, 16384, 65536])
    assert ms.tolist() == pytest.approx([5.0, 5.0, 10.0, 20.0, 80.0])
    assert b.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.0, 2.0])  # below the first row: its time, an upper bound
    assert math.isclose(float(moe_op.curve_ms(rows, 6000)[0]), 5.0 * (6000 / 4096), rel_tol=1e-9)  # slope 1 here


def test_the_shipped_tables_load_and_carry_their_source():
    for gpu, dev, date, commit, script in (
            ("h100", "NVIDIA H100 80GB HBM3", "2026-12-07", "01a7651", "scripts/bench_routed_op.py"),
            ("h200", "NVIDIA H200", "2026-12-05", "8645e25", "scripts/bench_moe_op_vs_trtllm.py")):
        t = moe_op.read_table(moe_op.package_table_path(gpu))
        (r,) = t["records"]
        assert (r["source"]["gpu"], r["source"]["date"], r["source"]["commit"]) == (dev, date, commit)
        assert r["gemm"] == "multi_buffer" and r["split"]["local_experts"] == 32
        assert script in r["source"]["command"]
    assert "data/moe_op/*.json" in (ROOT / "pyproject.toml").read_text()


def test_the_flag_choices_are_the_pricings():
    assert plan_cmd.GEMMS == moe_op.GEMMS == cal_cmd.GEMMS == moe_op_record.GEMMS


def _script():
    spec = importlib.util.spec_from_file_location("moe_op_table", ROOT / "scripts" / "moe_op_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_table_script_writes_a_calibrations_record_and_keeps_the_others(tmp_path, capsys):
    script = _script()
    out = tmp_path / "h200.json"
    out.write_text((ROOT / "dwdp_trtllm" / "data" / "moe_op" / "h200.json").read_text())
    bf = _record(gemm="multi_buffer", weight_dtype="bf16", rows=((4096, 9.0), (8192, 17.0)))
    assert script.main([_cal(tmp_path, bf, "bf.json"), "--out", str(out)]) == 0
    new = _record(rows=((4096, 3.0), (8192, 5.0), (16384, 9.0), (32768, 17.0)))
    assert script.main([_cal(tmp_path, new, "new.json"), "--out", str(out)]) == 0
    t = moe_op.read_table(out)
    assert t["gpu"] == "h200" and len(t["records"]) == 2  # the fp8 record replaced, the bf16 one added
    by = {r["weight_dtype"]: r for r in t["records"]}
    assert [list(x) for x in by["fp8"]["ms"]["balanced"]] == [[4096, 3.0], [8192, 5.0], [16384, 9.0], [32768, 17.0]]
    assert by["fp8"]["source"]["commit"] == "abc1234" and by["bf16"]["ms"]["balanced"][0] == (4096.0, 9.0)
    capsys.readouterr()
    assert script.main([_cal(tmp_path, new, "n2.json"), "--gpu", "h100", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "moe_op.source.gpu" in err


class _WarmingTimer:
    """A MoeOpTimer whose first call of each point is slow (a process's first calls) and whose rounds differ: the
    record must drop the first and take the median of the rest."""

    def __init__(self):
        self.calls: list[tuple[int, str]] = []

    def time_ms(self, tokens, routing):
        n = sum(1 for c in self.calls if c == (tokens, routing))
        self.calls.append((tokens, routing))
        if n == 0:
            return 1000.0  # the warm-up call
        base = tokens / 1024 * (2.0 if routing == "power_law_1.01" else 1.0)
        return base * (1.0, 1.5, 0.9)[(n - 1) % 3]  # rounds 1..3: median is the 1.0x one

    def release(self):
        pass


def test_calibrated_op_drops_a_warm_up_pass_and_takes_the_median_of_interleaved_rounds():
    from dwdp_trtllm.calibrate.moe_op import moe_op_ms

    t = _WarmingTimer()
    ms = moe_op_ms(t, (4096, 8192), ("balanced", "power_law_1.01"), rounds=3)
    assert ms == {"balanced": [[4096, 4.0], [8192, 8.0]], "power_law_1.01": [[4096, 8.0], [8192, 16.0]]}
    pts = [(4096, "balanced"), (8192, "balanced"), (4096, "power_law_1.01"), (8192, "power_law_1.01")]
    assert t.calls[:4] == pts  # every point once before any is timed
    assert t.calls[4:] == pts * 3  # then interleaved rounds, not one point's repeats back to back
    with pytest.raises(ValueError, match="rounds"):
        moe_op_ms(t, (4096,), rounds=0)


def test_the_op_records_commit_is_dwdp_commit_when_the_caller_sets_it(monkeypatch):
    """A copied tree's .git can be stale (the device copies of 2026-12-07 reported an older HEAD than the code that
    ran): DWDP_COMMIT, when set, is the commit the moe_op record names; unset, the checkout's own HEAD."""
    import subprocess

    from dwdp_trtllm.calibrate.pipeline import code_commit

    monkeypatch.setenv("DWDP_COMMIT", "1f8f2d1")
    assert code_commit() == "1f8f2d1"
    monkeypatch.delenv("DWDP_COMMIT")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert code_commit() == head.stdout.strip()
    else:
        assert code_commit().startswith("unknown")
