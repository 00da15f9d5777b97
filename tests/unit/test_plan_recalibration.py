"""scripts/dev/adopt_floor_campaign.py: a new floor campaign (gpu_check.sh calib's output) becomes the shipped engine
calibration only when its six files are the campaign's points (refused otherwise, nothing written), and docs/PLANNER.md
gets `dwdp plan --target engine`'s before/after table. The source here is a functional stand-in assembled from
committed H200 runs (engine_floor_2026-12-03c's b*, section 9's run4 f* with FP8 linear layers): it exercises the
adoption, it is not a campaign (runs of two sessions)."""
import importlib.util
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OLD = "engine_floor_2026-12-03c"
RUN4 = REPO / "docs/bench_results/fp8_linear_2026-12-03/run4"


def _script():
    spec = importlib.util.spec_from_file_location("adopt_floor_campaign", REPO / "scripts/dev/adopt_floor_campaign.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _repo(tmp_path, ship: str = OLD, committed: tuple[str, ...] = ()) -> Path:
    """The files adoption reads and writes, with `ship` (default OLD; committed in docs/bench_results) as the shipped
    campaign, whichever campaign this checkout ships, and `committed` campaigns in docs/bench_results besides."""
    r = tmp_path / "repo"
    pkg = r / "dwdp_trtllm/data/engine_calibration"
    for p in ("b2", "b8", "b32", "f2", "f8", "f32"):
        for name, dirs in ((ship, (pkg, r / "docs/bench_results")), *((c, (r / "docs/bench_results",)) for c in committed)):
            for d in (x / name for x in dirs):
                d.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(REPO / "docs/bench_results" / name / f"{p}.json", d / f"{p}.json")
    (pkg / "README.md").write_text(f"a copy of docs/bench_results/{ship}\n")
    (r / "tests/unit").mkdir(parents=True)
    (r / "tests/unit/test_perf_trtllm_target.py").write_text(f'SHIPPED_CAMPAIGN = "{ship}"\n')
    shutil.copyfile(REPO / "docs/PLANNER.md", r / "docs/PLANNER.md")
    return r


def _source(tmp_path, f8: str = "f8", drop: str | None = None, one_run: bool = True) -> Path:
    """gpu_check.sh's layout: raw.tar.gz holding raw/calib/{bench.log, raw.tar.gz (raw/<point>/results.json)};
    one_run: every run's env.date set to run4's f8 one's (the stand-in's files come from two sessions)."""
    inner = {**{p: REPO / "docs/bench_results" / OLD / f"{p}.json" for p in ("b2", "b8", "b32")},
             "f2": RUN4 / "f2/results.json", "f8": RUN4 / f8 / "results.json", "f32": RUN4 / "f32/results.json"}
    date = json.loads((RUN4 / "f8/results.json").read_text())["runs"][0]["env"]["date"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for p, src in inner.items():
            if p == drop:
                continue
            data = json.loads(src.read_text())
            if one_run:
                data["runs"][0]["env"]["date"] = date
            (tmp_path / f"{p}.json").write_text(json.dumps(data))
            t.add(tmp_path / f"{p}.json", f"raw/{p}/results.json")
    outer = tmp_path / "raw.tar.gz"
    with tarfile.open(outer, "w:gz") as t:
        info = tarfile.TarInfo("raw/calib/raw.tar.gz")
        info.size = len(buf.getvalue())
        t.addfile(info, io.BytesIO(buf.getvalue()))
        t.add(RUN4 / "bench.log", "raw/calib/bench.log")
    return outer


def test_the_calib_sections_points_win_over_other_sections_of_the_same_call(tmp_path):
    """gpu_check.sh's tarball may hold other sections' perf_check points (raw/perf/.../f8/results.json): the calib
    section's are the campaign."""
    mod = _script()
    src = _source(tmp_path)
    other = tmp_path / "other"
    (other / "raw/perf/raw/f8").mkdir(parents=True)
    shutil.copyfile(RUN4 / "f8o/results.json", other / "raw/perf/raw/f8/results.json")
    with tarfile.open(src) as t:
        t.extractall(other, filter="data")
    found, log = mod.find_points(other, tmp_path / "work")
    assert all("calib" in p.parts for p in found.values()) and log is not None and "calib" in log.parts


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_adopt_copies_the_campaign_and_shows_how_dwdp_dep_moved(tmp_path):
    mod, repo = _script(), _repo(tmp_path)
    mod.adopt(_source(tmp_path), "engine_floor_test", repo, with_matrix=False)
    new = repo / "docs/bench_results/engine_floor_test"
    pkg = repo / "dwdp_trtllm/data/engine_calibration"
    assert sorted(p.name for p in new.iterdir()) == sorted([*(f"{p}.json" for p in mod.POINTS), "bench.log"])
    assert [p.name for p in pkg.iterdir() if p.is_dir()] == ["engine_floor_test"]  # the old campaign replaced
    for p in mod.POINTS:
        assert (pkg / "engine_floor_test" / f"{p}.json").read_bytes() == (new / f"{p}.json").read_bytes()
    assert (new / "f8.json").read_bytes() == (tmp_path / "f8.json").read_bytes()  # byte for byte, as measured
    assert 'SHIPPED_CAMPAIGN = "engine_floor_test"' in (repo / "tests/unit/test_perf_trtllm_target.py").read_text()
    readme = (pkg / "README.md").read_text()
    assert "engine_floor_test" in readme and OLD not in readme
    md = (repo / "docs/PLANNER.md").read_text()
    body = md.split("<!-- recalibration:begin -->")[1].split("<!-- recalibration:end -->")[0]
    rows = [ln.split(" | ") for ln in body.splitlines() if ln.startswith("| R1") or ln.startswith("| smoke")]
    assert len(rows) == 2 * (4 + 2 + 1 + 1)
    for before, after in zip(rows[::2], rows[1::2]):
        assert before[2] == f"before: {OLD}" and after[2] == "after: engine_floor_test" and before[:2] == after[:2]
        t_before, t_after = float(before[3]), float(after[3])  # T_compute ms per MoE layer
        if "FP8" in before[0]:  # FP8 linear layers priced at their own (faster) floor rates
            assert t_after < 0.97 * t_before, (before, after)
        else:  # BF16: the linear layers are the same work
            assert t_after == pytest.approx(t_before, rel=0.02), (before, after)
    assert "dwdp plan --model deepseek-r1 --gpu h200 --weight-dtype fp8 --dwdp-size 8 --mnt 16384" in body


@pytest.mark.parametrize("kw, expect", [
    ({"f8": "f8o"}, "point f8 expects fp8 experts and fp8 linear layers (floor.linear_layers), got fp8 and bf16"),
    ({"drop": "b32"}, "missing b32"),
    ({"one_run": False}, "measured 3.3 h apart (b8 13:00, f32 16:16); expected one run"),
])
def test_adopt_refuses_what_is_not_the_campaign_and_writes_nothing(tmp_path, capsys, kw, expect):
    mod, repo = _script(), _repo(tmp_path)
    before = _tree(repo)
    with pytest.raises(mod.Refused, match=expect.replace("(", r"\(").replace(")", r"\)")):
        mod.adopt(_source(tmp_path, **kw), "engine_floor_test", repo, with_matrix=False)
    assert _tree(repo) == before
    assert mod.main([str(tmp_path / "nowhere"), "engine_floor_x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("adopt_floor_campaign: ") and "nowhere" in err[0]


def test_adopt_refuses_a_name_whose_package_copy_exists_and_writes_nothing(tmp_path):
    """A leftover dwdp_trtllm/data/engine_calibration/NAME (no docs/bench_results/NAME) is refused before anything is
    written (the rename into place would fail half-way): the package then holds two campaigns, which shipped() refuses."""
    mod, repo = _script(), _repo(tmp_path)
    (repo / "dwdp_trtllm/data/engine_calibration/engine_floor_test").mkdir()
    (repo / "dwdp_trtllm/data/engine_calibration/engine_floor_test/f8.json").write_text("{}")
    before = _tree(repo)
    with pytest.raises(mod.Refused, match="expected one campaign directory, found 2"):
        mod.adopt(_source(tmp_path), "engine_floor_test", repo, with_matrix=False)
    assert _tree(repo) == before


def test_adopt_compares_with_the_campaign_named_by_before_and_still_replaces_the_shipped_one(tmp_path, capsys):
    """--before NAME: the table's before is docs/bench_results/NAME (e.g. the last campaign before FP8 linear layers
    when the shipped one only re-measured the same engine with an older floor), not the campaign shipped so far; the
    shipped one is replaced all the same. A --before that is not committed is refused, nothing written."""
    mod, shipped = _script(), "engine_floor_2026-12-03d"
    repo = _repo(tmp_path, ship=shipped, committed=(OLD,))
    tree = _tree(repo)
    with pytest.raises(mod.Refused, match="docs/bench_results/engine_floor_nowhere: --before: expected a committed"):
        mod.adopt(_source(tmp_path), "engine_floor_test", repo, with_matrix=False, before="engine_floor_nowhere")
    assert _tree(repo) == tree
    mod.adopt(_source(tmp_path), "engine_floor_test", repo, with_matrix=False, before=OLD)
    pkg = repo / "dwdp_trtllm/data/engine_calibration"
    assert [p.name for p in pkg.iterdir() if p.is_dir()] == ["engine_floor_test"]  # the shipped 03d replaced
    assert (repo / "docs/bench_results" / shipped).is_dir()  # its record stays
    assert 'SHIPPED_CAMPAIGN = "engine_floor_test"' in (repo / "tests/unit/test_perf_trtllm_target.py").read_text()
    body = (repo / "docs/PLANNER.md").read_text().split("<!-- recalibration:begin -->")[1].split("<!-- recalibration:end -->")[0]
    assert f"before: {OLD} (shipped until now: {shipped})" in body.splitlines()[1]
    rows = [ln.split(" | ") for ln in body.splitlines() if ln.startswith("| R1") or ln.startswith("| smoke")]
    assert {r[2] for r in rows[::2]} == {f"before: {OLD}"} and {r[2] for r in rows[1::2]} == {"after: engine_floor_test"}
    assert f"--bench-results docs/bench_results/{OLD}" in body


def test_adopt_computes_the_matrix_against_the_staged_campaign_before_writing_anything(tmp_path, monkeypatch):
    """The matrix (section 4b) is computed from the staged campaign before any file is written: a failure there leaves
    the repository as it was (no half-adopted campaign, no temporaries); when it succeeds, its text is what
    docs/PLANNER.md gets."""
    mod, repo = _script(), _repo(tmp_path)
    tree = _tree(repo)
    seen = []

    def broken(campaign=None):
        seen.append(sorted(p.name for p in campaign.iterdir()) if campaign else None)
        raise RuntimeError("matrix failed")

    monkeypatch.setattr(mod, "matrix", broken)
    with pytest.raises(RuntimeError, match="matrix failed"):
        mod.adopt(_source(tmp_path), "engine_floor_test", repo)
    assert _tree(repo) == tree
    assert not [p for p in repo.rglob("*") if "adopt-tmp" in p.name]
    assert seen == [sorted(f"{p}.json" for p in mod.POINTS)]  # called with the staged campaign's six points

    monkeypatch.setattr(mod, "matrix", lambda campaign: f"the matrix of {campaign.name}\n")
    mod.adopt(_source(tmp_path), "engine_floor_test", repo)
    body = (repo / "docs/PLANNER.md").read_text().split("<!-- plan-matrix:begin -->")[1].split("<!-- plan-matrix:end -->")[0]
    assert body == "\nthe matrix of engine_floor_test\n"
    assert not [p for p in repo.rglob("*") if "adopt-tmp" in p.name]


@pytest.mark.parametrize("argv", [["SRC", "../elsewhere"], ["SRC", "a/b"], ["SRC", ".."], ["SRC", ""],
                                  ["--before", "../x", "SRC", "engine_floor_ok"], ["--before", "/tmp", "SRC", "ok"]])
def test_adopt_refuses_a_name_that_is_not_a_plain_directory_name(tmp_path, capsys, argv):
    argv = [str(tmp_path / "nowhere") if a == "SRC" else a for a in argv]
    assert _script().main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected a plain directory name" in err[0]
    assert err[0].startswith("adopt_floor_campaign: NAME" if "--before" not in argv else "adopt_floor_campaign: --before")


def test_plan_matrix_reads_the_campaign_it_is_given(tmp_path):
    """plan_matrix.main(bench_results=DIR): the engine rows calibrated by DIR (as `--bench-results DIR`), named by it;
    the same campaign under another name gives the same matrix."""
    import contextlib
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import plan_matrix

    shipped = next(p for p in (REPO / "dwdp_trtllm/data/engine_calibration").iterdir() if p.is_dir())
    copy = tmp_path / "engine_floor_copy"
    shutil.copytree(shipped, copy)
    outs = []
    for d in (None, copy):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            plan_matrix.main(bench_results=d)
        outs.append(buf.getvalue())
    assert f"floor campaign {shipped.name} " in outs[0] and "floor campaign engine_floor_copy " in outs[1]
    assert outs[1] == outs[0].replace(shipped.name, "engine_floor_copy")
