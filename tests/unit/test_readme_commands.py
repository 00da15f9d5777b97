"""Every command line README.md shows is run here (in-process, through cli.main), or excluded below with its reason.

Command lines are the lines of ```bash blocks (comments dropped, `&&` chains split) and the inline code spans that
start with a command (`dwdp ...`, `pip ...`, `sh ...`, ...), whitespace collapsed (a span may wrap in the
Markdown). Spans with placeholders (`CONFIG.yaml`, `[--opt]`, `...`, `N`, `MODEL`, `FILE`) are synopses: their concrete
forms appear elsewhere in the README and run here. A README edit that adds a command adds it to this test:
`test_every_readme_command_is_run_or_excluded` fails on one it does not know how to treat.
"""
from __future__ import annotations

import re
import sys
import shlex
from pathlib import Path

import pytest

from dwdp_trtllm import cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
COMMAND = re.compile(r"(dwdp|python3?|pip|sh|cd|mpirun|torchrun|sbatch|docker|scripts/)(\s|$)")
PLACEHOLDER = re.compile(r"\[|\.\.\.|\bCONFIG\b|\bMODEL\b|\bN\b|\bFILE\b|<")

#: commands not run here, by prefix, with the reason
EXCLUDED = {
    "pip install": "installs packages: .ci/run runs the README's installs on a fresh clone on every CI run; the "
                   "container install's pin is checked with pip itself by tests/unit/test_install_pin.py",
    "python3 -m pytest": "the test suite itself (.ci/run runs it)",
    "python3 -m venv": "creates an environment (.ci/run's fresh clone has its own)",
    ". .venv/bin/activate": "activates an environment",
    "torchrun": "launches ranks on GPUs of a cluster",
    "mpirun": "launches ranks on GPUs of a cluster",
    "sh deploy/commands.sh": "starts TensorRT-LLM servers (needs TensorRT-LLM and GPUs); gen-config's "
                             "commands.sh content is tested in tests/unit/test_trtllm_gen_config.py",
    "cd deploy": "followed by sbatch: needs a slurm cluster",
    "sbatch": "needs a slurm cluster",
    "scripts/gpu_check.sh": "runs on the GPU machine",
    "dwdp serve": "starts a TensorRT-LLM server (needs TensorRT-LLM)",
    "dwdp build-ops": "compiles the C++/CUDA op (minutes); the CPU build is tested in tests/unit/test_grouped_gemm_cpu.py",
}
#: a command's name alone in a sentence ("`dwdp bench` prints ...") is a mention, not a command line
MENTIONS = {"dwdp", "dwdp bench", "dwdp verify", "dwdp gen-config", "dwdp plan", "dwdp plan-placement", "dwdp calibrate",
            "dwdp size", "scripts/"}
#: walk-through steps whose output the README quotes in the ``` block after the step's title: every quoted line
#: without "..." must be in the command's output (a README that no longer shows what the command prints fails)
QUOTED = {"dwdp plan-placement --dwdp-size 8": "**What one rank holds:**",
          "dwdp gen-config --preset deepseek-r1 --dwdp-size 8": "**Write the deployment:**",
          "dwdp plan --dwdp-size 4,8 --isl 8192 --mnt 16384": "**Which group size fits and pays?**",
          "dwdp size --rate 8": "**How many GPUs for my traffic?**"}
#: README commands that run for more than ~20 s on 2 CPU cores (the README says how long): marked slow
SLOW_COMMANDS = ("dwdp size ",)
#: the command whose recommendation the README's "measured / predicted / not run" box quotes
BOTTOM_LINE_COMMAND = "dwdp plan --model deepseek-r1 --gpu h200 --weight-dtype fp8 --dwdp-size 8"
#: exit codes other than 0 that the README itself states
EXPECTED_EXIT = {"dwdp check-trtllm": 1}  # "exit 1 while not ready": TensorRT-LLM is not installed here


