"""Pinned values of perf/moe_op.py, how `dwdp plan` prices DWDP's routed experts with this project's op: the curve
(log-log between rows, the last row's rate past it with its doublings marked, the first row's time below it), the
table file's checks and their messages, table_with's replace-or-append, the op's label and routing fallback, and
which record dwdp_pricing picks (calibration, shipped table, none) with the reason it gives. Every expected value is
computed here by hand (logs, ratios, literal strings), never through the functions under test."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dwdp_trtllm.perf import moe_op
from dwdp_trtllm.spec.schema import ConfigError

ROOT = Path(__file__).resolve().parents[2]
R1 = SimpleNamespace(name="deepseek-r1", hidden_size=7168, moe_intermediate=2048, num_experts=256, top_k=8)


def _rec(gpu="NVIDIA H200", gemm="multi_buffer", dtype="fp8", rows=((4096.0, 4.0), (16384.0, 16.0)), **model):
    dims = {"name": "deepseek-r1", "hidden": 7168, "moe_inter": 2048, "experts": 256, "top_k": 8, **model}
    return {"gemm": gemm, "weight_dtype": dtype, "model": dims,
            "split": {"dwdp_size": 8, "local_experts": 32, "slot_experts": 224},
            "ms": {"balanced": tuple(rows)},
            "source": {"gpu": gpu, "date": "2026-12-07", "commit": "abc1234", "command": "dwdp calibrate"}}


def _json_rec(**kw) -> dict:
    r = _rec(**kw)
    return {**r, "ms": {"balanced": [[int(t), ms] for t, ms in r["ms"]["balanced"]]}}


# ---- curve_ms ------------------------------------------------------------------------------------------------------
def test_curve_is_log_log_between_rows_not_linear():
    """Rows 1 ms at 1024 and 9 ms at 4096 tokens: 2048 is half way in log(tokens), so exp((ln 1 + ln 9) / 2) = 3 ms
    (linear would give 1 + 8 / 3 = 3.67 ms); 1448 = 1024 * 2^0.5 is a quarter of the way: 9^0.25 = sqrt(3)."""
    rows = ((1024.0, 1.0), (4096.0, 9.0))
    ms, b = moe_op.curve_ms(rows, [2048, 1024 * 2 ** 0.5])
    assert ms.tolist() == pytest.approx([3.0, math.sqrt(3.0)], rel=1e-12)
    assert b.tolist() == [0.0, 0.0]


def test_curve_picks_the_segment_around_the_tokens():
    """Three rows with different slopes: 1 -> 4 ms over 1024 -> 2048 (slope 2), 4 -> 8 ms over 2048 -> 4096 (slope 1)."""
    rows = ((1024.0, 1.0), (2048.0, 4.0), (4096.0, 8.0))
    ms, b = moe_op.curve_ms(rows, [1024 * 2 ** 0.5, 2048 * 2 ** 0.5, 2048, 4096, 8192])
    assert ms.tolist() == pytest.approx([2.0, 4.0 * 2 ** 0.5, 4.0, 8.0, 16.0], rel=1e-12)  # past: the last row's rate
    assert b.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.0, 1.0])


def test_past_the_last_row_its_rate_with_the_doublings_marked():
    """Last row 9 ms at 4096: 8192 tokens 18 ms (one doubling), 16384 36 ms (two), 6144 13.5 ms (log2 1.5)."""
    rows = ((1024.0, 1.0), (4096.0, 9.0))
    ms, b = moe_op.curve_ms(rows, [4096, 6144, 8192, 16384])
    assert ms.tolist() == pytest.approx([9.0, 13.5, 18.0, 36.0], rel=1e-12)
    assert b.tolist() == pytest.approx([0.0, math.log2(1.5), 1.0, 2.0], rel=1e-12)
    assert b[0] == 0.0  # the last row itself is inside, not extrapolated


def test_below_the_first_row_its_time_unmarked_and_tokens_under_one_clamped_to_one():
    rows = ((1024.0, 1.0), (4096.0, 9.0))
    ms, b = moe_op.curve_ms(rows, [512, 1, 0, -5])
    assert ms.tolist() == [1.0, 1.0, 1.0, 1.0] and b.tolist() == [0.0, 0.0, 0.0, 0.0]
    # a record starting at 1 token: 0 tokens are priced as 1 token (0.5 ms), not 2 (1 ms, log-log to 2 ms at 4)
    ms, b = moe_op.curve_ms(((1.0, 0.5), (4.0, 2.0)), [0, 0.5, 2])
    assert ms.tolist() == pytest.approx([0.5, 0.5, 1.0], rel=1e-12) and b.tolist() == [0.0, 0.0, 0.0]


def test_curve_of_a_scalar_is_elementwise():
    ms, b = moe_op.curve_ms(((4096.0, 5.0), (16384.0, 20.0)), 32768)
    assert float(ms) == pytest.approx(40.0) and float(b) == pytest.approx(1.0)


# ---- shapes and GPUs -----------------------------------------------------------------------------------------------
def test_same_shape_compares_the_four_dims_not_the_name():
    assert moe_op.same_shape(_rec(name="my-r1-copy"), R1)
    for k, v in (("hidden", 4096), ("moe_inter", 1536), ("experts", 160), ("top_k", 6)):
        assert not moe_op.same_shape(_rec(**{k: v}), R1), k


def test_gpu_matches_names_a_family_not_a_substring():
    assert moe_op.gpu_matches("NVIDIA H100 80GB HBM3", "h100")
    assert moe_op.gpu_matches("NVIDIA H200", "H200")
    assert not moe_op.gpu_matches("NVIDIA H100 80GB HBM3", "h200")
    assert moe_op.gpu_matches("NVIDIA GB200", "gb200") and not moe_op.gpu_matches("NVIDIA GB200", "b200")


def test_package_table_path_is_the_lowercased_gpus_file_or_none():
    want = ROOT / "dwdp_trtllm" / "data" / "moe_op" / "h200.json"
    assert moe_op.package_table_path("h200").resolve() == want.resolve()
    assert moe_op.package_table_path("H200").resolve() == want.resolve()
    assert moe_op.package_table_path("mi355x") is None


# ---- table files ---------------------------------------------------------------------------------------------------
def _table(*recs, gpu="h200", **extra) -> dict:
    return {"format": "dwdp-moe-op/1", "gpu": gpu, "records": [*recs], **extra}


def test_read_table_refuses_an_unreadable_file_naming_it(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError) as e:
        moe_op.read_table(bad)
    assert (e.value.file, e.value.key) == (str(bad), "")
    assert e.value.expected.startswith("not a readable moe-op table JSON (JSONDecodeError: ")
    with pytest.raises(ConfigError) as e:
        moe_op.read_table(tmp_path / "missing.json")
    assert e.value.file == str(tmp_path / "missing.json")
    assert e.value.expected.startswith("not a readable moe-op table JSON (FileNotFoundError: ")


def test_read_table_parses_rows_and_keeps_the_tables_keys(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_table(_json_rec(), about="mine")))
    t = moe_op.read_table(str(p))
    assert (t["format"], t["gpu"], t["about"]) == ("dwdp-moe-op/1", "h200", "mine")
    (r,) = t["records"]
    assert r["ms"]["balanced"] == ((4096.0, 4.0), (16384.0, 16.0))


@pytest.mark.parametrize("data, key, expected", [
    ([], "format", "expected 'dwdp-moe-op/1' (dwdp_trtllm/data/moe_op/README.md)"),
    ({"format": "dwdp-moe-op/2", "gpu": "h200", "records": []}, "format",
     "expected 'dwdp-moe-op/1' (dwdp_trtllm/data/moe_op/README.md)"),
    ({"gpu": "h200", "records": []}, "format", "expected 'dwdp-moe-op/1' (dwdp_trtllm/data/moe_op/README.md)"),
    ({"format": "dwdp-moe-op/1", "gpu": "h200", "records": []}, "records",
     "expected a non-empty list of records, got []"),
    ({"format": "dwdp-moe-op/1", "gpu": "h200", "records": {"a": 1}}, "records",
     "expected a non-empty list of records, got {'a': 1}"),
])
def test_parse_table_refuses_naming_the_key(data, key, expected):
    with pytest.raises(ConfigError) as e:
        moe_op.parse_table(data, "t.json")
    assert (e.value.file, e.value.key, e.value.expected) == ("t.json", key, expected)


def test_parse_table_refuses_unknown_and_missing_keys():
    """The table's own keys are named from its root (calibration_detail._mapping: the root key "" + "." + name)."""
    with pytest.raises(ConfigError) as e:
        moe_op.parse_table(_table(_json_rec(), extra=1), "t.json")
    assert (e.value.file, e.value.key, e.value.expected) == (
        "t.json", ".extra", "unknown key; expected one of format, gpu, about, records")
    with pytest.raises(ConfigError) as e:
        moe_op.parse_table({"format": "dwdp-moe-op/1", "records": [_json_rec()]}, "t.json")
    assert (e.value.file, e.value.key, e.value.expected) == ("t.json", ".gpu", "missing")
    moe_op.parse_table(_table(_json_rec(), about="x"), "t.json")  # "about" allowed, not needed


