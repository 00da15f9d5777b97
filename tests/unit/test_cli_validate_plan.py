"""`dwdp validate-plan` compares a run only with a prediction for the device it ran on (refusal before any table)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dwdp_trtllm.cli import main

CFG = {"model": {"preset": "deepseek-r1", "num_layers": 3, "first_k_dense": 1}, "dwdp": {"dwdp_size": 1, "weight_dtype": "bf16"},
       "workload": {"isl": 8192, "isl_dist": "uniform_ratio", "max_num_tokens": 16384, "tokens_per_rank": 81920},
       "run": {"device": "cuda", "ranks": 1, "warmup_iters": 1, "modes": ["dep"]}}


def _results(tmp_path, device: str, name: str | None):
    cfg = json.loads(json.dumps(CFG))
    cfg["run"]["device"] = device
    env = {"device": device, **({"device_name": name} if name else {})}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": [{"config": cfg, "env": env, "metrics": {"dep": {"tps_per_gpu": 1000.0}}}]}))
    return str(path)


@pytest.mark.parametrize("device,name,argv,said", [
    ("cpu", None, [], "measured on cpu: the planner predicts GPUs"),  # the README's CPU result vs an H200 prediction
    ("cpu", None, ["--gpu", "h100"], "measured on cpu, but the prediction is for h100"),
    ("cuda", "NVIDIA H200", ["--gpu", "h100"], "measured on NVIDIA H200, but the prediction is for h100"),
    ("cuda", "Some Accelerator X", [], "measured on Some Accelerator X: no single GPU"),
])
def test_another_device_is_refused_before_any_table(tmp_path, capsys, device, name, argv, said):
    path = _results(tmp_path, device, name)
    assert main(["validate-plan", path, "--no-bench-results", *argv]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and said in cap.err and "--allow-other-device" in cap.err, cap.err
    assert len(cap.err.strip().splitlines()) == 1


def test_allow_other_device_compares_with_a_loud_note(tmp_path, capsys):
    path = _results(tmp_path, "cpu", None)
    assert main(["validate-plan", path, "--no-bench-results", "--allow-other-device", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)[0]["runs"][0]
    assert any(n.startswith("OTHER DEVICE: measured on cpu, predicted for h200") for n in run["notes"])


def test_the_gpu_defaults_to_the_one_the_results_name(tmp_path, capsys):
    path = _results(tmp_path, "cuda", "NVIDIA H100 80GB HBM3")
    assert main(["validate-plan", path, "--no-bench-results", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)[0]["runs"][0]
    assert run["config"]["gpu"] == "h100" and not any("OTHER DEVICE" in n for n in run["notes"])


def test_the_other_device_note_comes_before_the_table(tmp_path, capsys):
    """Issue 21 item 4: the comparison of a CPU run with an H200 prediction was explained only after the table."""
    path = _results(tmp_path, "cpu", None)
    assert main(["validate-plan", path, "--no-bench-results", "--allow-other-device"]) == 0
    out = capsys.readouterr().out
    note, table = out.find("OTHER DEVICE: measured on cpu, predicted for h200"), out.find("rel. error")
    assert 0 <= note < table and out.count("OTHER DEVICE") == 1, out


def _paragraphs(text: str) -> list[str]:
    """Lines with their wrapped continuation lines (indented) joined: the prose validate-plan wraps at 80 columns."""
    out: list[str] = []
    for ln in text.splitlines():
        if ln.startswith("  ") and out:
            out[-1] += " " + ln.strip()
        else:
            out.append(ln)
    return out


def test_calibration_is_one_line_before_the_table_unless_verbose(tmp_path, capsys):
    """validate-plan printed ~16 'calibration:' lines with absolute paths before its table: one line (the floor
    campaign chosen, relative to the data's root) unless --verbose, which lists every note, also relative."""
    import shutil

    checkout = Path(__file__).resolve().parents[2] / "docs/bench_results"  # the committed campaigns

    bench = tmp_path / "bench"
    for camp in ("engine_floor_2026-12-03b", "engine_floor_2026-12-03c"):
        shutil.copytree(checkout / camp, bench / camp)
    path = _results(tmp_path, "cuda", "NVIDIA H200")
    assert main(["validate-plan", path, "--bench-results", str(bench)]) == 0
    out = capsys.readouterr().out
    head = _paragraphs(out[:out.find("rel. error")])
    cal = [ln for ln in head if ln.startswith("calibration")]
    assert len(cal) == 1 and cal[0].startswith(f"calibration (under {bench}): floor campaign engine_floor_2026-12-03c "
                                               "(the newest complete campaign;"), head
    assert "1 other campaign(s) not used, 1 of them incomplete" in cal[0] and "--verbose lists them" in cal[0]
    assert main(["validate-plan", path, "--bench-results", str(bench), "--verbose"]) == 0
    out = capsys.readouterr().out
    cal = [ln for ln in _paragraphs(out[:out.find("rel. error")]) if ln.startswith("calibration: ")]
    assert len(cal) > 1 and any("not used: campaign engine_floor_2026-12-03b" in ln for ln in cal), cal
    assert not any(str(bench) in ln or str(tmp_path) in ln for ln in cal), cal


def test_gpu_takes_a_spec_file_matched_by_its_name(tmp_path, capsys):
    """--gpu FILE (or --gpu-spec FILE) as `dwdp plan --gpu-spec`: the shipped h200.yaml predicts as --gpu h200, and an
    accelerator the planner does not ship is validated against the device its results name."""
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "dwdp_trtllm" / "data" / "gpus" / "h200.yaml"
    path = _results(tmp_path, "cuda", "NVIDIA H200")
    assert main(["validate-plan", path, "--no-bench-results", "--gpu", "h200", "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert main(["validate-plan", path, "--no-bench-results", "--gpu-spec", str(shipped), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == want

    acme = tmp_path / "x200.yaml"
    acme.write_text(shipped.read_text().replace("name: h200", "name: x200"))
    (tmp_path / "acme").mkdir()
    acme_results = _results(tmp_path / "acme", "cuda", "Acme X200")
    assert main(["validate-plan", acme_results, "--no-bench-results", "--gpu", str(acme), "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)
    (run,) = got["runs"]
    assert run["config"]["gpu"] == "x200"
    assert [c["predicted"] for c in run["comparisons"]] == [c["predicted"] for c in want[0]["runs"][0]["comparisons"]]
    # ... and refused when the results name another device
    assert main(["validate-plan", path, "--no-bench-results", "--gpu", str(acme)]) == 2
    assert "measured on NVIDIA H200, but the prediction is for x200" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmemory_gb: 80\n")
    assert main(["validate-plan", path, "--no-bench-results", "--gpu", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err
