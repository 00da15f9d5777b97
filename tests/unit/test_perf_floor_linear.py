"""Floor calibration with FP8 linear layers (issue 25): the projections' and dense GEMMs' floor rates and the engine's
attention / other factors come from the runs whose linear layers ran in the dtype being priced; equal FLOPs in another
linear dtype are not the same work (repeatability); `dwdp plan` says when the campaign measured no such run."""
import json

import pytest
from test_perf_floor_calibration import RATES, _run, _write  # noqa: E402  (tests/unit is on sys.path)

from dwdp_trtllm.perf.calibration import Calibration
from dwdp_trtllm.perf.floor_calibration import FloorCalibration
from dwdp_trtllm.perf.floor_points import linear_dtype, points_from_bench, run_linear_dtype

FP8_LINEAR = 1.5  # the synthetic FP8 linear layers' floor runs this much faster (projections and other)


def _fp8_linear(run: dict, speed: float = FP8_LINEAR, factor: float = 1.0) -> dict:
    """`run` as measured with FP8 linear layers: the floor says so (bench/floor.py's `linear_layers`), the projections'
    and other's floor (and measured) times are `speed` x shorter; other's measured / floor x `factor`."""
    run["floor"]["linear_layers"] = "fp8 block scales"
    run["config"]["model"]["fp8_linear"] = None
    for f in run["floor"].values():
        if not isinstance(f, dict):
            continue
        f["floor_tflops"] = {**f["floor_tflops"], "attention_proj": RATES["attention_proj"] * speed,
                             "other": RATES["other"] * speed}
        for k in ("attention_proj", "other"):
            f["floor_ms"][k] /= speed
        f["floor_ms"]["attention"] = f["floor_ms"]["attention_proj"] + f["floor_ms"]["attention_core"]
        f["measured_ms"]["other"] *= factor / speed
    return run


def _campaign(tmp_path, fp8_linear: bool):
    camp = tmp_path / "engine_floor_x"
    for isl, mnt in ((2048, 16384), (8192, 16384), (32768, 32768)):
        _write(camp / f"b{isl // 1024}.json", _run(isl=isl, mnt=mnt, modes=("dep", "dwdp") if isl == 8192 else ("dep",)))
        f = _run(isl=isl, mnt=mnt, dtype="fp8")
        _write(camp / f"f{isl // 1024}.json", _fp8_linear(f, factor=1.2) if fp8_linear else f)
    pts = []
    for p in sorted(camp.glob("*.json")):
        pts += points_from_bench(json.loads(p.read_text()), file=str(p))[0]
    return camp, FloorCalibration(tuple(pts)).select()


def test_the_linear_dtype_of_a_run():
    assert linear_dtype({"linear_layers": "fp8 block scales"}) == "fp8"
    assert linear_dtype({"linear_layers": "model dtype"}) == linear_dtype({}) == "bf16"  # floors before issue 25
    cfg = lambda wd, **m: {"config": {"model": m, "dwdp": {"weight_dtype": wd}}}  # noqa: E731
    assert run_linear_dtype(cfg("fp8", fp8_linear=None)) == "fp8" and run_linear_dtype(cfg("bf16", fp8_linear=None)) == "bf16"
    assert run_linear_dtype(cfg("fp8", fp8_linear=False)) == "bf16" and run_linear_dtype(cfg("bf16", fp8_linear=True)) == "fp8"
    assert run_linear_dtype(cfg("fp8")) == "bf16"  # a config written before the key existed: BF16 linear layers


def test_floor_rates_and_factors_follow_the_linear_dtype(tmp_path):
    _, sel = _campaign(tmp_path, fp8_linear=True)
    assert {p.linear_dtype for p in sel.points} == {"bf16", "fp8"} and len(sel.points) == 7
    for key in ("attention_proj", "other"):
        assert sel.rate(key, 16384, 8192, "bf16") == pytest.approx(RATES[key])
        assert sel.rate(key, 16384, 8192, "fp8") == pytest.approx(RATES[key] * FP8_LINEAR)
    assert sel.factor("other", 16384, 8192, linear_dtype="bf16") == pytest.approx(1.7)
    assert sel.factor("other", 16384, 8192, linear_dtype="fp8") == pytest.approx(1.7 * 1.2)
    # the same attention FLOPs at another linear dtype are other work: not marked as unrepeatable (the BF16 and FP8
    # runs' attention times are FP8_LINEAR apart in the projections)
    assert not any("not repeatable" in why for p in sel.points for why in p.excluded.values()), sel.notes


def test_without_fp8_linear_runs_every_run_prices_them(tmp_path):
    """A campaign measured before issue 25 (every run's linear layers BF16) prices FP8 ones at those rates, as before."""
    _, sel = _campaign(tmp_path, fp8_linear=False)
    assert not sel.linear_measured("fp8") and sel.linear_measured("bf16")
    assert sel.rate("other", 16384, 8192, "fp8") == pytest.approx(sel.rate("other", 16384, 8192, "bf16"))


def test_plan_prices_fp8_linear_layers_from_the_runs_that_ran_them(tmp_path):
    """`dwdp plan --target engine` for an FP8 checkpoint: the campaign with FP8 linear layers gives shorter attention and
    other phases than one without (whose one line says that it has none); a BF16 plan is the same with either."""
    from dwdp_trtllm.cli import main

    out = {}
    for on in (False, True):
        d = tmp_path / ("on" if on else "off")
        _campaign(d, fp8_linear=on)
        for wd in ("fp8", "bf16"):
            argv = ["plan", "--target", "engine", "--bench-results", str(d), "--gpu", "h200", "--weight-dtype", wd,
                    "--num-layers", "8", "--dwdp-size", "4", "--mnt", "16384", "--isl", "8192", "--json"]
            out[on, wd] = json.loads(capsysless(main, argv))
    off8, on8 = out[False, "fp8"]["rows"][0], out[True, "fp8"]["rows"][0]
    assert on8["t_attention_us"] < off8["t_attention_us"] and on8["t_other_us"] < off8["t_other_us"]
    assert on8["t_experts_dwdp_us"] == pytest.approx(off8["t_experts_dwdp_us"])
    assert out[False, "bf16"]["rows"][0]["t_compute_us"] == pytest.approx(out[True, "bf16"]["rows"][0]["t_compute_us"])
    assert "no run of it ran the linear layers in fp8" in out[False, "fp8"]["floor_campaign"]
    assert "linear layers" not in out[True, "fp8"]["floor_campaign"]
    assert "linear layers" not in out[False, "bf16"]["floor_campaign"]


def capsysless(main, argv) -> str:
    """stdout of `main(argv)` (the JSON plan)."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return buf.getvalue()


def test_validate_plan_prices_a_run_in_its_own_linear_dtype(tmp_path):
    """A run with model.fp8_linear false (FP8 experts, BF16 linear layers) is predicted with the BF16 linear rates."""
    from dwdp_trtllm.commands.validate_plan import spec_for_run

    run = _run(dtype="fp8")
    run["config"]["model"]["fp8_linear"] = False
    del run["floor"]
    spec, _ = spec_for_run(run, type("A", (), {"gpu": "h200", "interference": None, "a2a_dedup": False,
                                               "samples": 8})(), Calibration())
    assert spec.params().dense_dtype == "bf16" and spec.weight_dtype == "fp8"
    run["config"]["model"]["fp8_linear"] = None
    spec, _ = spec_for_run(run, type("A", (), {"gpu": "h200", "interference": None, "a2a_dedup": False,
                                               "samples": 8})(), Calibration())
    assert spec.params().dense_dtype == "fp8"