def test_parse_table_names_the_bad_record_by_index():
    bad = _json_rec()
    bad["gemm"] = "cutlass"
    with pytest.raises(ConfigError) as e:
        moe_op.parse_table(_table(_json_rec(), bad), "t.json")
    assert (e.value.file, e.value.key) == ("t.json", "records[1].gemm")


def test_read_table_names_its_file_in_the_tables_own_errors(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"format": "dwdp-moe-op/1", "gpu": "h200", "records": []}))
    with pytest.raises(ConfigError) as e:
        moe_op.read_table(p)
    assert (e.value.file, e.value.key) == (str(p), "records")


def test_parse_table_refuses_a_record_of_another_gpu_naming_both():
    h100 = _json_rec(gpu="NVIDIA H100 80GB HBM3", dtype="bf16")
    with pytest.raises(ConfigError) as e:
        moe_op.parse_table(_table(_json_rec(), h100), "t.json")
    assert (e.value.file, e.value.key, e.value.expected) == (
        "t.json", "records[1].source.gpu", "measured on NVIDIA H100 80GB HBM3, in the h200 table")


# ---- table_with ----------------------------------------------------------------------------------------------------
def test_table_with_refuses_a_record_of_another_gpu():
    with pytest.raises(ConfigError) as e:
        moe_op.table_with(_rec(gpu="NVIDIA H100 80GB HBM3"), "h200")
    assert (e.value.file, e.value.key, e.value.expected) == (
        None, "moe_op.source.gpu", "measured on NVIDIA H100 80GB HBM3, not h200")


