"""Faults, signals and bad input (issue 16), on the CPU, bounded in time.

Each signal test starts `python -m dwdp_trtllm bench` in its own process group and always kills that group at the
end, so a failure here cannot leave processes behind either."""
from __future__ import annotations

import glob
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.bench.report import write_atomic
from dwdp_trtllm.bench.runner import out_lock
from dwdp_trtllm.core.transport import shm
from dwdp_trtllm.engine.launcher import run_modes

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "configs/bench/quickstart.yaml")
#: bad input is refused before any heavy work (ranks, a YAML bomb's expansion, a 50 MB parse: minutes); the bound
#: only tells that apart, with a loaded machine's margin (2 s went red under load)
FAST_S = 20.0
#: how long the polls below wait for processes to appear or go (generous: they return as soon as it happened)
POLL_S = 120.0


def _start(tmp_path, *extra, requests=48):
    cmd = [sys.executable, "-m", "dwdp_trtllm", "bench", QUICK, "--out", str(tmp_path / "out"), "--no-plots",
           "--set", f"workload.requests_per_rank={requests}", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)


def _rank_procs(proc) -> list[psutil.Process]:
    """The rank processes: python children of `proc` running the spawn entry point (not the resource tracker)."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for c in kids:
        try:
            cmd = " ".join(c.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in cmd and "resource_tracker" not in cmd:
            out.append(c)
    return sorted(out, key=lambda c: c.pid)


def _rank_of(p: psutil.Process) -> int | None:
    """The rank a rank process runs (its name is dwdp-rank<r> once it has started), None before."""
    try:
        name = p.name()
    except psutil.Error:
        return None
    return int(name[len("dwdp-rank"):]) if name.startswith("dwdp-rank") else None


def _shm_mapped(pids) -> set[str]:
    """/dev/shm files (segments, semaphores) that these processes map, named or already unlinked."""
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        out.add(line[i:].strip().removesuffix(" (deleted)"))
        except OSError:
            pass
    return out


def _ranks(proc, n=4, timeout=2 * POLL_S, when="running") -> list[psutil.Process]:
    """The n rank processes once they exist ("starting": while they still import) or once every one maps the
    DWDP weights of its peers ("running": the dwdp mode is under way)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        kids = _rank_procs(proc)
        if len(kids) >= n and (when == "starting" or all(
                any("/dwdp_" in f for f in _shm_mapped([k.pid])) for k in kids)):
            return _in_rank_order(kids) if when == "running" else kids
        time.sleep(0.05)
    raise AssertionError(f"ranks not {when} within {timeout} s")


def _in_rank_order(kids, timeout=POLL_S) -> list[psutil.Process]:
    """kids sorted by the rank each runs, once every one has taken its name dwdp-rank<r>."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ranks = [_rank_of(k) for k in kids]
        if None not in ranks:
            assert sorted(ranks) == list(range(len(kids))), ranks
            return [k for _, k in sorted(zip(ranks, kids))]
        time.sleep(0.05)
    raise AssertionError("rank processes did not take their names")


def _gone(pids, timeout=POLL_S) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        alive = []
        for p in pids:
            try:
                if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _left(paths, timeout=POLL_S) -> list[str]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        left = sorted(p for p in paths if os.path.exists(p))
        if not left:
            return []
        time.sleep(0.1)
    return left


def _in_group(kids, timeout=POLL_S) -> None:
    """Until every rank holds an established TCP connection (the rendezvous and its gloo group are up: the run is
    under way), polled; a sleep of 2 s stood here."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if all(any(c.status == psutil.CONN_ESTABLISHED for c in k.net_connections(kind="tcp")) for k in kids):
                return
        except psutil.NoSuchProcess:
            raise AssertionError("a rank exited before its group was up") from None
        time.sleep(0.05)
    raise AssertionError(f"ranks not connected within {timeout} s")


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("sig,when", [(signal.SIGKILL, "starting"), (signal.SIGTERM, "running"),
                                      (signal.SIGKILL, "running"), (signal.SIGHUP, "running")])
