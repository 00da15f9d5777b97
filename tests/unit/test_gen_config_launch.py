"""gen-config's launch scripts against upstream's command lines and a POSIX shell.

- Every flag of every `trtllm-serve` / `trtllm-bench` line gen-config writes (commands.sh, launch.slurm) exists in the
  click options of each stored TensorRT-LLM CLI named below (read file by file from NVIDIA/TensorRT-LLM):
  `tensorrt_llm/commands/serve.py` @ 00209af149e7 and @ 4c05a74891e4, `tensorrt_llm/commands/bench.py` @ 0c9a37db1f06
  (the trtllm-bench group) and `tensorrt_llm/bench/benchmark/throughput.py` @ 000a01de66f0. `--config` is in the
  first serve only and in no throughput command: the old scripts' `--config` fails here.
- Every srun step of launch.slurm runs `--mpi=pmix` (NVIDIA/srt-slurm `src/srtctl/backends/trtllm.py`
  @ 15709a57 `get_srun_config`: `SrunConfig(mpi="pmix", ...)`), a server of N GPUs as N tasks under
  `trtllm-llmapi-launch` (`tensorrt_llm/llmapi/trtllm-llmapi-launch` @ 020c89e6: rank 0 runs the command, the other
  ranks `mgmn_worker_node`), as srt-slurm's `build_worker_command` (same file and commit).
- commands.sh (`#!/bin/sh`) parses and runs under dash with stub commands: each server's output lands in its log
  (`&>` under dash backgrounds the command and truncates the log, so the output went to the terminal).
- `--engine upstream --launch rendezvous` is refused: upstream's DWDP group forms over MPI only
  (`tensorrt_llm/_torch/pyexecutor/dwdp.py` @ 198af04538bc `DwdpManager._init_dwdp_group`: "DWDP requires MPI backend
  (MPIDist)", `COMM_WORLD.Create_group`; its VMM-era successor `_create_dwdp_comm` forms it over MPI as well).
"""
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from dwdp_trtllm.cli import main

# ---- upstream's click options, as read (option strings of each command, aliases included) ----------------------------
#: tensorrt_llm/commands/serve.py @ 00209af149e7 `serve`
SERVE_00209AF1 = {
    "--tokenizer", "--custom_tokenizer", "--host", "--port", "--backend", "--custom_module_dirs", "--log_level",
    "--max_beam_width", "--max_batch_size", "--max_num_tokens", "--max_seq_len", "--tensor_parallel_size", "--tp_size",
    "--pipeline_parallel_size", "--pp_size", "--context_parallel_size", "--cp_size", "--moe_expert_parallel_size",
    "--ep_size", "--moe_cluster_parallel_size", "--cluster_size", "--gpus_per_node", "--free_gpu_memory_fraction",
    "--kv_cache_free_gpu_memory_fraction", "--num_postprocess_workers", "--trust_remote_code", "--revision",
    "--config", "--extra_llm_api_options", "--reasoning_parser", "--tool_parser", "--metadata_server_config_file",
    "--server_role", "--fail_fast_on_attention_window_too_large", "--otlp_traces_endpoint", "--disagg_cluster_uri",
    "--enable_chunked_prefill", "--media_io_kwargs", "--chat_template"}
#: tensorrt_llm/commands/serve.py @ 4c05a74891e4 `serve`: no --config, --tp_size only
SERVE_4C05A748 = {
    "--tokenizer", "--host", "--port", "--backend", "--log_level", "--max_beam_width", "--max_batch_size",
    "--max_num_tokens", "--max_seq_len", "--tp_size", "--pp_size", "--ep_size", "--cluster_size", "--gpus_per_node",
    "--kv_cache_free_gpu_memory_fraction", "--num_postprocess_workers", "--trust_remote_code",
    "--extra_llm_api_options", "--reasoning_parser", "--metadata_server_config_file", "--server_role",
    "--fail_fast_on_attention_window_too_large", "--disagg_cluster_uri", "--enable_chunked_prefill",
    "--media_io_kwargs"}