def test_table_with_starts_a_table_with_the_default_about():
    t = moe_op.table_with(_rec(), "H200")
    assert t == {"format": "dwdp-moe-op/1", "gpu": "h200",
                 "about": "This project's whole routed-expert op, ms per call; dwdp_trtllm/data/moe_op/README.md. "
                          "Written by scripts/moe_op_table.py.",
                 "records": [_json_rec()]}
    assert t["records"][0]["ms"]["balanced"] == [[4096, 4.0], [16384, 16.0]]
    assert all(type(row[0]) is int for row in t["records"][0]["ms"]["balanced"])


def test_table_with_replaces_only_the_record_of_the_same_gemm_dtype_and_shapes():
    """Records differing from the new one in one field each stay; the one equal in all of them is replaced."""
    others = [_rec(gemm="merge"), _rec(dtype="bf16"), _rec(hidden=4096), _rec(moe_inter=1536), _rec(experts=160),
              _rec(top_k=6)]
    old = _rec(rows=((4096.0, 7.0),))
    new = _rec(rows=((4096.0, 3.0), (8192.0, 5.0)))
    t = moe_op.table_with(new, "h200", {"records": [*others, old], "about": "kept"})
    assert t["about"] == "kept"
    assert len(t["records"]) == 7
    same = [r for r in t["records"] if (r["gemm"], r["weight_dtype"], r["model"]["hidden"], r["model"]["moe_inter"],
                                         r["model"]["experts"], r["model"]["top_k"]) ==
            ("multi_buffer", "fp8", 7168, 2048, 256, 8)]
    assert [r["ms"]["balanced"] for r in same] == [[[4096, 3.0], [8192, 5.0]]]


