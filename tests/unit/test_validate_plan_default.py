"""`dwdp validate-plan` and `dwdp plan --target engine` calibrate from one default, named in one place
(commands/plan.bench_dir: the floor campaign shipped with the package), so an installed validate-plan and a
checkout's agree; `--bench-results docs/bench_results` validates a file against its own campaign."""
import json
import shutil
from pathlib import Path

import pytest

from dwdp_trtllm.cli import main
from dwdp_trtllm.commands import plan as plan_cmd

SHIPPED = sorted(plan_cmd.PACKAGE_CAL_DIR.glob("*/b8.json"))[0]
#: the committed campaigns of a source checkout (no command defaults to them)
CHECKOUT = Path(__file__).resolve().parents[2] / "docs/bench_results"


def _validate(capsys, *argv):
    assert main(["validate-plan", str(SHIPPED), "--gpu", "h200", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)[0]["calibration"]


def test_validate_plan_defaults_to_the_shipped_campaign_as_plan_does(tmp_path, monkeypatch, capsys):
    cal = _validate(capsys)
    # the package's one campaign, not docs/bench_results' copy of it (nor a newer one committed there)
    assert [p for p in plan_cmd.PACKAGE_CAL_DIR.iterdir() if p.is_dir()] == [SHIPPED.parent]
    assert cal["campaign"] == str(SHIPPED.parent) and not cal["campaign"].startswith(str(CHECKOUT))
    assert cal["left_out"] and not any(r.startswith("b8.json") for r in cal["runs"])  # leave-one-out still holds
    assert _validate(capsys, "--bench-results", str(CHECKOUT))["campaign"] != cal["campaign"]  # it could differ
    monkeypatch.chdir(tmp_path)  # an installed command, run anywhere: the same default (shown relative to the cwd)
    drop = lambda c: {k: v for k, v in c.items() if k not in ("choice", "notes")}  # noqa: E731
    assert drop(_validate(capsys)) == drop(cal)
    # one place names the default: moved, both commands follow it
    moved = tmp_path / "cal"
    shutil.copytree(SHIPPED.parent, moved / "engine_floor_elsewhere")
    monkeypatch.setattr(plan_cmd, "PACKAGE_CAL_DIR", moved)
    assert _validate(capsys)["campaign"] == str(moved / "engine_floor_elsewhere")
    assert main(["plan", "--target", "engine", "--dwdp-size", "8", "--isl", "8192", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["floor_campaign"].startswith("floor campaign engine_floor_elsewhere ")


def test_bench_results_still_chooses_the_validated_files_own_campaign(capsys):
    own = CHECKOUT / SHIPPED.parent.name / "b8.json"
    if not own.is_file():
        pytest.skip(f"{own}: no committed copy of the shipped campaign (an installed package has no docs/)")
    assert main(["validate-plan", str(own), "--gpu", "h200", "--json", "--bench-results",
                 str(CHECKOUT)]) == 0
    cal = json.loads(capsys.readouterr().out)[0]["calibration"]
    assert cal["campaign"] == str(own.parent) and "the validated file's" in cal["choice"]
