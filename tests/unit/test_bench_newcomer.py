"""What a newcomer meets in `dwdp bench` (issue 23): --force, no stale lock, --floor refused on a CPU,
CPU runs labelled as functional demos, one ratio direction, tables that fit 80 columns."""
from __future__ import annotations

import io
import json

import pytest
import yaml

from dwdp_trtllm import cli
from dwdp_trtllm.bench import runner

CFG = {
    "model": {"preset": "tiny", "dtype": "float32"},
    "dwdp": {"dwdp_size": 2, "weight_dtype": "float32"},
    "workload": {"isl": 200, "imbalance_cv": 0.2, "requests_per_rank": 6, "max_num_tokens": 256},
    "run": {"device": "cpu", "ranks": 2, "modes": ["dep", "dwdp"]},
}


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "bench.yaml"
    p.write_text(yaml.safe_dump(CFG))
    return p


def test_force_runs_finished_points_again_and_no_lock_is_left(cfg_file, tmp_path, engine, capsys):
    out = tmp_path / "out"
    assert cli.main(["bench", str(cfg_file), "--out", str(out), "--no-plots"]) == 0
    assert [m for m, _ in engine] == ["dep", "dwdp"]
    assert not (out / ".dwdp.lock").exists()  # a clean exit leaves no lock file
    engine.clear()
    assert cli.main(["bench", str(cfg_file), "--out", str(out), "--no-plots"]) == 0
    assert engine == [] and "--force runs them again" in capsys.readouterr().out
    assert cli.main(["bench", str(cfg_file), "--out", str(out), "--no-plots", "--force"]) == 0
    assert [m for m, _ in engine] == ["dep", "dwdp"]
    assert not (out / ".dwdp.lock").exists()


@pytest.mark.parametrize("width", [40, 80, 200])
def test_lines_naming_a_path_are_never_split_whatever_the_width(cfg_file, tmp_path, engine, width):
    """The resume hint and the lines naming the output folder come out whole on any console width and any path
    length (rich would otherwise break them wherever the path puts the edge)."""
    from rich.console import Console

    out = tmp_path / ("a_long_folder_name_" * 4) / "out"
    runner.run_bench(cfg_file, out_dir=out, plots=False, console=Console(width=width, file=io.StringIO()))
    con = Console(width=width, record=True, file=io.StringIO())
    runner.run_bench(cfg_file, out_dir=out, plots=False, console=con)
    lines = con.export_text().splitlines()
    assert f"skipping 1 finished point(s) found in {out / 'points'} (--force runs them again)" in lines
    assert f"dwdp bench: 1 point(s); results in {out}" in lines
    assert any(ln.startswith(f"wrote {out / 'results.json'}, {out / 'results.csv'}") for ln in lines), lines


def test_a_failed_run_leaves_no_lock_and_a_held_lock_still_refuses(cfg_file, tmp_path, monkeypatch):
    out = tmp_path / "out"

    def boom(cfg, mode, queues, *, progress=None):
        raise RuntimeError("rank died")

    monkeypatch.setattr(runner, "engine_run_mode", lambda: boom)
    with pytest.raises(RuntimeError):
        runner.run_bench(cfg_file, out_dir=out, plots=False)
    assert not (out / ".dwdp.lock").exists()
    with runner.out_lock(out):
        assert (out / ".dwdp.lock").read_text() .startswith("pid ")
        with pytest.raises(Exception, match="another `dwdp bench`"):
            with runner.out_lock(out):
                pass
    assert not (out / ".dwdp.lock").exists()