def test_table_with_sorts_by_gemm_then_dtype_then_shapes():
    recs = [_rec(gemm="multi_buffer", dtype="fp8"), _rec(gemm="merge", dtype="fp8"),
            _rec(gemm="multi_buffer", dtype="bf16", experts=160), _rec(gemm="multi_buffer", dtype="bf16")]
    t = moe_op.table_with(recs[0], "h200", {"records": recs[1:]})
    got = [(r["gemm"], r["weight_dtype"], r["model"]["experts"]) for r in t["records"]]
    assert got == [("merge", "fp8", 256), ("multi_buffer", "bf16", 160), ("multi_buffer", "bf16", 256),
                   ("multi_buffer", "fp8", 256)]


def test_dumps_table_writes_each_row_on_one_line():
    t = {"format": "dwdp-moe-op/1", "records": [{"ms": {"balanced": [[4096, 5.36], [8192, 1e-05]]}}]}
    assert moe_op.dumps_table(t) == (
        '{\n "format": "dwdp-moe-op/1",\n "records": [\n  {\n   "ms": {\n    "balanced": [\n'
        '     [4096, 5.36],\n     [8192, 1e-05]\n    ]\n   }\n  }\n ]\n}\n')


# ---- the op --------------------------------------------------------------------------------------------------------
def test_the_ops_label_names_path_split_where_gpu_date_and_commit():
    op = moe_op.DwdpExpertOp(_rec(dtype="bf16"), "calibration c.json")
    assert op.label == ("this project's op (multi_buffer, bf16, [32 local | 224 slot]; calibration c.json: "
                        "NVIDIA H200, 2026-12-07, commit abc1234)")


def test_a_measured_routing_is_its_own_row_and_a_missing_one_is_balanced_times_the_ratio():
    rec = _rec(rows=((4096.0, 4.0), (16384.0, 16.0)))
    rec["ms"]["power_law_1.01"] = ((4096.0, 5.0), (16384.0, 20.0))
    op = moe_op.DwdpExpertOp(rec, "x")
    ms, b = op.ms("power_law_1.01", [8192, 32768], ratio_to_balanced=lambda t: 100.0)
    assert ms.tolist() == pytest.approx([10.0, 40.0]) and b.tolist() == pytest.approx([0.0, 1.0])  # ratio not read
    seen = []

    def ratio(t):
        seen.append(np.asarray(t).tolist())
        return np.asarray(t, float) / 8192.0

    ms, b = op.ms("power_law_1.2", [8192, 32768], ratio_to_balanced=ratio)
    assert seen == [[8192, 32768]]
    assert ms.tolist() == pytest.approx([8.0 * 1.0, 32.0 * 4.0]) and b.tolist() == pytest.approx([0.0, 1.0])
    ms, b = op.ms("power_law_1.2", [8192])
    assert ms.tolist() == pytest.approx([8.0]) and b.tolist() == [0.0]  # no ratio: the balanced row


# ---- dwdp_pricing --------------------------------------------------------------------------------------------------
def _cal(rec, sources=("c.json",)):
    return SimpleNamespace(moe_op=rec, sources=sources)


def _shipped_h200() -> dict:
    d = json.loads((ROOT / "dwdp_trtllm" / "data" / "moe_op" / "h200.json").read_text())
    (r,) = d["records"]
    return r


def test_other_gemm_paths_are_tensorrt_llms_table_with_no_reason():
    for gemm in ("merge", "composite_view", None):
        p = moe_op.dwdp_pricing(R1, "h200", "fp8", gemm, _cal(_rec()))
        assert p.op is None and p.why == "", gemm