@pytest.mark.slow  # spawns the quickstart: 7-41 s per case on 2 cores
def test_killing_the_parent_leaves_no_process_and_no_shared_memory(tmp_path, sig, when):
    """What a job manager, an IDE's stop button or Popen.terminate() does: no rank, no resource tracker and no
    /dev/shm entry of the run (segment or semaphore) is left, with nothing swept by a next run; a handled signal
    stops the ranks at once (before the grace a finished run gives them)."""
    # requests enough that the run is still under way when the signal comes, however fast the machine: with 48 per
    # rank an idle machine finished the dwdp mode between "running" and the maps read below (nothing mapped)
    proc = _start(tmp_path, "--set", "run.modes=[dwdp]", requests=2000)
    try:
        kids = _ranks(proc, when=when)
        everything = [proc.pid] + [k.pid for k in psutil.Process(proc.pid).children(recursive=True)]
        mapped = _shm_mapped(everything)
        assert when == "starting" or any("/dwdp_" in f for f in mapped), mapped
        t = time.monotonic()
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
        if sig != signal.SIGKILL:  # handled like Ctrl-C: the ranks are stopped at once, one line says so
            err = proc.stderr.read()
            assert proc.returncode == 128 + sig and "terminated by" in err and "Traceback" not in err, err
            grace = inspect.signature(run_modes).parameters["grace_s"].default  # what "at once" replaces
            assert time.monotonic() - t < grace, f"{sig.name}: the parent took {time.monotonic() - t:.1f} s to exit"
        assert _gone(everything) == [], f"processes left after {sig.name} of the parent ({when})"
        assert _left(mapped | set(glob.glob(f"/dev/shm/dwdp_n*_p{proc.pid}_*"))) == [], f"/dev/shm entries left ({when})"
        assert not glob.glob(f"/dev/shm/dwdp_n*_p{proc.pid}_*")
        # the ranks' stderr file: its name is gone once every rank beat; a kill before that leaves it to the next run
        stderr_files = os.path.join(tempfile.gettempdir(), f"dwdp_n*_p{proc.pid}_*_stderr_*")
        if when == "starting":
            shm.sweep_orphaned(tempfile.gettempdir())
        assert _left(set(glob.glob(stderr_files))) == [], f"the ranks' stderr file left ({when})"
        assert all(not psutil.pid_exists(k.pid) or k.status() == psutil.STATUS_ZOMBIE for k in kids)
    finally:
        _kill_group(proc)


@pytest.mark.slow  # spawns ranks: ~28 s on 2 cores
@pytest.mark.timeout(900)
def test_a_group_kill_leaves_nothing_the_next_run_does_not_clean(tmp_path):
    """`kill -9 -<pgid>` (a closed terminal's process group, a batch system): nobody of the run can clean up."""
    proc = _start(tmp_path, "--set", "run.modes=[dwdp]")
    try:
        _ranks(proc)
        everything = [proc.pid] + [k.pid for k in psutil.Process(proc.pid).children(recursive=True)]
        mapped = _shm_mapped(everything)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        assert _gone(everything) == []
        shm.sweep_orphaned()  # what the next run does first
        assert [p for p in mapped if os.path.exists(p)] == [] and not glob.glob(f"/dev/shm/dwdp_n*_p{proc.pid}_*")
    finally:
        _kill_group(proc)


def _no_rank(monkeypatch) -> None:
    """Starting a rank fails the test: "refused before any rank" is checked as the event, not as a time."""
    from dwdp_trtllm.bench import runner
    from dwdp_trtllm.engine import launcher

    monkeypatch.setattr(runner, "engine_run_mode", lambda: pytest.fail("a rank was started"))
    monkeypatch.setattr(launcher, "run_modes", lambda *a, **k: pytest.fail("a rank was started"))


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                              timeout=300).stdout.strip())


