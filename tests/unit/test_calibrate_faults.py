"""`dwdp calibrate` under faults: its all-to-all ranks die with it (kill -9 of the parent), and a model the CPU
functional check cannot finish is refused before anything runs, naming --model."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: generous bounds of the polls below (a loaded 2-core machine); on time they return at once
START_S, GONE_S = 300.0, 60.0


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _named_ranks(parent: subprocess.Popen, names: set[str]) -> list[psutil.Process]:
    """The parent's descendants that took one of `names` (they do so right after tying themselves to the parent:
    calibrate/dep_comm._worker); polled until all are there."""
    end = time.monotonic() + START_S
    while time.monotonic() < end:
        assert parent.poll() is None, parent.communicate()
        kids = []
        for k in psutil.Process(parent.pid).children(recursive=True):
            try:
                if k.name() in names:
                    kids.append(k)
            except psutil.NoSuchProcess:
                pass
        if {k.name() for k in kids} == names:
            return kids
        time.sleep(0.05)
    raise AssertionError(f"no processes named {sorted(names)} within {START_S:g} s")


@pytest.mark.slow  # runs `dwdp calibrate --device cpu` up to its all-to-all step: ~10 s on 2 cores
@pytest.mark.timeout(900)
def test_kill_9_of_calibrate_takes_its_ranks_with_it(tmp_path):
    """The all-to-all ranks are stopped (SIGSTOP: they cannot finish and leave on their own), then the parent gets
    SIGKILL: the ranks go with it (PR_SET_PDEATHSIG, as bench's ranks), none is left. They lived on (3-10 s while
    running; stopped, for ever)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "dwdp_trtllm.cli", "calibrate", "--device", "cpu", "--out",
                             str(tmp_path / "cal.json")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    kids: list[psutil.Process] = []
    try:
        kids = _named_ranks(proc, {"dwdp-a2a-rank0", "dwdp-a2a-rank1"})
        for k in kids:
            k.send_signal(signal.SIGSTOP)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=GONE_S)
        end = time.monotonic() + GONE_S
        while time.monotonic() < end and any(_alive(k.pid) for k in kids):
            time.sleep(0.05)
        assert [k.pid for k in kids if _alive(k.pid)] == [], "ranks left after kill -9 of dwdp calibrate"
        assert not (tmp_path / "cal.json").exists()
    finally:
        for k in kids:  # the ranks this test started (by pid): none should be left, but never leak them
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


GB = 10 ** 9


@pytest.fixture
def no_run(monkeypatch):
    """Nothing of the pipeline may start: a refused model fails the test at once instead of filling GBs."""
    from dwdp_trtllm.calibrate import pipeline

    def started(*a, **k):
        raise AssertionError("the calibration started")
    monkeypatch.setattr(pipeline, "real_tools", started)
    monkeypatch.setattr(pipeline, "run_calibration", started)


def _host(monkeypatch, available: int, bps: float):
    """This machine as the refusal sees it: `available` bytes free, fresh memory filled at `bps`."""
    from dwdp_trtllm.calibrate import footprint
    from dwdp_trtllm.deploy import host_resources

    monkeypatch.setattr(host_resources, "host_available", lambda: (available, "MemAvailable in /proc/meminfo"))
    monkeypatch.setattr(footprint, "fill_rate", lambda nbytes=0: bps)


def test_deepseek_r1_on_the_cpu_is_refused_before_it_starts(tmp_path, capsys, monkeypatch, no_run):
    """The 2-core machine: 23 GB available, fresh memory filled at 0.08 GB/s. The run sat in step 1 of 5 for minutes
    (one MoE layer of 256 experts is 22.5 GB at bf16, and the group pull holds two). Now: exit 2, one line naming
    --model, the bytes and the time it would take, and the presets that do fit."""
    from dwdp_trtllm.cli import main

    _host(monkeypatch, 23 * GB, 0.08 * GB)
    code = main(["calibrate", "--device", "cpu", "--model", "deepseek-r1", "--out", str(tmp_path / "c.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    line = err[0]
    assert "--model: deepseek-r1 on --device cpu holds at least 45.10 GB at once" in line, line
    assert "one MoE layer of 22.55 GB" in line and "fills at least 90.19 GB: about 19 min" in line, line
    assert "23.00 GB available" in line and "limited to 10 min" in line, line
    fits = line.split("use a model that fits: ")[1].split(" (")[0].split(", ")
    assert "tiny" in fits and "deepseek-v2-lite" in fits and "deepseek-r1" not in fits and "deepseek-v3" not in fits
    assert not (tmp_path / "c.json").exists()


def test_the_limit_is_the_work_not_a_list_of_names(monkeypatch):
    """The same model passes on a host that holds and fills it in time, and fails on memory or on time alone; a
    made-up model is judged by its shape."""
    import dataclasses

    from dwdp_trtllm.calibrate.footprint import CPU_LIMIT_S, cpu_footprint, cpu_refusal
    from dwdp_trtllm.spec.models import PRESETS

    r1 = PRESETS["deepseek-r1"]
    fp = cpu_footprint(r1, 2)
    assert fp.layer_bytes == 256 * 3 * 7168 * 2048 * 2 and fp.peak_bytes == 2 * fp.layer_bytes
    assert cpu_refusal(r1, 2, 100 * GB, "m", 10 * GB, PRESETS) is None  # a big host with fast memory runs it
    # one rank holds one layer (22.55 GB): not on 24 GB, where the process itself needs its 2 GiB beside it
    one = cpu_refusal(r1, 1, 24 * GB, "m", 10 * GB, PRESETS)
    assert "holds at least 22.55 GB" in one and "24.00 GB available (m), 2.15 GB of it for the process itself" in one
    on_memory = cpu_refusal(r1, 2, 40 * GB, "m", 10 * GB, PRESETS)
    assert "40.00 GB available" in on_memory and "limited to" not in on_memory
    slow = fp.filled_bytes / (CPU_LIMIT_S * 2)  # the fill alone takes twice the limit
    on_time = cpu_refusal(r1, 2, 1000 * GB, "m", slow, PRESETS)
    assert "limited to 10 min" in on_time and "available" not in on_time.split(";")[1]
    wide_tiny = dataclasses.replace(PRESETS["tiny"], name="wide-tiny", hidden_size=16384, moe_intermediate=16384)
    assert cpu_refusal(PRESETS["tiny"], 2, 23 * GB, "m", 0.08 * GB, PRESETS) is None
    assert cpu_refusal(wide_tiny, 2, 23 * GB, "m", 0.08 * GB, PRESETS).startswith("wide-tiny on --device cpu")


def test_the_tiny_check_prints_its_estimate(tmp_path, capsys, monkeypatch):
    """What a run that is allowed does and how long it takes: the header says the bytes it fills and the time here."""
    from dwdp_trtllm.commands.calibrate import check_cpu_model
    from dwdp_trtllm.spec.models import PRESETS

    _host(monkeypatch, 23 * GB, 0.08 * GB)
    assert check_cpu_model(PRESETS["tiny"], 2) == "fills at least 0.75 MiB: under a second here"
