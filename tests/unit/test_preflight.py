"""Pre-flight (issue 22): /dev/shm, host and device memory, warm-up vs iterations, all refused before any rank starts.

The machine is read by one function, host_resources.read_free; these tests replace it with a fake reading, and the
engine's launcher with one that fails the test if a rank would start."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from dwdp_trtllm.deploy import host_resources
from dwdp_trtllm.bench import runner
from dwdp_trtllm.bench.preflight import (PreflightError, check_resources, check_warmup, run_needs, shm_segments,
                                         sure_iterations)
from dwdp_trtllm.bench.sweep import load_sweep
from dwdp_trtllm.spec.workload import generate_requests
from dwdp_trtllm.spec.config import BenchConfig
from dwdp_trtllm.engine.records import Request
from dwdp_trtllm.deploy.host_resources import FreeResources
from dwdp_trtllm.spec.schema import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs/bench/ci_smoke.yaml")
PLENTY = 1 << 50


def _free(**kw) -> FreeResources:
    base = dict(shm_free=PLENTY, shm_total=PLENTY, host_available=PLENTY, process_cap=None)
    base.update(kw)
    return FreeResources(**base)


@pytest.fixture
def no_ranks(monkeypatch):
    """Any rank start fails the test: a refusal must come before the launcher."""
    def boom():
        raise AssertionError("a rank was started")
    monkeypatch.setattr(runner, "engine_run_mode", boom)


def _fake_machine(monkeypatch, free: FreeResources) -> list:
    calls = []
    monkeypatch.setattr(host_resources, "read_free", lambda **kw: calls.append(kw) or free)
    return calls


def _refused(args: list[str]) -> str:
    """`dwdp bench SMOKE args` through the CLI's error path: exit 2 and its stderr (ConfigError -> exit 2 is cli.main's;
    run_bench is called directly so that the test does not depend on every other subcommand importing)."""
    out = Path(args[args.index("--out") + 1])
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    with pytest.raises(ConfigError) as e:
        runner.run_bench(SMOKE, sets, out_dir=out, plots=False)
    return f"dwdp bench: config error: {e.value}"


def _smoke_cfg(**sets) -> BenchConfig:
    _, points = load_sweep(SMOKE, [f"{k}={v}" for k, v in sets.items()])
    return points[0].config


def test_a_full_dev_shm_is_refused_before_any_rank_with_the_numbers_and_the_container_remedy(
        tmp_path, capsys, monkeypatch, no_ranks):
    calls = _fake_machine(monkeypatch, _free(shm_free=64 << 10, shm_total=64 << 20))
    out = tmp_path / "o"
    err = _refused(["--out", str(out)])
    assert calls == [{"gpus": False}]
    needs = run_needs(_smoke_cfg()).shm_bytes
    assert needs > 64 << 10
    assert "/dev/shm" in err and f"({needs:,} bytes)" in err, err
    assert "6.55e-05 GB (65,536 bytes) free of 0.0671 GB (67,108,864 bytes)" in err, err
    assert "--shm-size" in err and "--ipc=host" in err and "SIGBUS" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()  # nothing written


def test_host_memory_short_is_refused_naming_max_num_tokens(tmp_path, capsys, monkeypatch, no_ranks):
    _fake_machine(monkeypatch, _free(host_available=1 << 20))
    err = _refused(["--out", str(tmp_path / "o")])
    assert "host memory" in err and "2 ranks need about" in err and "0.00105 GB (1,048,576 bytes) is available" in err, err
    assert "workload.max_num_tokens (now 192" in err and "fewer run.ranks (now 2)" in err and "SIGKILL" in err
    assert "dwdp.dwdp_size" not in err  # already as large as run.ranks: not offered
    assert len(err.strip().splitlines()) == 1


def test_a_per_process_cap_below_one_rank_is_refused(monkeypatch):
    cfg = _smoke_cfg()
    with pytest.raises(PreflightError, match="RLIMIT_AS"):
        check_resources(cfg, _free(process_cap=1 << 20))
    check_resources(cfg, _free(process_cap=1 << 40))


def test_the_run_that_fits_reads_the_machine_once_and_runs(tmp_path, capsys, monkeypatch):
    calls = _fake_machine(monkeypatch, _free())
    seen = []

    def fake_mode(cfg, mode, queues, progress=None):
        from dwdp_trtllm.bench.synthetic import synthetic_run_mode
        seen.append(mode)
        return synthetic_run_mode(cfg, mode, queues, progress=progress)

    monkeypatch.setattr(runner, "engine_run_mode", lambda: fake_mode)
    res = runner.run_bench(SMOKE, out_dir=tmp_path / "o", plots=False)
    assert res["consistent"] and calls == [{"gpus": False}] and seen == ["dep", "dwdp"]


def test_needs_are_memory_py_parts_per_mode():
    from dwdp_trtllm.deploy.memory import dense_weight_bytes, dwdp_ranks, rank_memory

    cfg = _smoke_cfg(**{"run.modes": "[reference, dep, dwdp]"})
    spec, kw = cfg.model.spec(), dict(weight_dtype="float32", max_num_tokens=192)
    dw = dwdp_ranks(spec, cfg.dwdp, engine_dense=True, **kw)
    ref = rank_memory(spec, "dep", group_size=1, **kw)
    needs = run_needs(cfg)
    assert needs.shm_bytes == sum(m.routed_experts for m in dw)  # every rank's local experts, one group of 2
    assert needs.per_rank_mode == "reference"  # every expert on every rank
    assert needs.per_rank[0] == ref.routed_experts + ref.activations + dense_weight_bytes(spec, "float32", engine_dense=True)
    assert run_needs(cfg, ("dwdp",)).per_rank == tuple(m.total for m in dw)


def test_device_memory_is_checked_per_gpu_with_the_ranks_that_share_it():
    cfg = _smoke_cfg(**{"run.device": "cuda", "dwdp.transport": "auto"})
    need = run_needs(cfg).per_rank
    assert run_needs(cfg).shm_bytes == 0  # CUDA transports do not use /dev/shm
    # one GPU: both ranks on it
    with pytest.raises(PreflightError, match=r"GPU 0 runs rank\(s\) \[0, 1\]") as e:
        check_resources(cfg, _free(gpu_free=(need[0] + need[1] - 1,), gpu_total=(80 << 30,)))
    assert "device memory" in str(e.value) and "workload.max_num_tokens" in str(e.value)
    check_resources(cfg, _free(gpu_free=(need[0] + need[1],), gpu_total=(80 << 30,)))
    # two GPUs: one rank each
    check_resources(cfg, _free(gpu_free=(need[0], need[1]), gpu_total=(80 << 30,) * 2))
    with pytest.raises(PreflightError, match=r"GPU 1 runs rank\(s\) \[1\]"):
        check_resources(cfg, _free(gpu_free=(need[0], need[1] - 1), gpu_total=(80 << 30,) * 2))


def test_warmup_at_or_past_the_iterations_exits_2_naming_the_key_before_any_rank(tmp_path, capsys, monkeypatch, no_ranks):
    _fake_machine(monkeypatch, _free())
    cfg = _smoke_cfg()
    queues = generate_requests(cfg.workload, cfg.run.ranks)
    n = max(sure_iterations(q, cfg.workload.max_num_tokens)[0] for q in queues)
    assert 1 < n < 50
    out = tmp_path / "o"
    err = _refused(["--out", str(out), "--set", f"run.warmup_iters={n}"])
    assert f"run.warmup_iters: {n} warm-up iterations, but the busiest rank runs {n} iteration(s)" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    check_warmup(_smoke_cfg(**{"run.warmup_iters": n - 1}), queues)  # one measured iteration is enough


def test_sure_iterations_is_exact_offline_and_a_lower_bound_with_arrivals():
    offline = [Request(request_id=i, rank=0, isl=100, arrival_s=0.0) for i in range(5)]
    assert sure_iterations(offline, 128) == (4, True)  # 500 tokens in 128-token iterations
    late = [Request(request_id=i, rank=0, isl=100, arrival_s=float(i)) for i in range(5)]
    assert sure_iterations(late, 128) == (4, False)  # no iteration takes more than 128 tokens; arrivals may add more
    assert sure_iterations([], 128) == (0, True)


def test_poisson_warmup_that_may_leave_nothing_measured_is_refused_before_the_run_naming_the_key(
        tmp_path, capsys, monkeypatch, no_ranks):
    """Poisson arrivals: the run may take more iterations than its tokens need, but only ceil(tokens / max_num_tokens)
    are certain; a warm-up at or past them ended after the run in an inconsistent point without naming the key."""
    _fake_machine(monkeypatch, _free())
    sets = {"workload.arrival": "poisson", "workload.rate": "1000"}
    cfg = _smoke_cfg(**sets)
    queues = generate_requests(cfg.workload, cfg.run.ranks)
    assert any(r.arrival_s > 0 for q in queues for r in q)
    n = max(sure_iterations(q, cfg.workload.max_num_tokens)[0] for q in queues)
    out = tmp_path / "o"
    err = _refused(["--out", str(out), *sum((["--set", f"{k}={v}"] for k, v in
                                             {**sets, "run.warmup_iters": n}.items()), [])])
    assert (f"run.warmup_iters: {n} warm-up iterations, but the busiest rank is sure to run only (workload.arrival "
            f"poisson: more depend on when requests arrive) {n} iteration(s)") in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    check_warmup(_smoke_cfg(**{**sets, "run.warmup_iters": n - 1}), queues)


def test_read_free_reads_statvfs_of_dev_shm(monkeypatch):
    class St:
        f_bavail, f_frsize, f_blocks, f_files, f_favail, f_flag = 10, 4096, 16, 100, 7, os.ST_RDONLY | os.ST_NOSUID
    seen = []
    monkeypatch.setattr(os, "statvfs", lambda p: seen.append(p) or St())
    free = host_resources.read_free()
    assert seen == ["/dev/shm"] and free.shm_free == 40960 and free.shm_total == 65536
    assert free.shm_files_free == 7 and free.shm_readonly
    assert free.gpu_free is None  # GPUs only when asked
    St.f_files, St.f_flag = 0, 0  # tmpfs without an inode limit reports no inodes at all
    free = host_resources.read_free()
    assert free.shm_files_free is None and not free.shm_readonly


@pytest.mark.parametrize("free,needle", [
    (dict(shm_files_free=3), "segment files in /dev/shm (one per rank, MoE layer and expert tensor, 2 ranks) but "
                             "/dev/shm has 3 free inodes"),
    (dict(shm_readonly=True), "/dev/shm is mounted read-only, but the run creates"),
])
def test_dev_shm_without_inodes_or_read_only_is_refused_before_any_rank(tmp_path, capsys, monkeypatch, no_ranks,
                                                                        free, needle):
    """Bytes to spare but no inode (or a read-only mount): DEP ran 20 s, then DWDP's first segment failed."""
    _fake_machine(monkeypatch, _free(**free))
    out = tmp_path / "o"
    err = _refused(["--out", str(out)])
    files = shm_segments(_smoke_cfg(), "dwdp")
    assert files > 3 and needle in err and f"{files:,} segment files" in err and "--shm-size" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    check_resources(_smoke_cfg(**{"run.modes": "[dep]"}), _free(**free))  # DEP on the CPU creates no segment