def readme_commands(text: str) -> list[str]:
    """Command lines of a README, in order (see the module docstring)."""
    found: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*", "", line).strip()
            found.extend(part.strip() for part in line.split("&&") if part.strip())
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())
        if COMMAND.match(span) or span.startswith(". "):
            found.extend(part.strip() for part in span.split("&&"))
    return found


def classify(cmd: str) -> str:
    """'run', 'synopsis', 'mention' or 'excluded: <reason>'."""
    for prefix, why in EXCLUDED.items():
        if cmd == prefix or cmd.startswith(prefix + " "):
            return f"excluded: {why}"
    if cmd in MENTIONS:
        return "mention"
    if PLACEHOLDER.search(cmd):
        return "synopsis"
    if cmd.startswith("dwdp "):
        return "run"
    return "unknown"


def quoted_lines(text: str, title: str) -> list[str]:
    """The lines of the first ``` block after `title` in the README, stripped, without those that elide ("...")."""
    block = re.search(r"```[a-z]*\n(.*?)```", text[text.index(title):], re.S).group(1)
    return [ln.strip() for ln in block.splitlines() if ln.strip() and "..." not in ln]


COMMANDS = readme_commands(README.read_text())
RUN = sorted({c for c in COMMANDS if classify(c) == "run"})


def test_every_readme_command_is_run_or_excluded():
    unknown = [c for c in COMMANDS if classify(c) == "unknown"]
    assert not unknown, f"README command lines this test neither runs nor excludes: {unknown}"
    # the extraction finds what the README shows (an extraction that found nothing would pass everything)
    for known in ("dwdp bench configs/bench/quickstart.yaml", "dwdp plan --dwdp-size 4,8 --isl 8192 --mnt 16384",
                  "dwdp plan-placement --dwdp-size 8", "dwdp check-trtllm", "pip install -e ."):
        assert known in COMMANDS, (known, COMMANDS)
    assert any(c.startswith("dwdp gen-config --preset deepseek-r1") for c in RUN), RUN


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory where the README's relative paths resolve (configs/) and its outputs (bench_out/,
    deploy/) land in the test's temporary folder, never in the checkout."""
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    # the README shows a machine without TensorRT-LLM (gen-config's MTP key line says so): a fake one another test of
    # this process imported must not be found
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)
    return tmp_path


@pytest.mark.parametrize("cmd", [pytest.param(c, marks=pytest.mark.slow) if c.startswith(SLOW_COMMANDS) else c
                                 for c in RUN])
def test_readme_command_runs(cmd, workdir, engine, capsys):
    """The command exits as the README says (0 unless it states otherwise). `dwdp bench` runs on the synthetic
    engine (the `engine` fixture): the command line, config and outputs are the README's, the ranks are not
    spawned (tests/unit/test_bench_e2e.py runs the quickstart's engine for real)."""
    argv = shlex.split(cmd)
    code = cli.main(argv[1:])
    out = capsys.readouterr()
    assert code == EXPECTED_EXIT.get(cmd, 0), (cmd, out.out[-2000:], out.err[-2000:])
    if argv[1] == "bench":
        assert [m for m, _ in engine][:2] == ["dep", "dwdp"]
        assert (workdir / "bench_out" / Path(argv[2]).stem / "results.json").is_file()
    if cmd == BOTTOM_LINE_COMMAND:  # the box's quote of the planner's bottom line is what it prints today
        quote = re.search(re.escape(f"(`{cmd}`): \"") + r'(.*?)"', README.read_text(), re.S).group(1)
        flat = lambda t: " ".join(t.replace("\n>", " ").split())
        assert flat(quote).startswith("recommendation") and flat(quote) in flat(out.out), (flat(quote), out.out)
    for prefix, title in QUOTED.items():
        if cmd.startswith(prefix):
            quoted = quoted_lines(README.read_text(), title)
            assert len(quoted) >= 4 and [q for q in quoted if q not in out.out] == [], out.out
    if argv[1] in ("gen-config", "size"):
        out_dir = workdir / argv[argv.index("--out") + 1]
        assert (out_dir / "commands.sh").is_file() and (out_dir / "dwdp.yaml").is_file()
