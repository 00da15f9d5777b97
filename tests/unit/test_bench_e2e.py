"""The main job on the real engine (CPU, 2 ranks): `dwdp bench configs/bench/ci_smoke.yaml`.

Checks the files exist and agree with each other: token counts equal across modes and with the workload,
ratios equal DWDP/DEP of the reported numbers, DEP reports all-to-all and DWDP reports copies.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dwdp_trtllm import cli

pytestmark = pytest.mark.slow  # the real engine end to end: ~26 s on 2 cores

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_ci_smoke_bench_on_the_real_engine(tmp_path, capsys, assert_run_consistent):
    out = tmp_path / "bench"
    assert cli.main(["bench", str(ROOT / "configs/bench/ci_smoke.yaml"), "--out", str(out)]) == 0
    assert "DWDP/DEP" in capsys.readouterr().out
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert_run_consistent(run)
    dep, dwdp = run["metrics"]["dep"], run["metrics"]["dwdp"]
    assert dep["layer_us"]["all_to_all"] > 0 and dep["layer_us"]["sync_wait"] > 0
    assert dwdp["layer_us"]["all_to_all"] == 0 and dwdp["layer_us"]["copy"] > 0 and dwdp["copy_bytes"] > 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["mode"] for r in rows] == ["dep", "dwdp"]
    assert all(p.stat().st_size > 5000 for p in (out / "plots").glob("*.png"))
    assert len(list((out / "plots").glob("timeline_*.png"))) == 1