#: `disaggregated` and `disaggregated_mpi_worker`, the same at both serve.py commits
DISAGGREGATED = {"-c", "--config_file", "-m", "--metadata_server_config_file", "-t", "--server_start_timeout", "-r",
                 "--request_timeout", "-l", "--log_level", "--metrics-log-interval"}
DISAGG_MPI_WORKER = {"-c", "--config_file", "--log_level"}
#: tensorrt_llm/commands/bench.py @ 0c9a37db1f06 (the trtllm-bench group)
BENCH_GROUP = {"--model", "-m", "--model_path", "--workspace", "-w", "--log_level", "--revision"}
#: tensorrt_llm/bench/benchmark/throughput.py @ 000a01de66f0 `throughput_command`: no --config
THROUGHPUT_000A01DE = {
    "--engine_dir", "--backend", "--extra_llm_api_options", "--max_batch_size", "--max_num_tokens", "--max_seq_len",
    "--beam_width", "--kv_cache_free_gpu_mem_fraction", "--dataset", "--eos_id", "--modality", "--max_input_len",
    "--num_requests", "--warmup", "--target_input_len", "--target_output_len", "--tp", "--pp", "--ep",
    "--cluster_size", "--concurrency", "--streaming", "--report_json", "--iteration_log", "--output_json",
    "--request_json", "--enable_chunked_context", "--scheduler_policy"}
SERVE_VERSIONS = {"serve.py @ 00209af1": SERVE_00209AF1, "serve.py @ 4c05a748": SERVE_4C05A748}

R1 = ["--preset", "deepseek-r1", "--dwdp-size", "4", "--gen-tp", "4", "--gpu-memory-gb", "400"]
#: every launch shape gen-config writes: one node / two nodes, MPI / rendezvous, both engines, aggregated, bench
SHAPES = {
    "mpi-1node": R1,
    "rendezvous-1node": R1 + ["--launch", "rendezvous"],
    "mpi-2nodes": ["--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8"],
    "rendezvous-2nodes": ["--preset", "deepseek-r1", "--dwdp-size", "8", "--gen-tp", "8", "--launch", "rendezvous"],
    "upstream-disagg": ["--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gpu", "gb200", "--gen-tp", "4"],
    "aggregated": ["--mode", "aggregated", "--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gpu", "gb200"],
    "bench": ["--mode", "bench", "--preset", "deepseek-r1", "--weight-dtype", "nvfp4", "--gpu", "gb200"],
}
_STOP = ("&", "&&", ";", "|", "||")


def _gen(tmp_path, name, args):
    out = tmp_path / name
    assert main(["gen-config", "--model", "/ckpt/m", "--out", str(out), *args]) == 0
    return out


def _scripts(out: Path) -> dict[str, str]:
    return {f.name: f.read_text() for f in out.iterdir() if f.name in ("commands.sh", "launch.slurm")}


def _invocations(text: str):
    """(program, args) of every trtllm-serve / trtllm-bench command in a script, args up to the first redirection or
    shell operator."""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for prog in ("trtllm-serve", "trtllm-bench"):
            if f"{prog} " not in line:
                continue
            words = shlex.split(line[line.index(f"{prog} "):], comments=True)[1:]
            args = []
            for w in words:
                if w in _STOP or w.startswith(">") or w[:1].isdigit() and ">" in w:
                    break
                args.append(w)
            yield prog, args


def _flags(args):
    return [a.split("=", 1)[0] for a in args if a.startswith("-")]


def _check(prog: str, args: list[str]) -> list[str]:
    """The flags of one invocation that a stored upstream CLI lacks, named with the commit."""
    bad = []
    if prog == "trtllm-serve":
        sub = args[0] if args and args[0] in ("disaggregated", "disaggregated_mpi_worker") else "serve"
        if sub == "serve":
            for version, opts in SERVE_VERSIONS.items():
                bad += [f"trtllm-serve {f} ({version})" for f in _flags(args) if f not in opts]
        else:
            opts = DISAGGREGATED if sub == "disaggregated" else DISAGG_MPI_WORKER
            bad += [f"trtllm-serve {sub} {f}" for f in _flags(args[1:]) if f not in opts]
    else:
        assert "throughput" in args, args
        i = args.index("throughput")
        bad += [f"trtllm-bench {f} (bench.py @ 0c9a37db)" for f in _flags(args[:i]) if f not in BENCH_GROUP]
        bad += [f"trtllm-bench throughput {f} (throughput.py @ 000a01de)" for f in _flags(args[i + 1:])
                if f not in THROUGHPUT_000A01DE]
    return bad


