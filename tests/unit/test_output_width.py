"""What a terminal shows fits 80 columns: every line the commands print (COLUMNS pinned to 80 by tests/conftest.py),
tables wider only under `--wide`, prose wrapped at word boundaries (commands/terminal.py), never cut.

Before: check-trtllm printed a 1,634-character GEMM line, validate-plan a 84- to 131-column table, plan a
684-character legend and pricing lines, plan-placement a 139-character title and truncated its policy names
("lowes…"); each test below fails on that output."""
from __future__ import annotations

import re

import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.commands import terminal

def long_lines(text: str, width: int = 80) -> list[str]:
    """Lines over `width`, but a line of one word: a URL or a path longer than a line is never cut (a cut one cannot
    be followed or copied), and how long a checkout's or temporary path is must not decide a test."""
    return [ln for ln in text.splitlines() if len(ln) > width and len(ln.split()) > 1]


def run(argv: list[str], capsys, code: int = 0) -> str:
    got = cli.main(argv)
    out = capsys.readouterr()
    assert got == code, (argv, out.out[-2000:], out.err[-2000:])
    return out.out


def test_wrap_keeps_words_whole_and_lines_within_the_width():
    text = "word " * 40 + "docs/bench_results/moeop_deepgemm_2026-12-03/moe_op_vs_trtllm.json and more"
    for out in (terminal.wrap(text), terminal.labelled("GEMM", text)):
        assert max(map(len, out.splitlines())) <= 80
        assert out.split()[-len(text.split()):] == text.split()  # every word, whole, in order
    assert terminal.labelled("verdict", "x " * 50).splitlines()[1].startswith(" " * 16)  # wrapped under its text
    assert terminal.wrap("a\n\nb") == "a\n\nb"  # paragraphs kept


def test_width_follows_columns_at_most_80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert terminal.width() == 80
    monkeypatch.setenv("COLUMNS", "60")
    assert terminal.width() == 60
    assert max(map(len, terminal.wrap("abc " * 100).splitlines())) <= 60


def test_check_trtllm_fits(capsys):
    out = run(["check-trtllm"], capsys, code=1)  # no tensorrt_llm here: NOT READY
    assert long_lines(out) == [], long_lines(out)
    assert "GEMM:" in out and "verdict:" in out


def test_check_trtllm_report_with_statuses_fits():
    """A report from an installed TensorRT-LLM (per-target statuses, long module paths) fits too."""
    from dwdp_trtllm.commands.check_trtllm import collect, report_lines

    rep = collect()
    rep["tensorrt_llm"] = "1.3.0rc20"
    for i, t in enumerate(rep["patch_targets"]):
        t["status"] = ("present", "missing", "module not importable: ModuleNotFoundError: No module named "
                       "'tensorrt_llm._torch.pyexecutor.dwdp'")[i % 3]
    text = "\n".join(report_lines(rep))
    assert long_lines(text) == [], long_lines(text)
    assert "    missing  " in text and "ModelLoader.load" in text


WALK_PLAN = ["plan", "--dwdp-size", "4,8", "--isl", "8192", "--mnt", "16384"]  # README's walk-through step 1


@pytest.mark.parametrize("extra", [[], ["--wide"], ["--verbose"]])
def test_plan_prose_fits(capsys, extra):
    """The legend (684 characters on one line before), pricing and recommendation lines wrap within 80 columns; only
    --wide's table may be wider."""
    out = run(WALK_PLAN + extra, capsys)
    lines = out.splitlines()
    if "--wide" in extra:  # the wide tables: the lines from a table's header to its last row
        lines = [ln for ln in lines if not re.match(r"^[\s┃│┏┡└━─╇┳┗┻╋┣┫┠┨]*(G\b|\d|[━─])", ln.lstrip("┃│ "))]
    assert long_lines("\n".join(lines)) == [], long_lines("\n".join(lines))
    flat = " ".join(out.split())
    assert "recommendation against trtllm: " in flat and "inputs: " in flat


def test_plan_says_each_pricing_clause_once(capsys):
    """The walk-through's `plan` printed "DEP communication deepep_deepgemm: DeepGEMM grouped GEMM ..." twice (the
    G=4 and G=8 rows share it; G=8 adds the slow end): each clause of a priced line is said once."""
    flat = " ".join(run(WALK_PLAN, capsys).split())
    priced = re.findall(r"priced \((\w+):.*?\): (.*?)(?= priced \(| calibration: )", flat)
    assert [v for v, _ in priced] == ["trtllm", "deepep_deepgemm"]
    for _, text in priced:
        clauses = text.split("; ")
        assert len(clauses) == len(set(clauses)), clauses
    assert flat.count("DeepGEMM grouped GEMM 1346/1214 TFLOPS") == 1
    assert "slow end: the published 8xH200 DeepEP + grouped GEMM layer" in flat


def test_plan_links_blog_19(capsys):
    """Every plan that names blog 19 (the interference priors' source) says where to read it."""
    from dwdp_trtllm.commands.plan_output import REFERENCES

    out = run(WALK_PLAN, capsys)
    assert "blog 19 Table 3" in out
    url = REFERENCES["blog 19"]
    assert url.startswith("https://github.com/NVIDIA/TensorRT-LLM/blob/") and url.endswith(
        "blog19_DWDP_Distributed_Weight_Data_Parallelism_for_High_Performance_LLM_Inference_on_NVL72.md")
    assert out.splitlines()[-1].strip() == url and out.splitlines()[-2].startswith("blog 19:")


