"""A calibration file is used only for the GPU it measured (unless accepted on purpose), and a file that changes no
number under the chosen --target is said to be unused, not listed as measured."""
import json

import pytest

from dwdp_trtllm.cli import main
from wrapped_text import paragraph  # noqa: E402  (pytest puts tests/unit on sys.path: no __init__.py)

H100 = "NVIDIA H100 80GB HBM3"
#: compute only: what a one-GPU `dwdp calibrate` measures (kernels; every peer input stays a prior)
COMPUTE = {"grouped_gemm_tflops": {"fp8": [[4096, 700.0], [16384, 900.0]]}, "hbm_tbps": 3.0,
           "attention_us_by_isl": [[2048, 400.0], [8192, 5200.0]]}
PLAN = ["plan", "--isl", "8192", "--mnt", "16384", "--dwdp-size", "8", "--dep", "trtllm"]


def _schema2(tmp_path, gpu_name: str, keys: dict, name: str = "cal.json"):
    data = {"schema_version": 2,
            "measured_on": {"host": "node-a", "at": "2026-12-05T07:00:00Z", "device": "cuda", "purpose": "calibration",
                            "gpu_name": gpu_name, "gpu_count": 1},
            "provenance": {k: {"measured": "node-a", "at": "2026-12-05T07:00:00Z", "how": "test"} for k in keys},
            **keys}
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def _json(capsys, argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("schema", [1, 2])
def test_a_calibration_of_another_gpu_is_refused_naming_both(capsys, tmp_path, schema):
    if schema == 2:
        cal, key = _schema2(tmp_path, H100, COMPUTE), "measured_on.gpu_name"
    else:
        cal, key = tmp_path / "cal1.json", "gpu"
        cal.write_text(json.dumps({"gpu": H100, **COMPUTE}))
    assert main([*PLAN, "--gpu", "h200", "--calibration", str(cal)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(cal) in err and key in err and H100 in err and "h200" in err and "--accept-calibration-gpu" in err


def test_a_gpu_spec_file_is_named_when_the_calibration_does_not_match(capsys, tmp_path):
    from dwdp_trtllm.perf.hardware import SPEC_DIR
    cal = _schema2(tmp_path, H100, COMPUTE)
    spec = SPEC_DIR / "b200.yaml"
    assert main([*PLAN, "--gpu-spec", str(spec), "--calibration", str(cal)]) == 2
    err = capsys.readouterr().err
    assert f"--gpu-spec {spec}" in err and H100 in err


def test_the_matching_gpu_and_an_accepted_mismatch_are_used(capsys, tmp_path):
    h100 = _schema2(tmp_path, H100, COMPUTE)
    argv = [*PLAN, "--target", "engine", "--no-bench-results"]
    base = _json(capsys, [*argv, "--gpu", "h100"])
    same = _json(capsys, [*argv, "--gpu", "h100", "--calibration", str(h100)])
    assert same["rows"][0]["t_dep_us"] != base["rows"][0]["t_dep_us"]  # the engine target reads compute
    on_purpose = _json(capsys, [*argv, "--gpu", "h200", "--calibration", str(h100), "--accept-calibration-gpu"])
    assert any("--accept-calibration-gpu" in n and H100 in n for n in on_purpose["calibration_notes"])


def test_a_file_that_changes_no_number_under_the_target_is_not_listed_as_measured(capsys, tmp_path):
    cal = _schema2(tmp_path, "NVIDIA H200", COMPUTE)
    with_file = _json(capsys, [*PLAN, "--calibration", str(cal)])
    without = _json(capsys, PLAN)
    assert with_file["rows"] == without["rows"]  # TensorRT-LLM's tables price compute: the file changes nothing
    assert with_file["calibration_not_used"] == {str(cal): ["grouped_gemm_tflops", "attention_us_by_isl", "hbm_tbps"]}
    assert not any(i["status"] == "measured" and str(cal) in i["source"] for i in with_file["inputs"])
    assert main([*PLAN, "--calibration", str(cal)]) == 0
    inputs = paragraph(capsys.readouterr().out, "inputs:")
    assert f"not used by --target trtllm: {cal} (" in inputs and "measured:" not in inputs
    # the engine target prices compute from the same file: measured, and the numbers move
    eng = [*PLAN, "--target", "engine", "--no-bench-results"]
    e_with, e_without = _json(capsys, [*eng, "--calibration", str(cal)]), _json(capsys, eng)
    assert e_with["rows"][0]["t_dep_us"] != e_without["rows"][0]["t_dep_us"]
    assert e_with["calibration_not_used"] == {}
    assert {"input": "compute efficiencies", "status": "measured", "source": str(cal)} in e_with["inputs"]


def test_a_file_with_a_used_key_lists_only_its_unused_keys_as_unused(capsys, tmp_path):
    cal = _schema2(tmp_path, "NVIDIA H200", {**COMPUTE, "peer_copy_gbps": 300.0})
    out = _json(capsys, [*PLAN, "--calibration", str(cal)])
    assert {"input": "peer bandwidth", "status": "measured", "source": str(cal)} in out["inputs"]
    assert out["calibration_not_used"] == {str(cal): ["grouped_gemm_tflops", "attention_us_by_isl", "hbm_tbps"]}


def test_size_refuses_a_calibration_of_another_gpu_and_takes_it_on_purpose(capsys, tmp_path):
    """`dwdp size` loads its calibration through `dwdp plan`'s handling: the same refusal, the same flag."""
    from dwdp_trtllm.commands import size as size_cmd
    from dwdp_trtllm.cli import build_parser
    h100 = _schema2(tmp_path, H100, COMPUTE)
    base = ["size", "--rate", "1", "--gpu", "h200", "--target", "engine", "--calibration", str(h100)]
    assert main([*base, "--duration", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(h100) in err and H100 in err and "--accept-calibration-gpu" in err
    spec = size_cmd.plan_spec(build_parser().parse_args([*base, "--accept-calibration-gpu"]))
    assert any("--accept-calibration-gpu" in n and H100 in n for n in spec.calibration.notes)