def test_the_next_run_sweeps_segments_of_dead_runs_only(tmp_path):
    """Two runs in different pid namespaces share /dev/shm (`docker run --ipc=host`): a segment recorded in another
    namespace is never removed, whatever its pid is here; in ours, a live owner's segment stays, and a dead owner's
    goes, as does one whose pid is alive but started at another time (the pid was reused)."""
    ns = os.stat("/proc/self/ns/pid").st_ino
    me, dead = os.getpid(), _dead_pid()
    started = int(open(f"/proc/{me}/stat").read().rsplit(")", 1)[1].split()[19])
    mine = shm.owner_tag("0123abcd")
    assert mine == f"dwdp_n{ns}_p{me}_s{started}_0123abcd"
    names = {
        "live": f"{mine}_dwdp_0_w13",
        "dead": f"dwdp_n{ns}_p{dead}_s{started}_0123abcd_dwdp_1_w13",
        "reused": f"dwdp_n{ns}_p{me}_s{started + 1}_0123abcd_dwdp_2_w13",
        "other_ns_dead": f"dwdp_n{ns + 1}_p{dead}_s{started}_0123abcd_dwdp_0_w13",
        "other_ns_reused": f"dwdp_n{ns + 1}_p{me}_s{started + 1}_0123abcd_dwdp_0_w13",
        "bare_pid": f"dwdp_{dead}_0123abcd_dwdp_0_w13",  # today's tag: a bare pid proves nothing
        "torchrun": f"dwdp_{dead}_dwdp_dwdp_0_w13",  # run_in_process's tag: a port, not a pid
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
    removed = shm.sweep_orphaned(str(tmp_path))
    assert sorted(removed) == sorted(str(tmp_path / names[k]) for k in ("dead", "reused"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        names[k] for k in ("live", "other_ns_dead", "other_ns_reused", "bare_pid", "torchrun"))


def test_no_segment_is_swept_when_this_process_cannot_read_its_pid_namespace(tmp_path, monkeypatch):
    (tmp_path / f"dwdp_n1_p{_dead_pid()}_s5_0123abcd_dwdp_0_w").write_bytes(b"x")
    real_stat = os.stat
    monkeypatch.setattr(shm.os, "stat", lambda p, *a, **k: (_ for _ in ()).throw(PermissionError(13, "denied", p))
                        if str(p) == "/proc/self/ns/pid" else real_stat(p, *a, **k))
    assert shm.sweep_orphaned(str(tmp_path)) == [] and len(list(tmp_path.iterdir())) == 1


@pytest.mark.slow  # spawns ranks: 15-35 s on 2 cores
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["dep", "dwdp"])
def test_a_killed_rank_is_named_with_its_signal(tmp_path, mode):
    proc = _start(tmp_path, "--set", f"run.modes=[{mode}]")
    try:
        kids = _in_rank_order(_ranks(proc, when="starting" if mode == "dep" else "running"))
        if mode == "dep":  # no /dev/shm map to wait for: the ranks' connections tell the run is under way
            _in_group(kids)
        os.kill(kids[1].pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 1, err
        assert "Traceback" not in err and "resource_tracker" not in err, err
        line = next(line for line in err.splitlines() if "run failed" in line)
        assert f"rank 1 failed in mode {mode}: it was killed by SIGKILL (signal 9)" in line, line
        log = Path(err.split("full tracebacks: ")[1].split()[0])
        assert log.is_file() and str(tmp_path) in str(log)
        assert _gone([k.pid for k in kids]) == []
    finally:
        _kill_group(proc)


@pytest.mark.slow  # waits for run.timeout_s: ~37 s on 2 cores
@pytest.mark.timeout(900)
def test_a_stopped_rank_is_named_when_the_run_times_out(tmp_path):
    proc = _start(tmp_path, "--set", "run.modes=[dwdp]", "--set", "run.timeout_s=25", requests=400)
    try:
        kids = _ranks(proc)
        os.kill(kids[2].pid, signal.SIGSTOP)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 1 and "Traceback" not in err, err
        line = next(line for line in err.splitlines() if "run failed" in line)
        assert "rank(s) [2] are stopped" in line and "run.timeout_s=25" in line, line
        assert _gone([k.pid for k in kids]) == []
    finally:
        for k in _rank_procs(proc):
            k.send_signal(signal.SIGCONT)
        _kill_group(proc)


@pytest.mark.parametrize("out", [None, "o"])
def test_an_unwritable_out_or_working_directory_exits_2_naming_out(tmp_path, capsys, monkeypatch, out):
    """Read-only --out, or no --out in a read-only working directory (bench_out/<stem> there); root ignores
    permissions, so the refusal is simulated."""
    def read_only(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Path, "mkdir", read_only)
    code = cli.main(["bench", QUICK, "--no-plots"] + (["--out", str(tmp_path / out)] if out else []))
    err = capsys.readouterr().err
    where = str(tmp_path / out) if out else "bench_out/quickstart"
    assert code == 2 and f"{where}: --out: cannot create or write the output directory (Permission denied)" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_two_runs_into_one_out_are_refused(tmp_path, capsys):
    out = tmp_path / "out"
    with out_lock(out):
        code = cli.main(["bench", QUICK, "--out", str(out), "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and "another `dwdp bench`" in err and f"pid {os.getpid()}" in err


def test_a_full_disk_leaves_the_previous_results(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    path.write_text('{"runs": []}')

    def no_space(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError):
        write_atomic(path, json.dumps({"runs": [1, 2, 3]}))
    assert json.loads(path.read_text()) == {"runs": []}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no temporary left


def test_a_full_disk_is_one_paragraph_and_leaves_the_previous_results(tmp_path, capsys, monkeypatch):
    from dwdp_trtllm.bench import runner
    from dwdp_trtllm.bench.synthetic import synthetic_run_mode

    monkeypatch.setattr(runner, "engine_run_mode", lambda: synthetic_run_mode)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"runs": []}')
    runner.run_bench(ROOT / "configs/bench/ci_smoke.yaml", out_dir=out, plots=False)  # a finished point to resume
    (out / "results.json").write_text('{"runs": []}')

    def no_space(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", no_space)
    code = cli.main(["bench", str(ROOT / "configs/bench/ci_smoke.yaml"), "--out", str(out), "--no-plots"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    assert f"No space left on device: {out / 'results.json'}" in err and "full traceback: " in err, err
    assert json.loads((out / "results.json").read_text()) == {"runs": []}
    assert not list(out.glob(".*.tmp"))


def test_a_point_file_of_the_wrong_shape_is_run_again_with_a_warning(tmp_path, capsys, monkeypatch):
    from dwdp_trtllm.bench import runner
    from dwdp_trtllm.bench.synthetic import synthetic_run_mode

    calls = []

    def engine(cfg, mode, queues, *, progress=None):
        calls.append(mode)
        return synthetic_run_mode(cfg, mode, queues, progress=progress)
    monkeypatch.setattr(runner, "engine_run_mode", lambda: engine)
    argv = ["bench", str(ROOT / "configs/bench/ci_smoke.yaml"), "--out", str(tmp_path / "out"), "--no-plots"]
    assert cli.main(argv) == 0
    (point,) = (tmp_path / "out" / "points").glob("*.json")
    for bad in ('[1, 2]', '{"metrics": 3, "config": {}}', '"x"', '{"metrics": {}, '):
        point.write_text(bad)
        calls.clear()
        capsys.readouterr()
        assert cli.main(argv) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "is not a finished point (unreadable or of the wrong shape): running that point again" in out, out
        assert calls == ["dep", "dwdp"] and json.loads(point.read_text())["metrics"]["dep"]


def test_a_plot_that_cannot_be_written_leaves_the_previous_one(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from dwdp_trtllm.bench.plots import plot_ratios
    runs = [{"point": {}, "metrics": {"ratio": {"tps_per_gpu": 1.1, "ttft_speedup_p50": 1.2}}}]
    (png,) = plot_ratios(runs, [], tmp_path)
    before = png.read_bytes()

    def half_then_full(self, fname, **kw):
        Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Figure, "savefig", half_then_full)
    with pytest.raises(OSError, match=f"No space left on device: '{png}'"):
        plot_ratios(runs, [], tmp_path)
    assert png.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [png.name]


BOMB = "a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + "model: {preset: tiny}\n"

#: the same bomb as one flow mapping in a --set value
SET_BOMB = "{a: &a [1,1,1,1,1,1,1,1,1], " + ", ".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")) + "}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name,text,args,needle", [
    ("bomb", BOMB, [], "aliases expand"),
    ("recursive", "model: &m {preset: tiny, x: *m}\n", [], "recursive alias"),
    ("duplicate", "model: {preset: tiny}\nmodel: {preset: tiny}\n", [], "given twice"),
    ("sweep", "model: {preset: tiny}\nworkload: {isl: [" + ",".join(str(i + 1) for i in range(100)) + "], seed: ["
     + ",".join(str(i) for i in range(100)) + "]}\nrun: {warmup_iters: [" + ",".join(str(i) for i in range(100)) + "]}\n",
     [], "1,000,000 points"),
    ("sweep_bound", "model: {preset: tiny}\nworkload: {isl: [64, 128, 256]}\n", ["--max-points", "2"], "3 points"),
    ("set_unknown", "model: {preset: tiny}\n", ["--set", "foo.bar=1"], "--set"),
    ("set_bomb", "model: {preset: tiny}\n", ["--set", "workload.isl=" + SET_BOMB], "--set 'workload.isl="),
    ("set_recursive", "model: {preset: tiny}\n", ["--set", "model=&m {preset: tiny, x: *m}"], "recursive alias"),
    ("set_duplicate", "model: {preset: tiny}\n", ["--set", "model={preset: tiny, preset: tiny}"], "given twice"),
    ("out_is_file", "model: {preset: tiny}\n", ["--out", "FILE"], "is a file"),
    ("out_under_a_file", "model: {preset: tiny}\n", ["--out", "FILE/sub"], "FILE is a file, not a directory"),
    ("binary", "model: {preset: tiny}\n\x00\x01garbage\n", [], "not valid YAML: "),
    ("not_utf8", b"model: {preset: tiny}\n\x96\xff\n", [], "not UTF-8"),
    ("bad_indent", "model:\n  preset: tiny\n dwdp: 3\n", [], "(line 3, column 2)"),
    ("huge", "HUGE", [], "more than a config file may have"),  # 50 MB: refused before parsing
    ("root_list", "- model\n", [], "expected a mapping at the top level"),
    ("empty", "", [], "file is empty"),
    ("points_is_file", "model: {preset: tiny}\n", ["--out", "POINTS"], "points: --out: is a file"),
], ids=lambda v: v if isinstance(v, str) and v.isidentifier() else "")
def test_bad_input_exits_2_in_one_line_fast(tmp_path, capsys, monkeypatch, name, text, args, needle):
    _no_rank(monkeypatch)
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    if text == "HUGE":
        with cfg.open("wb") as f:
            f.write(b"model: {preset: tiny}\nnotes: '")
            f.truncate(50 << 20)
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "o2").mkdir()
    (tmp_path / "o2" / "points").write_text("x")
    args = [a.replace("FILE", str(tmp_path / "FILE")).replace("POINTS", str(tmp_path / "o2")) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    t = time.monotonic()
    code = cli.main(["bench", str(cfg), "--no-plots", *args])
    took = time.monotonic() - t
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert took < FAST_S, f"{name}: {took:.1f} s"


def test_version_and_python_m(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("dwdp ")
    r = subprocess.run([sys.executable, "-m", "dwdp_trtllm", "--version"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout.startswith("dwdp ")


@pytest.mark.parametrize("override,key", [
    ("run.threads_per_rank=0", "run.threads_per_rank"),
    ("run.timeout_s=.nan", "run.timeout_s"),
    ("run.timeout_s=.inf", "run.timeout_s"),
    ("workload.seed=-1", "workload.seed"),
    ("model.seed=100000000000000000000000", "model.seed"),
    ("workload.isl_cv=.inf", "workload.isl_cv"),
    ("dwdp.copy_method=graph", "dwdp.copy_method"),
    ("dwdp.num_groups=3", "dwdp.num_groups"),
    ("dwdp.prefetch_depth=9", "dwdp.prefetch_depth"),
    ("run.ranks=1000000000000", "run.ranks"),
    ("workload.requests_per_rank=1000000000000", "workload.requests_per_rank"),
    ("model.num_layers=100000000", "model.num_layers"),
    ("workload.isl=100000000000000000000", "workload.isl"),
    ("run.device=cuda", "run.device"),  # this machine has no CUDA device
    ("dwdp.slice_bytes=1099511627776", "dwdp.slice_bytes"),
    ("dwdp.copy_lanes=1000000000000", "dwdp.copy_lanes"),
    ("dwdp.max_inflight_slices=1000000000000", "dwdp.max_inflight_slices"),
    ("workload.tokens_per_rank=1048576000", "workload.tokens_per_rank"),  # 4 million requests of isl 256
])
def test_out_of_range_settings_are_refused_when_the_config_is_read(tmp_path, capsys, monkeypatch, override, key):
    _no_rank(monkeypatch)
    t = time.monotonic()
    code = cli.main(["bench", QUICK, "--out", str(tmp_path / "out"), "--no-plots", "--set", override])
    err = capsys.readouterr().err
    assert code == 2 and key.split(".")[-1] in err and "--set" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and time.monotonic() - t < FAST_S


def test_every_size_key_documents_its_range():
    """Every number in a bench config has a documented range (docs/CONFIG.md is generated from these docs)."""
    import typing

    from dwdp_trtllm.spec.config import BenchConfig
    from dwdp_trtllm.spec.schema import field_docs
    for section, cls in typing.get_type_hints(BenchConfig).items():
        for name, tp, _default, text in field_docs(cls):
            if tp.split(" or ")[0] in ("int", "float"):
                assert re.search(r"(?i)in [\[(]|at most|must equal", text), f"{section}.{name}: no range in its doc: {text}"


@pytest.mark.skipif(bool(glob.glob("/dev/nvidia*")), reason="a machine with an NVIDIA driver")
@pytest.mark.parametrize("command", ["bench", "verify"])
def test_device_cuda_without_a_cuda_device_is_refused_before_any_rank_starts(tmp_path, capsys, monkeypatch, command):
    _no_rank(monkeypatch)
    t = time.monotonic()
    extra = ["--out", str(tmp_path / "out"), "--no-plots"] if command == "bench" else []
    code = cli.main([command, str(ROOT / "configs/bench/ci_smoke.yaml"), "--device", "cuda", *extra])
    err = capsys.readouterr().err
    assert code == 2 and "--device: run.device: cuda, but" in err and "use --device cpu" in err, err
    assert len(err.strip().splitlines()) == 1 and time.monotonic() - t < FAST_S
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv,needle", [
    (["plan", "--seed", "-1"], "--seed"),
    (["plan", "--samples", "1000000000"], "--samples"),
    (["plan", "--isl-cv", "inf", "--isl-dist", "normal"], "--isl-cv"),
    (["plan-placement", "--gpu-memory-gb", "inf"], "--gpu-memory-gb"),
    (["plan", "--isl", "100000000000000000000"], "--isl"),
    (["plan", "--batch", "1000000000000"], "--batch"),  # was a 29 TiB allocation
    (["plan", "--mnt", "1000000000000"], "--mnt"),
    (["plan", "--num-layers", "100000000"], "--num-layers"),
    (["plan", "--slice-bytes", "1099511627776"], "--slice-bytes"),
    (["plan-placement", "--max-num-tokens", "1000000000000000"], "--max-num-tokens"),
    (["plan-placement", "--prefetch-depth", "1000000000"], "--prefetch-depth"),
])
def test_planner_arguments_out_of_range_exit_2(capsys, argv, needle):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("args,needle", [
    (["--num-experts", "0"], "--num-experts: expected an integer in [1, 4,096], got 0"),
    (["--num-experts", "1000000000000"], "--num-experts"),
    (["--num-experts", "2"], "--dwdp-size: dwdp_size 4 is larger than the model's (--num-experts) 2 experts"),
    (["--port", "-1"], "--port"),
    (["--port", "70000"], "--port"),
    (["--gpu-memory-gb", "inf"], "--gpu-memory-gb"),
    (["--max-num-tokens", "100000000000000"], "--max-num-tokens"),
    (["--gen-tp", "100000"], "--gen-tp"),
    (["--hostname", "a b;rm -rf x"], "--hostname"),
    (["--model", " "], "--model"),
    (["--out", "FILE"], "--out"),
    (["--out", "FILE/sub"], "--out"),
], ids=lambda v: "_".join(v)[:40] if isinstance(v, list) else None)
def test_gen_config_bad_arguments_exit_2_naming_the_argument(tmp_path, capsys, args, needle):
    (tmp_path / "FILE").write_text("x")
    argv = ["gen-config", "--model", "m", "--num-experts", "16", "--out", str(tmp_path / "o")]
    argv += [a.replace("FILE", str(tmp_path / "FILE")) for a in args]
    t = time.monotonic()
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert time.monotonic() - t < FAST_S and not (tmp_path / "o").exists()


def test_gen_config_quotes_every_path_it_writes_into_commands(tmp_path, capsys):
    import shlex
    model, out = "/ckpt/my model's dir", tmp_path / "out dir"
    for mode, argv in (("bench", ["--weight-dtype", "nvfp4"]), ("disaggregated", ["--weight-dtype", "fp8", "--gen-tp", "8"])):  # no dims: --gen-tp given
        assert cli.main(["gen-config", "--mode", mode, "--model", model, "--num-experts", "16", *argv,
                         "--out", str(out / mode)]) == 0
    line = (out / "bench" / "commands.sh").read_text().splitlines()[-1]
    assert shlex.split(line)[:3] == ["trtllm-bench", "-m", model]
    env = subprocess.run(["sh", "-c", f". {shlex.quote(str(out / 'disaggregated' / 'launch.env'))} && "
                                      "printf %s \"$DWDP_TRTLLM_CONFIG\""], capture_output=True, text=True, timeout=300)
    assert env.stdout == str(out.resolve() / "disaggregated" / "dwdp.yaml"), env


PLANNER_FILES = {"binary": bytes(range(256)) * 4, "empty": b'{"runs": []}',
                 "workload_list": b'{"runs": [{"config": {"workload": [1, 2]}, "metrics": {}}]}',
                 "run_list": b'{"runs": [[1]]}', "metrics_list": b'{"runs": [{"metrics": [1]}]}'}


@pytest.mark.parametrize("argv,needle", [
    (["plan", "--calibration", "binary"], "binary: <root>: not UTF-8 text (byte 128)"),
    (["validate-plan", "binary"], "binary: <root>: not UTF-8 text (byte 128)"),
    (["validate-plan", "empty"], "empty: runs: the file holds no runs"),
    (["validate-plan", "workload_list"], "workload_list: runs[0].config.workload: expected a mapping, got list"),
    (["validate-plan", "run_list"], "run_list: runs[0]: expected a mapping"),
    (["validate-plan", "metrics_list"], "metrics_list: runs[0].metrics: expected a mapping, got list"),
], ids=lambda v: "_".join(v) if isinstance(v, list) else None)
def test_planner_input_files_exit_2_in_one_line_naming_the_file(tmp_path, capsys, argv, needle):
    for name, data in PLANNER_FILES.items():
        (tmp_path / name).write_bytes(data)
    argv = [str(tmp_path / a) if a in PLANNER_FILES else a for a in argv]
    code = cli.main(argv + ["--no-bench-results"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("plot,needle", [
    ("DIR", "is a directory"), ("FILE/x.png", "is a file, not a directory"), ("DIR/x.txt", "expected a .png, .pdf or .svg"),
    ("/proc/dwdp_test.png", "cannot write /proc/dwdp_test.png"),
])
def test_plan_plot_path_problems_exit_2_naming_plot(tmp_path, capsys, plot, needle):
    (tmp_path / "FILE").write_text("x")
    plot = plot.replace("DIR", str(tmp_path)).replace("FILE", str(tmp_path / "FILE"))
    assert cli.main(["plan", "--isl", "8192", "--no-bench-results", "--plot", plot]) == 2
    err = capsys.readouterr().err
    assert f"--plot: " in err and needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]


def test_plan_plot_is_written_whole(tmp_path, capsys):
    out = tmp_path / "sub" / "plan.png"
    assert cli.main(["plan", "--isl", "8192", "--no-bench-results", "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG" and [p.name for p in out.parent.iterdir()] == ["plan.png"]


def test_plan_skips_a_binary_file_among_the_bench_results(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x.json").write_bytes(bytes(range(256)) * 4)
    assert cli.main(["plan", "--isl", "8192", "--target", "engine", "--verbose", "--bench-results", str(tmp_path / "r")]) == 0
    assert "x.json: not readable JSON (UnicodeDecodeError)" in " ".join(capsys.readouterr().out.split())


def test_plan_calibration_does_not_depend_on_the_working_directory(tmp_path, monkeypatch, capsys):
    args = ["plan", "--model", "deepseek-r1", "--dwdp-size", "4", "--isl", "8192", "--json"]
    assert cli.main(args) == 0
    here = capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert cli.main(args) == 0
    assert capsys.readouterr().out == here


@pytest.mark.timeout(900)
def test_warmup_longer_than_the_run_is_refused_before_any_rank(tmp_path, capsys):
    """Issue 22: exit 2 naming run.warmup_iters, before any rank starts (was: the whole run, then exit 1)."""
    code = cli.main(["bench", str(ROOT / "configs/bench/ci_smoke.yaml"), "--out", str(tmp_path / "o"), "--no-plots",
                     "--set", "run.warmup_iters=50"])
    err = capsys.readouterr().err
    assert code == 2 and "run.warmup_iters: 50 warm-up iterations" in err and not (tmp_path / "o").exists(), err


def test_a_full_out_at_the_start_is_one_line_naming_the_file_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """A filesystem that refuses the run's first write (its lock file): the lock file is made a link to /dev/full,
    which refuses writes (and truncation), so the test needs no mount (the real full tmpfs below needs root). Was an
    OSError naming no file."""
    from dwdp_trtllm.bench import runner

    monkeypatch.setattr(runner, "engine_run_mode", lambda: pytest.fail("a rank was started"))
    out = tmp_path / "out"
    (out / "points").mkdir(parents=True)
    (out / ".dwdp.lock").symlink_to("/dev/full")
    assert cli.main(["bench", str(ROOT / "configs/bench/ci_smoke.yaml"), "--out", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"dwdp bench: config error: {out / '.dwdp.lock'}: --out: cannot write the run's lock file ("), err
    assert sorted(p.name for p in out.iterdir()) == ["points"] and not list((out / "points").iterdir())


@pytest.fixture
def full_tmpfs(tmp_path):
    """A 64 KiB tmpfs filled to the last byte; needs root with CAP_SYS_ADMIN, else skipped with the reason (the
    /dev/full test above covers the logic)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass  # ENOSPC: full
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_real_full_filesystem_at_the_start_names_the_file_and_leaves_no_directory(full_tmpfs, capsys, monkeypatch):
    from dwdp_trtllm.bench import runner

    monkeypatch.setattr(runner, "engine_run_mode", lambda: pytest.fail("a rank was started"))
    out = full_tmpfs / "a" / "out"
    assert cli.main(["bench", str(ROOT / "configs/bench/ci_smoke.yaml"), "--out", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out / '.dwdp.lock'}: --out: cannot write the run's lock file" in err[0], err
    assert sorted(os.listdir(full_tmpfs)) == ["filler"]  # a/, out/, points/ and the lock file removed again


def test_a_live_run_in_another_pid_namespace_keeps_its_segments(tmp_path):
    """The real thing: a process in a new pid namespace (unshare --pid, its /proc its own, as in a container with
    --ipc=host) names a segment with its own tag; there its pid is 1 or so, a pid that here is another process or
    none. Our sweep leaves the segment alone while that run lives, and after it ended too (nothing here can prove
    a process of another namespace dead). A later run in a namespace of its own (a restarted container) is another
    namespace again: it keeps the segment too (safe, at the price of an orphan that only a person removes).""" 
    root = str(ROOT)
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); from dwdp_trtllm.core.transport import shm; "
            "open(sys.argv[2] + '/' + shm.owner_tag('0123abcd') + '_dwdp_0_w13', 'w').close(); print('made', flush=True); "
            "time.sleep(float(sys.argv[3]))")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here (unshare: {probe.stderr.strip() or probe.returncode})")
    other = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code, root,
                              str(tmp_path), "60"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert other.stdout.readline().strip() == "made"
        (seg,) = tmp_path.iterdir()
        assert not seg.name.startswith(f"dwdp_n{os.stat('/proc/self/ns/pid').st_ino}_")  # another namespace's tag
        assert shm.sweep_orphaned(str(tmp_path)) == [] and seg.exists()  # alive there: kept
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait(timeout=300)
    assert shm.sweep_orphaned(str(tmp_path)) == [] and seg.exists()  # dead there, but not provably so from here
    sweep = ("import sys; sys.path.insert(0, sys.argv[1]); from dwdp_trtllm.core.transport import shm; "
             "print(len(shm.sweep_orphaned(sys.argv[2])))")
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", sweep, root, str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "0" and seg.exists(), r.stderr