@pytest.mark.parametrize("argv", [["--dwdp-size", "8"], ["--dwdp-size", "16", "--redundant-experts", "3"],
                                  ["--dwdp-size", "32"], ["--dwdp-size", "8", "--num-experts-per-worker", "46",
                                                          "--num-prefetch-experts", "30", "--weight-dtype", "nvfp4"]])
def test_plan_placement_fits_and_names_every_policy(capsys, argv):
    """The title and memory lines wrap; the per-source load is one row per source rank, so it fits any group size,
    and the policy names are whole (they were cut to "lowes…" / "balan…" at G=8)."""
    out = run(["plan-placement", *argv], capsys)
    assert long_lines(out) == [], long_lines(out)
    assert "…" not in out
    head = next(ln for ln in out.splitlines() if ln.startswith("┃") and "source rank" in ln)
    assert "lowest_rank" in head and "balanced" in head


def test_plan_placement_says_why_size_deploys_more_gpus(capsys):
    """plan-placement's smallest count (DEP 7 GPUs for R1 FP8 on H200) is any count; `dwdp size` deploys its
    candidate sizes (DEP8 there): the output says so, naming the flags, and size names what it searched."""
    import argparse

    from dwdp_trtllm.commands import size

    flat = " ".join(run(["plan-placement", "--dwdp-size", "8"], capsys).split())
    assert "smallest GPU count that fits: DWDP 8 GPUs, DEP 7 GPUs" in flat
    assert ("`dwdp size` tries only DWDP groups of 2, 4, 8, 16 and DEP servers of 4, 8, 16 GPUs by default "
            "(--dwdp-size, --dep-size), so here it would deploy DWDP8 and DEP8") in flat
    ap = argparse.ArgumentParser()
    size.add_parser(ap.add_subparsers())
    _, probs = size.problems(ap.parse_args(["size", "--rate", "8", "--duration", "10"]))
    note = size.searched_sizes_note(probs[0][1])
    assert note.startswith("context servers searched: DWDP groups of 2, 4, 8, 16 GPUs, DEP servers of 4, 8, 16 GPUs")
    assert "`dwdp plan-placement` gives the smallest GPU count that fits, any count" in note


SMOKE = "docs/bench_results/bench_h200_smoke_2026-12-02/results.json"
FLOOR = ["docs/bench_results/engine_floor_2026-12-03/b2.json", "docs/bench_results/engine_floor_2026-12-03/f8.json"]


@pytest.mark.parametrize("argv", [[SMOKE, "--gpu", "h200"], [SMOKE, "--gpu", "h200", "--verbose"],
                                  ["--bench-results", "docs/bench_results", FLOOR[1]],
                                  ["--summary", "--bench-results", "docs/bench_results", *FLOOR]])
def test_validate_plan_fits(capsys, argv, monkeypatch):
    """The per-run table was 84 columns (a 96-column one with its note column) and the summary 131: without --wide
    every line fits 80 columns, cells wrap, nothing is cut; --wide keeps one line per row."""
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the results' relative paths
    out = run(["validate-plan", *argv], capsys)
    assert long_lines(out) == [], long_lines(out)
    assert "…" not in out
    if "--summary" in argv:
        assert "b2.json" in out and "f8.json" in out and "(-2.0%)" in out  # b2's attention: 36.9 / 37.7
    else:
        assert re.search(r"^dep\.\S+ +[\d,.]+ +[\d,.]+ +[+-][\d.]+%", out, re.M)
    wide = run(["validate-plan", *argv, "--wide"], capsys)
    assert "┃ file " in wide or "┃ note ┃" in wide  # the boxed table, every column (note too), one line per row


def test_size_says_which_sizes_it_searched(capsys):
    """`dwdp size` prints the context-server sizes it searched beside its answer (a small search: seconds)."""
    small = ["--rate", "1", "--duration", "120", "--dwdp-size", "8", "--dep-size", "8", "--mnt", "16384",
             "--gen-tp", "8", "--gen-batch", "32", "--ttft-p99", "10", "--tps-user", "10"]
    out = run(["size", *small], capsys)
    assert long_lines(out) == []
    assert ("context servers searched: DWDP groups of 8 GPUs, DEP servers of 8 GPUs (--dwdp-size, --dep-size); "
            "`dwdp plan-placement` gives the smallest GPU count that fits, any count") in " ".join(out.split())


def test_every_commands_help_fits_80_columns(monkeypatch):
    """`dwdp X --help` of every subcommand within 80 columns (the descriptions of calibrate, gen-config, serve and
    check-config were their docstrings' 110-120-column lines)."""
    import argparse
    monkeypatch.setenv("COLUMNS", "80")
    parser = cli.build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert len(subs.choices) >= len(cli.COMMANDS)
    wide = {name: long_lines(p.format_help()) for name, p in subs.choices.items()}
    assert {n: w for n, w in wide.items() if w} == {}