def test_every_launch_flag_exists_in_each_stored_upstream_cli(tmp_path):
    seen, bad = set(), []
    for name, args in SHAPES.items():
        for script, text in _scripts(_gen(tmp_path, name, args)).items():
            for prog, argv in _invocations(text):
                sub = argv[0] if argv and argv[0].startswith("disagg") else "serve"
                seen.add(prog if prog == "trtllm-bench" else f"{prog} {sub}")
                bad += [f"{name}/{script}: {b}" for b in _check(prog, argv)]
    # every command kind was checked (a parser that found nothing would pass everything)
    assert seen == {"trtllm-serve serve", "trtllm-serve disaggregated", "trtllm-serve disaggregated_mpi_worker",
                    "trtllm-bench"}, seen
    assert bad == []


def test_the_flag_check_refuses_what_a_stored_cli_lacks():
    """The check itself: --config is refused for trtllm-bench throughput @ 000a01de and serve @ 4c05a748."""
    assert _check("trtllm-bench", ["-m", "M", "throughput", "--config", "x"]) == [
        "trtllm-bench throughput --config (throughput.py @ 000a01de)"]
    assert _check("trtllm-serve", ["M", "--tensor_parallel_size", "2", "--config", "x"]) == [
        "trtllm-serve --tensor_parallel_size (serve.py @ 4c05a748)", "trtllm-serve --config (serve.py @ 4c05a748)"]


def test_every_srun_step_runs_pmix_and_a_server_of_n_gpus_as_n_tasks(tmp_path):
    for name in ("mpi-2nodes", "rendezvous-2nodes"):
        slurm = (_gen(tmp_path, name, SHAPES[name]) / "launch.slurm").read_text()
        steps = [ln for ln in slurm.splitlines() if "srun " in ln]
        assert steps and all(" --mpi=pmix " in ln for ln in steps), steps
    # rendezvous: 8 single-GPU context servers and one TP8 generation server, each one step on its node
    serve = [ln for ln in steps if "trtllm-serve /ckpt/m" in ln]
    assert len(serve) == 9 and all("trtllm-llmapi-launch trtllm-serve" in ln for ln in serve)
    assert sum(" -n 1 " in ln for ln in serve) == 8 and sum(" -n 8 " in ln for ln in serve) == 1


def test_upstream_engine_with_a_rendezvous_launch_is_refused(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["gen-config", "--model", "m", "--out", str(out), *SHAPES["upstream-disagg"], "--launch",
                 "rendezvous"]) == 2
    err = capsys.readouterr().err
    assert "--launch" in err and "_create_dwdp_comm" in err and "--launch mpi" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_scripts_use_posix_redirection(tmp_path):
    for name, args in SHAPES.items():
        for script, text in _scripts(_gen(tmp_path, name, args)).items():
            assert "&>" not in text, f"{name}/{script}"


DASH = shutil.which("dash")


