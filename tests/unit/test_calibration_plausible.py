"""`dwdp plan --calibration` refuses values no GPU node measures: non-finite JSON literals, numbers outside each key's
plausible range, GPU indices and counts beyond the GPUs the file was measured on, a key without provenance, and
nesting Python's JSON reader cannot take; each one line naming the file and the key, exit 2, no traceback."""
import json

import pytest

from dwdp_trtllm.cli import main

AT = "2026-12-05T07:00:00Z"


def _good() -> dict:
    """A schema-2 file as `dwdp calibrate` writes it on 8 H200s (abridged; docs/CALIBRATION.md)."""
    keys = {"peer_copy_gbps": 380.0, "hbm_tbps": 4.2, "all_to_all_gbps": 250.0,
            "interference_by_phase": {"attention_core": 1.2, "gemm": 1.05},
            "peer_pairs": [{"src": 0, "dst": 1, "gbps": 380.0}, {"src": 7, "dst": 6, "gbps": 379.0}],
            "many_to_one": [{"slice_bytes": 0, "destinations": 7, "alone_gbps": 380.0, "together_gbps": 57.0,
                             "slowdown": 6.6}],
            "dep_comm": {"nccl": {"ranks": 8, "bytes_per_rank": 469762048, "ms": 1.64, "gbps": 250.0}}}
    return {"schema_version": 2,
            "measured_on": {"host": "node-a", "at": AT, "device": "cuda", "purpose": "calibration",
                            "gpu_name": "NVIDIA H200", "gpu_count": 8},
            "provenance": {k: {"measured": "node-a", "at": AT, "how": "dwdp calibrate"} for k in keys}, **keys}


def _plan(capsys, tmp_path, text: str) -> tuple[int, str]:
    p = tmp_path / "cal.json"
    p.write_text(text)
    rc = main(["plan", "--isl", "8192", "--dwdp-size", "8", "--dep", "trtllm", "--calibration", str(p)])
    return rc, capsys.readouterr().err.strip()


def _with(change) -> str:
    data = _good()
    change(data)
    return json.dumps(data)


def test_the_good_file_plans(capsys, tmp_path):
    rc, err = _plan(capsys, tmp_path, json.dumps(_good()))
    assert rc == 0 and err == ""


CASES = {
    "Infinity literal": (lambda: json.dumps(_good()).replace("380.0,", "Infinity,", 1), "", "Infinity"),
    "NaN literal": (lambda: json.dumps(_good()).replace("4.2", "NaN", 1), "", "NaN"),
    "1e400": (lambda: json.dumps(_good()).replace("4.2", "1e400", 1), "", "1e400"),
    "hbm_tbps 1e-300": (lambda: _with(lambda d: d.update(hbm_tbps=1e-300)), "hbm_tbps", "[0.01, 100]"),
    "peer_copy_gbps 1e9": (lambda: _with(lambda d: d.update(peer_copy_gbps=1e9)), "peer_copy_gbps", "[0.1, 100000]"),
    "interference 1e308": (lambda: _with(lambda d: d["interference_by_phase"].update(gemm=1e308)),
                           "interference_by_phase.gemm", "[1, 100]"),
    "schema-1 interference 1e308": (lambda: json.dumps({"interference": 1e308}), "interference", "[1, 100]"),
    "gpu_count 0": (lambda: _with(lambda d: d["measured_on"].update(gpu_count=0)), "measured_on.gpu_count", "[1, 1024]"),
    "peer GPU 99 of 8": (lambda: _with(lambda d: d["peer_pairs"].append({"src": 99, "dst": 0, "gbps": 380.0})),
                         "peer_pairs[2].src", "gpu_count 8"),
    "16 destinations of 8": (lambda: _with(lambda d: d["many_to_one"][0].update(destinations=16)),
                             "many_to_one[0].destinations", "gpu_count 8"),
    "dep_comm over 9 ranks of 8": (lambda: _with(lambda d: d["dep_comm"]["nccl"].update(ranks=9)),
                                   "dep_comm.nccl.ranks", "gpu_count 8"),
    "no provenance for a key": (lambda: _with(lambda d: d["provenance"].pop("hbm_tbps")), "provenance.hbm_tbps",
                                "does not say where it was measured"),
    "deeply nested": (lambda: "[" * 100_000 + "]" * 100_000, "", "levels of arrays and objects"),
    "nested past the bound": (lambda: _with(lambda d: d["measured_on"].update(topology=[[[[[[[[[[[[[[[[[[[[[[[[[[[
        [[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])), "", "levels of arrays and objects"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_implausible_values_are_refused_naming_file_and_key(capsys, tmp_path, case):
    make, key, words = CASES[case]
    rc, err = _plan(capsys, tmp_path, make())
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{tmp_path / 'cal.json'}: " in err and words in err, err
    if key:
        assert f"cal.json: {key}: " in err, err


def test_a_deeply_nested_benchmark_file_is_skipped_with_a_note(capsys, tmp_path):
    """--bench-results reads every JSON under a directory tolerantly: a file nested past the bound is skipped and
    said so (it was a RecursionError traceback), the others still calibrate."""
    d = tmp_path / "bench"
    d.mkdir()
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "deep2.json").write_text("[" * 40 + "]" * 40)
    rc = main(["plan", "--isl", "8192", "--dwdp-size", "8", "--target", "engine", "--bench-results", str(d),
               "--verbose"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err, err
    assert "deep.json: not readable JSON (RecursionError)" in out and "deep2.json: nested more than 32 levels" in out