def test_floor_on_a_cpu_is_refused_in_one_line(cfg_file, tmp_path, engine, capsys):
    code = cli.main(["bench", str(cfg_file), "--out", str(tmp_path / "o"), "--floor"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and "--floor" in err[0] and "cuda" in err[0], err
    assert engine == []  # refused before any rank started


def test_floor_check_reads_the_config_once(cfg_file, tmp_path, monkeypatch):
    """--floor's device check looks at the points run_bench loads (was: a load of its own before, the file read
    twice); what runs after the checks is stubbed: this machine has no GPU for the cuda points --floor accepts."""
    from pathlib import Path

    cfg_file.write_text(yaml.safe_dump({**CFG, "run": {**CFG["run"], "device": "cuda"}}))
    reads, real = [], Path.read_text

    def spy(self, *a, **kw):
        reads.append(Path(self).resolve())
        return real(self, *a, **kw)
    seen = []
    monkeypatch.setattr(Path, "read_text", spy)
    monkeypatch.setattr(runner, "check_device_present", lambda *a, **kw: None)
    monkeypatch.setattr(runner, "preflight", lambda *a, **kw: None)
    monkeypatch.setattr(runner, "_run_bench_locked", lambda out, path, swept, points, *a: seen.append(points) or
                        {"consistent": True})
    assert cli.main(["bench", str(cfg_file), "--out", str(tmp_path / "o"), "--floor"]) == 0
    assert reads.count(cfg_file.resolve()) == 1, reads
    assert [p.config.run.device for p in seen[0]] == ["cuda"]


def test_cpu_runs_say_what_they_are_and_every_ratio_reads_one_way(cfg_file, tmp_path, engine):
    import subprocess
    import sys

    out = tmp_path / "out"
    code = ("import sys; from dwdp_trtllm import cli; from dwdp_trtllm.bench import runner; "
            "from dwdp_trtllm.bench.synthetic import synthetic_run_mode; "
            "runner.engine_run_mode = lambda: (lambda c, m, q, progress=None: synthetic_run_mode(c, m, q, progress=progress)); "
            f"sys.exit(cli.main(['bench', {str(cfg_file)!r}, '--out', {str(out)!r}]))")
    env = {**__import__("os").environ, "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)  # piped
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # every table and note fits 80 columns; a line naming a path is printed whole instead (the terminal wraps it)
    assert max(len(ln) for ln in lines if str(out) not in ln) <= 80
    assert f"wrote {out / 'results.json'}, {out / 'results.csv'} and 2 plot(s) in {out / 'plots'}" in lines
    assert "…" not in res.stdout and "..." not in res.stdout  # names wrap, they are not cut
    text = " ".join(" ".join(ln.replace("│", " ").split()) for ln in lines)
    assert "functional demo on CPU" in text and "not GPU predictions" in text
    assert "per GPU" not in text and "(CPU process)" in text
    assert "DWDP gain, >1 better" in text and "gain > 1 means DWDP is better in every row" in text
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["note"].startswith("functional demo on CPU")
    r = run["metrics"]["ratio"]
    dep, dwdp = run["metrics"]["dep"], run["metrics"]["dwdp"]
    assert r["tps_per_gpu"] == pytest.approx(dwdp["tps_per_gpu"] / dep["tps_per_gpu"])  # a rate: DWDP/DEP
    assert r["ttft_speedup_p50"] == pytest.approx(dep["ttft_p50_ms"] / dwdp["ttft_p50_ms"])  # a time: DEP/DWDP


def _fake_run(dep_tps: float, dwdp_tps: float, ok: bool = True) -> dict:
    dep = {"tps_per_gpu": dep_tps, "ttft_p50_ms": 10.0}
    dwdp = {"tps_per_gpu": dwdp_tps, "ttft_p50_ms": 8.0}
    return {"metrics": {"dep": dep, "dwdp": dwdp, "ratio": {"tps_per_gpu": dwdp_tps / dep_tps,
                                                             "ttft_speedup_p50": 10.0 / 8.0}},
            "consistency": {"ok": ok}, "config": {}, "point": {}}


def test_merge_repeats_keeps_the_median_repeat_and_the_spread():
    from dwdp_trtllm.bench.repeats import merge_repeats

    runs = [_fake_run(100, 300), _fake_run(100, 120), _fake_run(100, 200, ok=False)]
    merged = merge_repeats(runs)
    assert merged["metrics"] is runs[2]["metrics"]  # gains 3.0, 1.2, 2.0: the median is the third run
    st = merged["repeats"]["stats"]
    assert merged["repeats"]["n"] == 3 and merged["repeats"]["chosen"] == 2
    assert st["ratio"]["tps_per_gpu"] == {"median": 2.0, "min": 1.2, "max": 3.0, "values": [3.0, 1.2, 2.0]}
    assert st["dwdp"]["tps_per_gpu"]["median"] == 200 and st["dep"]["tps_per_device"] is None
    assert merged["consistency"]["ok"] is False and merged["consistency"]["repeats_ok"] == [True, True, False]
    assert merge_repeats(runs[:1]) is runs[0]


def test_repeat_runs_every_mode_n_times_and_shows_the_range(cfg_file, tmp_path, engine, capsys):
    out = tmp_path / "out"
    assert cli.main(["bench", str(cfg_file), "--out", str(out), "--no-plots", "--repeat", "2"]) == 0
    assert [m for m, _ in engine] == ["dep", "dwdp", "dep", "dwdp"]
    text = capsys.readouterr().out
    assert "2 repeats" in text and "median [min-max]" in text
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["config"]["run"]["repeat"] == 2 and run["repeats"]["n"] == 2
    assert len(run["repeats"]["stats"]["ratio"]["tps_per_gpu"]["values"]) == 2


@pytest.mark.parametrize("value", ["0", "101"])
def test_repeat_out_of_range_is_refused(cfg_file, tmp_path, engine, capsys, value):
    code = cli.main(["bench", str(cfg_file), "--out", str(tmp_path / "o"), "--repeat", value])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and "--repeat" in err[0] and "run.repeat" in err[0], err
    assert engine == []


def test_the_quickstart_repeats_and_gpu_configs_do_not():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs" / "bench"
    assert yaml.safe_load((root / "quickstart.yaml").read_text())["run"]["repeat"] == 3
    for f in root.glob("h200*.yaml"):
        assert (yaml.safe_load(f.read_text()).get("run") or {}).get("repeat", 1) == 1, f


def test_plots_show_the_median_gain_of_the_repeats(tmp_path):
    from dwdp_trtllm.bench.plots import _gains, plot_ratios
    from dwdp_trtllm.bench.repeats import merge_repeats

    runs = [_fake_run(100, 300), _fake_run(100, 120), _fake_run(100, 200)]
    for r in runs:
        r["config"] = {"run": {"device": "cpu"}}
    merged = merge_repeats(runs)
    assert _gains(merged)["tps_per_gpu"] == (2.0, 1.2, 3.0)
    assert _gains(runs[0])["tps_per_gpu"] == (3.0, 3.0, 3.0)
    (png,) = plot_ratios([merged], [], tmp_path)
    assert png.name == "ratio.png" and png.stat().st_size > 5000
    sweep = [dict(merged, point={"workload.isl": isl}) for isl in (128, 256)]
    (png,) = plot_ratios(sweep, ["workload.isl"], tmp_path)
    assert png.name == "ratio_workload.isl.png"


@pytest.mark.parametrize("size,said", [(2, None), (1, "note: DWDP fetches no expert (dwdp.dwdp_size 1,"),
                                       ([1, 2], "note: DWDP fetches no expert at dwdp.dwdp_size=1 (dwdp.dwdp_size 1,")])
def test_a_bench_where_dwdp_fetches_nothing_says_so_in_one_line(tmp_path, engine, capsys, size, said):
    cfg = {**CFG, "dwdp": {**CFG["dwdp"], "dwdp_size": size}}
    f = tmp_path / "b.yaml"
    f.write_text(yaml.safe_dump(cfg))
    assert cli.main(["bench", str(f), "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    notes = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note: DWDP fetches no expert")]
    if said is None:
        assert notes == [] and len(engine) == 2
    else:
        assert len(notes) == 1 and notes[0].startswith(said), notes
        assert notes[0].endswith("set dwdp.dwdp_size >= 2 to measure DWDP's copies")
        assert [m for m, _ in engine].count("dwdp") == (1 if size == 1 else 2)  # a note, not a refusal: it runs