@pytest.mark.skipif(DASH is None, reason="dash is not installed (apt-get install dash): commands.sh not run under it")
def test_commands_sh_parses_under_dash(tmp_path):
    for name, args in SHAPES.items():
        sh = _gen(tmp_path, name, args) / "commands.sh"
        r = subprocess.run([DASH, "-n", str(sh)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (name, r.stderr)


STUB = """#!/bin/sh
# stand-in for {prog}: its arguments on stdout, one line on stderr, then a marker file (the test waits on it)
echo "{prog} $*"
echo "{prog} stderr" >&2
: > "$STUB_DIR/done.$$"
"""


@pytest.mark.skipif(DASH is None, reason="dash is not installed (apt-get install dash): commands.sh not run under it")
def test_rendezvous_commands_sh_runs_under_dash_with_every_log_filled(tmp_path):
    """Stub trtllm-serve / dwdp on PATH, commands.sh under dash: each server's stdout and stderr land in its own log
    file. Wait on the stubs' marker files (one per trtllm-serve run: 4 context, 1 generation, the proxy)."""
    out = _gen(tmp_path, "o", SHAPES["rendezvous-1node"])
    bin_dir, stub_dir = tmp_path / "bin", tmp_path / "stub"
    bin_dir.mkdir()
    stub_dir.mkdir()
    for prog in ("trtllm-serve", "dwdp"):
        (bin_dir / prog).write_text(STUB.format(prog=prog))
        (bin_dir / prog).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_DIR": str(stub_dir)}
    r = subprocess.run([DASH, str(out / "commands.sh")], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    import time
    deadline = time.monotonic() + 120  # a bound on a hang, not a timing assertion: the markers normally exist at once
    while len([p for p in stub_dir.iterdir() if p.name.startswith("done.")]) < 7 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len([p for p in stub_dir.iterdir() if p.name.startswith("done.")]) == 7  # dwdp + 6 trtllm-serve
    for role, i in [("context", r) for r in range(4)] + [("generation", 0)]:
        log = (out / f"{role}{i}.log").read_text()
        assert "trtllm-serve /ckpt/m --host localhost" in log and "trtllm-serve stderr" in log, (role, i, log)
    # the terminal got only the proxy's (foreground) and the install hook's lines
    assert "--extra_llm_api_options" not in r.stdout and "disaggregated -c" in r.stdout


@pytest.mark.skipif(DASH is None, reason="dash is not installed (apt-get install dash): commands.sh not run under it")
def test_several_node_rendezvous_commands_sh_points_to_slurm_only(tmp_path):
    """A rendezvous launch over two nodes has no hostfile: commands.sh says to submit launch.slurm and nothing else
    (it grepped a hostfile that is not written)."""
    out = _gen(tmp_path, "o", SHAPES["rendezvous-2nodes"])
    r = subprocess.run([DASH, str(out / "commands.sh")], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (1, "several nodes: run sbatch launch.slurm\n")


REPO = Path(__file__).resolve().parents[2]
#: where a deployer reads a single-server launch line: `dwdp serve --help` (its module docstring), README, TRTLLM.md
DOCUMENTED = ("dwdp_trtllm/commands/serve.py", "README.md", "docs/TRTLLM.md")


def _documented_serve_lines():
    """(file, trtllm-serve arguments) of every documented `dwdp serve --dwdp X MODEL ...` / `trtllm-serve MODEL ...`
    line naming flags, up to its closing backtick or a bracketed `[...]` placeholder."""
    for rel in DOCUMENTED:
        for line in (REPO / rel).read_text().splitlines():
            for prog in ("dwdp serve --dwdp ", "trtllm-serve MODEL "):
                if prog not in line:
                    continue
                rest = line.split(prog, 1)[1]
                rest = rest.split(" ", 1)[1] if prog.startswith("dwdp") and " " in rest else rest  # drop --dwdp's path
                rest = rest.split("`", 1)[0].split("[", 1)[0]
                args = shlex.split(rest)
                if any(a.startswith("--") for a in args):
                    yield rel, args


def test_every_documented_single_server_launch_line_exists_in_each_stored_serve():
    """`dwdp serve --help` showed `MODEL --config trtllm.yaml`, a flag serve.py @ 4c05a748 does not have: every
    documented single-server line passes only flags both stored serve commands take."""
    lines = list(_documented_serve_lines())
    assert {rel for rel, _ in lines} == set(DOCUMENTED), lines  # each place was read (a parser that found none passes)
    bad = [f"{rel}: {b}" for rel, args in lines for b in _check("trtllm-serve", args if args[0] != "MODEL" else
                                                               args[1:])]
    assert bad == []