def test_verify_checks_the_three_modes_it_runs_before_any_rank(capsys, monkeypatch):
    """verify runs reference, dep and dwdp whatever run.modes says: reference (every expert on every rank) decides."""
    from dwdp_trtllm import cli
    from dwdp_trtllm.engine import launcher

    monkeypatch.setattr(launcher, "run_modes", lambda *a, **k: pytest.fail("a rank was started"))
    cfg = _smoke_cfg(**{"run.modes": "[reference, dep, dwdp]"})
    need = sum(run_needs(cfg).per_rank)
    assert need > sum(run_needs(_smoke_cfg()).per_rank)  # more than the config's own modes (dep, dwdp) take
    _fake_machine(monkeypatch, _free(host_available=need - 1))
    assert cli.main(["verify", SMOKE]) == 2
    err = capsys.readouterr().err
    assert "host memory" in err and "in mode reference" in err and len(err.strip().splitlines()) == 1, err


def test_max_iterations_matches_the_scheduler_offline():
    from dwdp_trtllm.spec.batching import RankScheduler

    queue = [Request(request_id=i, rank=0, isl=37 + 13 * i, arrival_s=0.0) for i in range(9)]
    for mnt in (16, 64, 100, 1000):
        sched, n = RankScheduler(queue, mnt), 0
        while sched.next_batch(0.0):
            n += 1
        assert sure_iterations(queue, mnt) == (n, True)


