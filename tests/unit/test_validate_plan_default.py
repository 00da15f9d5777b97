"""`dwdp validate-plan` and `dwdp plan --target engine` calibrate from one default, named in one place
(commands/plan.bench_dir: the floor campaign shipped with the package), so an installed validate-plan and a
checkout's agree; `--bench-results docs/bench_results` validates a file against its own campaign."""
import json
import shutil

import pytest

from dwdp_trtllm.cli import main
from dwdp_trtllm.commands import plan as plan_cmd

SHIPPED = sorted(plan_cmd.PACKAGE_CAL_DIR.glob("*/b8.json"))[0]


def _validate(capsys, *argv):
    assert main(["validate-plan", str(SHIPPED), "--gpu", "h200", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)[0]["calibration"]


def test_validate_plan_defaults_to_the_shipped_campaign_as_plan_does(tmp_path, monkeypatch, capsys):
    cal = _validate(capsys)
    assert cal["campaign"] == str(SHIPPED.parent)  # not docs/bench_results' copy of it
    assert cal["left_out"] and not any(r.startswith("b8.json") for r in cal["runs"])  # leave-one-out still holds
    monkeypatch.setattr(plan_cmd, "DEFAULT_BENCH_DIR", tmp_path / "missing")  # an installed package: no docs/
    assert _validate(capsys) == cal
    # one place names the default: moved, both commands follow it
    moved = tmp_path / "cal"
    shutil.copytree(SHIPPED.parent, moved / "engine_floor_elsewhere")
    monkeypatch.setattr(plan_cmd, "PACKAGE_CAL_DIR", moved)
    assert _validate(capsys)["campaign"] == str(moved / "engine_floor_elsewhere")
    assert main(["plan", "--target", "engine", "--dwdp-size", "8", "--isl", "8192", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["floor_campaign"].startswith("floor campaign engine_floor_elsewhere ")


def test_bench_results_still_chooses_the_validated_files_own_campaign(capsys):
    own = plan_cmd.DEFAULT_BENCH_DIR / SHIPPED.parent.name / "b8.json"
    if not own.is_file():
        pytest.skip(f"{own}: no committed copy of the shipped campaign (an installed package has no docs/)")
    assert main(["validate-plan", str(own), "--gpu", "h200", "--json", "--bench-results",
                 str(plan_cmd.DEFAULT_BENCH_DIR)]) == 0
    cal = json.loads(capsys.readouterr().out)[0]["calibration"]
    assert cal["campaign"] == str(own.parent) and "the validated file's" in cal["choice"]