def test_a_matching_calibration_record_prices_with_the_last_named_file():
    rec = _rec()
    p = moe_op.dwdp_pricing(R1, "h200", "fp8", "multi_buffer", _cal(rec, ("", "a.json", "b.json", "")))
    assert p.op.record is rec and p.op.where == "calibration b.json" and p.why == ""
    p = moe_op.dwdp_pricing(R1, "h200", "fp8", "multi_buffer", _cal(rec, ("", "")))
    assert p.op.where == "calibration the calibration"


def test_a_calibration_record_of_another_gpu_is_refused_naming_file_key_and_both_gpus():
    with pytest.raises(ConfigError) as e:
        moe_op.dwdp_pricing(R1, "h200", "fp8", "multi_buffer",
                            _cal(_rec(gpu="NVIDIA H100 80GB HBM3"), ("a.json", "b.json")))
    assert (e.value.file, e.value.key, e.value.expected) == (
        "b.json", "moe_op.source.gpu", "measured on NVIDIA H100 80GB HBM3, not this plan's --gpu h200: calibrate on "
                                       "the GPU you plan for, or leave this file out")


@pytest.mark.parametrize("kw", [dict(gemm="merge"), dict(dtype="bf16"), dict(top_k=6)])
def test_a_calibration_record_of_other_shapes_falls_back_to_the_shipped_table_and_says_why(kw):
    rec = _rec(**kw)
    p = moe_op.dwdp_pricing(R1, "h200", "fp8", "multi_buffer", _cal(rec))
    assert p.op.record == moe_op.read_table(ROOT / "dwdp_trtllm/data/moe_op/h200.json")["records"][0]
    assert p.op.record["source"]["commit"] == _shipped_h200()["source"]["commit"]
    assert p.op.where == "shipped table data/moe_op/h200.json"
    assert p.why == (f"the calibration's moe_op is {rec['weight_dtype']} {rec['gemm']} on deepseek-r1's shapes, not "
                     "this plan's; ")


def test_without_a_record_the_shipped_table_of_the_gpu_any_case():
    for cal in (None, _cal({}), _cal(None)):
        p = moe_op.dwdp_pricing(R1, "H200", "fp8", "multi_buffer", cal)
        assert p.op.where == "shipped table data/moe_op/h200.json" and p.why == ""
        assert p.op.record["ms"]["balanced"] == tuple((float(t), ms) for t, ms in _shipped_h200()["ms"]["balanced"])


def test_no_shipped_record_of_the_dtype_shapes_or_gpu_is_tensorrt_llms_table_with_the_reason():
    p = moe_op.dwdp_pricing(R1, "h200", "bf16", "multi_buffer", None)
    assert p.op is None and p.why == "no measurement of this project's op (bf16, deepseek-r1's shapes) on h200"
    small = SimpleNamespace(**{**vars(R1), "name": "small", "num_experts": 64})
    p = moe_op.dwdp_pricing(small, "h200", "fp8", "multi_buffer", None)
    assert p.op is None and p.why == "no measurement of this project's op (fp8, small's shapes) on h200"
    p = moe_op.dwdp_pricing(R1, "mi355x", "fp8", "multi_buffer", None)
    assert p.op is None and p.why == "no measurement of this project's op (fp8, deepseek-r1's shapes) on mi355x"
    rec = _rec(gpu="AMD Instinct MI355X", gemm="merge")
    p = moe_op.dwdp_pricing(R1, "mi355x", "fp8", "multi_buffer", _cal(rec))
    assert p.op is None and p.why == ("the calibration's moe_op is fp8 merge on deepseek-r1's shapes, not this "
                                      "plan's; no measurement of this project's op (fp8, deepseek-r1's shapes) on "
                                      "mi355x")


def test_the_shipped_records_of_a_gpu_or_none():
    a = moe_op._shipped("h200")
    assert isinstance(a, tuple) and len(a) == 1 and a[0]["source"]["gpu"] == "NVIDIA H200"
    assert moe_op._shipped("mi355x") == ()