def test_dep_only_offline_is_bounded_by_the_busiest_rank():
    cfg = _smoke_cfg(**{"run.modes": "[dep]"})
    queues = generate_requests(cfg.workload, cfg.run.ranks)
    n = max(sure_iterations(q, cfg.workload.max_num_tokens)[0] for q in queues)
    with pytest.raises(PreflightError, match="run.warmup_iters"):
        check_warmup(_smoke_cfg(**{"run.modes": "[dep]", "run.warmup_iters": n}), queues)


def test_a_real_small_dev_shm_is_refused_end_to_end(tmp_path):
    """The issue's case: /dev/shm nearly full (here a 1 MiB tmpfs over /dev/shm in a private mount namespace, as a
    container's would be). Needs root with CAP_SYS_ADMIN; skipped with the reason otherwise."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here")
    cmd = (f"mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {sys.executable} -m dwdp_trtllm bench "
           f"{ROOT / 'configs/bench/quickstart.yaml'} --no-plots --out {tmp_path / 'o'}")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", cmd], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    if "mount" in r.stderr and r.returncode not in (0, 2) or "unshare:" in r.stderr:
        pytest.skip(f"cannot mount a small /dev/shm here: {r.stderr.strip()[:200]}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "/dev/shm: the run maps" in r.stderr and "free of 0.00105 GB (1,048,576 bytes)" in r.stderr, r.stderr
    assert "--shm-size" in r.stderr and len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_largest_attention_chunk_replays_the_fcfs_packing_offline_and_takes_the_first_chunk_with_arrivals():
    from dwdp_trtllm.bench.preflight import largest_attention_chunk

    offline = [Request(request_id=0, rank=0, isl=100, arrival_s=0.0), Request(request_id=1, rank=0, isl=300, arrival_s=0.0)]
    # 128-token iterations: [100 | 28 of 300], [128 (keys 156)], [128 (keys 284)], [16 (keys 300)]
    assert largest_attention_chunk(offline, 128) == (128, 284)
    late = [Request(request_id=0, rank=0, isl=1000, arrival_s=0.0), Request(request_id=1, rank=0, isl=50, arrival_s=1.0)]
    assert largest_attention_chunk(late, 128) == (128, 128)  # only the first chunk is certain
    assert largest_attention_chunk([], 128) == (0, 0)


def test_cpu_attention_scores_of_long_mla_requests_are_refused_before_any_rank(tmp_path, monkeypatch, no_ranks):
    """The CPU engine's MLA attention takes SDPA's math path (v 16 vs qk 24 in the tiny preset): a mask and fp32 scores
    per (query, key) pair. quickstart at isl 1M used to pass the pre-flight (memory.py assumes flash attention) and
    fail in a rank after ~30 s with "can't allocate memory: you tried to allocate 493833669289 bytes" (the 702,733^2
    mask of rank 0's first request); with 64 GB free it is refused first, naming the scores and workload.isl."""
    from dwdp_trtllm.bench.preflight import cpu_attention_bytes
    from dwdp_trtllm.spec.models import get_model

    tiny = get_model("tiny")
    assert cpu_attention_bytes(tiny, 10, 20) == 10 * 20 * (1 + 2 * tiny.num_heads * 4)
    assert cpu_attention_bytes(get_model("qwen3-30b-a3b"), 10, 20) == 0  # GQA: one head dim, the flash kernel
    _fake_machine(monkeypatch, _free(host_available=64 * 10 ** 9))
    sets = ["workload.isl=1000000", "workload.max_num_tokens=1000000"]
    quick = str(ROOT / "configs/bench/quickstart.yaml")
    with pytest.raises(PreflightError) as e:
        runner.run_bench(quick, sets, out_dir=tmp_path / "o", plots=False)
    msg = str(e.value)
    assert "host memory" in msg and "of attention scores" in msg and "workload.isl (now 1000000" in msg, msg
    assert not (tmp_path / "o").exists()
    _, points = load_sweep(quick, sets)
    needs = run_needs(points[0].config)
    assert needs.attention[0] >= 702_733 ** 2 * 33  # rank 0's first request alone, mask + 2 fp32 copies x 4 heads


def _cgroup_tree(tmp_path, levels: dict[str, tuple[str, int]], proc: str, v2: bool = False):
    """A fake /sys/fs/cgroup (v1: memory/ below it; v2: the unified root) with (limit, usage) per level, and a
    /proc/self/cgroup naming `proc`."""
    root = tmp_path / "cgroup"
    mount = root if v2 else root / "memory"
    limit, usage = ("memory.max", "memory.current") if v2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    mount.mkdir(parents=True)
    if v2:
        (root / "cgroup.controllers").write_text("cpu memory\n")
    for rel, (lim, use) in levels.items():
        d = mount / rel if rel else mount
        d.mkdir(parents=True, exist_ok=True)
        (d / limit).write_text(f"{lim}\n")
        (d / usage).write_text(f"{use}\n")
    pc = tmp_path / "proc_cgroup"
    pc.write_text(f"0::{proc}\n" if v2 else f"4:memory:{proc}\n1:cpu:/\n0::/\n")
    return str(pc), str(root)


def test_a_cgroup_v1_limit_below_the_mount_root_is_seen(tmp_path):
    """This machine's own layout: 4:memory:/process_api/<id>, the mount root unlimited, the limit two levels down."""
    unlimited = str(9223372036854771712)
    pc, root = _cgroup_tree(tmp_path, {"": (unlimited, 10 << 30), "process_api": (unlimited, 9 << 30),
                                       "process_api/abc": (str(4 << 30), 1 << 30)}, "/process_api/abc")
    room = host_resources._cgroup_room(pc, root)
    assert room == (3 << 30, str(tmp_path / "cgroup/memory/process_api/abc"))


def test_the_smallest_limit_of_every_cgroup_level_decides_v1_and_v2(tmp_path):
    for v2 in (False, True):
        base = tmp_path / ("v2" if v2 else "v1")
        pc, root = _cgroup_tree(base, {"": ("max" if v2 else str(1 << 62), 0), "a": (str(8 << 30), 7 << 30),
                                       "a/b": (str(64 << 30), 1 << 30)}, "/a/b", v2=v2)
        mount = base / "cgroup" / ("" if v2 else "memory")
        assert host_resources._cgroup_room(pc, root) == (1 << 30, str(mount / "a"))  # the parent's 1 GiB, not 63


def test_a_container_seeing_the_hosts_cgroup_path_reads_its_own_mount_root(tmp_path):
    pc, root = _cgroup_tree(tmp_path, {"": (str(2 << 30), 1 << 29)}, "/docker/0123abcd")
    assert host_resources._cgroup_room(pc, root) == ((2 << 30) - (1 << 29), str(tmp_path / "cgroup/memory"))


def test_host_available_names_the_cgroup_level_that_decided(monkeypatch):
    monkeypatch.setattr(host_resources, "_meminfo_available", lambda: 20 << 30)
    monkeypatch.setattr(host_resources, "_cgroup_room", lambda: (3 << 30, "/sys/fs/cgroup/memory/process_api/abc"))
    assert host_resources.host_available() == (
        3 << 30, "the memory limit of cgroup /sys/fs/cgroup/memory/process_api/abc minus its usage")
