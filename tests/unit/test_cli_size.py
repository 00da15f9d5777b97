"""`dwdp size` end to end: the table fits 80 columns, --json, --out equal to gen-config's files, refusals."""
from __future__ import annotations

import json

import pytest

from dwdp_trtllm.cli import main

#: a small search: one candidate per dimension, 2 minutes of traffic (seconds on 2 CPU cores)
SMALL = ["--rate", "1", "--duration", "120", "--dwdp-size", "8", "--dep-size", "8", "--mnt", "16384",
         "--gen-tp", "8", "--gen-batch", "32", "--ttft-p99", "10", "--tps-user", "10"]


def test_size_prints_dwdp_beside_dep_in_80_columns(capsys):
    assert main(["size", *SMALL]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    head = next(line for line in out.splitlines() if "DWDP" in line and "DEP" in line)
    assert head.index("DWDP") < head.index("DEP")
    for row in ("GPUs", "TTFT p50 s", "TTFT p99 s", "TPOT ms", "TPS/user", "output TPS/GPU", "goodput req/s"):
        assert any(line.startswith(row) for line in out.splitlines()), row
    assert "binding constraint" in out


def test_size_json_has_both_modes_with_ranges(capsys):
    assert main(["size", *SMALL, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    run = d["runs"][0]
    for mode in ("dwdp", "dep"):
        m, lo, hi = run[mode]["metrics"], run[mode]["low"], run[mode]["high"]
        assert m["ttft_p99_s"] <= 10 and m["tps_user"] >= 10  # the SLOs it was sized for
        assert m["requests"] == m["completed"] > 0
        assert run[mode]["deployment"]["gpus"] == run[mode]["deployment"]["ctx_gpus"] + run[mode]["deployment"]["gen_gpus"]
        assert lo["ttft_p99_s"] > 0 and hi["ttft_p99_s"] > 0
    # DWDP's worse end of the planner's range is slower than its better end
    assert run["dwdp"]["low"]["ttft_p50_s"] >= run["dwdp"]["high"]["ttft_p50_s"]
    # the third option: TP context servers (--tp-size, default 8), with a range holding its nominal
    tp = run["tp"]
    assert tp["deployment"]["mode"] == "tp" and tp["deployment"]["label"].endswith("x TP8")
    for key, (a, b) in tp["range"].items():
        assert a <= tp["metrics"][key] <= b, key


def _files(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_out_writes_gen_configs_files_for_the_same_deployment(tmp_path, capsys):
    out = tmp_path / "sized"
    assert main(["size", *SMALL, "--json", "--out", str(out), "--checkpoint", "/ckpt/R1"]) == 0
    d = json.loads(capsys.readouterr().out)
    argv = d["gen_config"]
    dep = d["runs"][0]["dwdp"]["deployment"]
    assert argv[:1] == ["gen-config"] and "--dwdp-size" in argv
    assert argv[argv.index("--dwdp-size") + 1] == str(dep["ctx_group"])
    assert argv[argv.index("--gen-servers") + 1] == str(dep["gen_servers"])
    # the generation side as simulated: its batch per rank and MTP draft tokens (gen-config's default for R1: 1)
    assert argv[argv.index("--gen-batch") + 1] == str(dep["gen_batch"]) and argv[argv.index("--mtp") + 1] == "1"
    assert d["mtp"]["draft_tokens"] == 1
    worker = (out / "disagg_worker.yaml").read_text()
    assert f"max_batch_size: {dep['gen_batch']}" in worker and "speculative_config" in worker, worker
    ref = tmp_path / "ref"
    assert main(argv[:-2] + ["--out", str(ref)]) == 0  # gen-config itself, same deployment
    capsys.readouterr()
    got, want = _files(out), _files(ref)
    assert sorted(got) == sorted(want) and got, "a different set of files"
    for name in want:  # the output folder's own path is the only difference a file may carry
        assert got[name].replace(str(out).encode(), b"@") == want[name].replace(str(ref).encode(), b"@"), name


@pytest.mark.parametrize("argv, arg", [
    (["--rate", "abc"], "--rate"), (["--rate", "-2"], "--rate"), (["--rate", "1", "--concurrency", "3"], "--rate"),
    (["--rate", "1", "--isl", "0"], "--isl"), (["--rate", "1", "--osl-dist", "zipf"], "--osl-dist"),
    (["--rate", "1", "--ttft-p99", "-1"], "--ttft-p99"), (["--rate", "1", "--tps-user", "nan"], "--tps-user"),
    (["--rate", "1", "--gpu-budget", "0"], "--gpu-budget"), (["--rate", "1", "--mnt", "x"], "--mnt"),
    (["--trace", "/nonexistent/trace.jsonl"], "--trace"), (["--rate", "8", "--gen-tp", "16"], "--gen-tp"),
    (["--rate", "1", "--ctx-max-batch", "-1"], "--ctx-max-batch"),
    (["--rate", "1", "--isl", "8192", "--mnt", "4096,8192", "--no-chunked-prefill"], "--mnt")])
def test_bad_input_is_refused_naming_the_argument(argv, arg, capsys):
    assert main(["size", *argv]) == 2
    err = capsys.readouterr().err
    assert f"{arg}:" in err and len(err.strip().splitlines()) == 1


def test_write_trace_then_size_from_the_trace(tmp_path, capsys):
    """--write-trace saves the generated arrivals (Mooncake JSONL); --trace of that file serves the same requests."""
    trace = tmp_path / "arrivals.jsonl"
    assert main(["size", *SMALL, "--json", "--write-trace", str(trace)]) == 0
    gen = json.loads(capsys.readouterr().out)["runs"][0]
    lines = trace.read_text().splitlines()
    assert len(lines) == gen["dwdp"]["metrics"]["requests"]
    assert set(json.loads(lines[0])) == {"timestamp", "input_length", "output_length"}
    replay = [a for a in SMALL if a not in ("--rate", "1")]
    assert main(["size", *replay, "--trace", str(trace), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["runs"][0]
    assert got["traffic"].startswith("trace arrivals.jsonl")
    for mode in ("dwdp", "dep"):
        assert got[mode]["metrics"]["requests"] == gen[mode]["metrics"]["requests"]
        assert got[mode]["deployment"] == gen[mode]["deployment"]


def test_concurrency_closed_loop(capsys):
    argv = [a for a in SMALL if a not in ("--rate", "1")]
    assert main(["size", *argv, "--concurrency", "4", "--duration", "60", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert "4 concurrent users" in run["traffic"]
    m = run["dwdp"]["metrics"]
    assert m["completed"] == m["requests"] >= 4


def test_a_budget_too_small_says_so_and_writes_nothing(tmp_path, capsys):
    """8 context GPUs (R1 FP8 needs a DWDP or DEP group of 8 on H200) + an 8-GPU generation server exceed 12."""
    out = tmp_path / "none"
    assert main(["size", *SMALL, "--gpu-budget", "12", "--out", str(out)]) == 1  # nothing deployable: non-zero
    cap = capsys.readouterr()
    text = cap.out
    assert "DWDP: no deployment:" in text and "DEP: no deployment:" in text and "--gpu-budget 12" in text
    assert "--out: nothing written" in text and not out.exists()
    assert "--gpu-budget 12" in cap.err and "16 GPUs" in cap.err  # the binding constraint, on stderr


def test_context_batching_flags_reach_every_simulated_context_server(monkeypatch):
    """--ctx-max-batch 4 --no-chunked-prefill (what upstream's recipe deploys: examples/dwdp/reproduce.py
    @ 1f939488 build_worker_config, ctx max_batch_size 4, no enable_chunked_prefill) are the Problem's, every
    context deployment the search simulates carries them, the notes say so, and --out asks gen-config for the
    same max_batch_size; without the flags: chunked, no limit."""
    import argparse
    from dwdp_trtllm.commands import size as sz
    from dwdp_trtllm.sizing import search as se

    def problem(extra):
        ap = argparse.ArgumentParser()
        sz.add_parser(ap.add_subparsers())
        args = ap.parse_args(["size", *SMALL, *extra])
        return args, sz.problems(args)

    class Stop(Exception):
        pass

    def first_run(p, d, dc, which="nominal", context_only=False):
        seen.append(d)
        raise Stop

    monkeypatch.setattr(se, "run_deployment", first_run)
    for extra, want in (([], (0, True)), (["--ctx-max-batch", "4", "--no-chunked-prefill"], (4, False))):
        seen = []
        args, (spec, probs) = problem(extra)
        p = probs[0][1]
        assert (p.ctx_max_batch, p.chunked) == want
        with pytest.raises(Stop):
            se.search(p, None)
        assert [(d.ctx_max_batch, d.chunked) for d in seen] == [want]
        notes = " ".join(sz.notes_lines(spec, probs, _dc(spec)))
        priced = notes.split("context batching priced: ")[1].split(" (--no-chunked-prefill")[0]
        assert ("whole prompts" in priced) == (not want[1]) and ("at most 4 requests" in priced) == bool(want[0])
        # beside it, what gen-config run alone would write (whole prompts, 4 per iteration: it differs by default)
        assert ("gen-config run alone writes whole prompts (no chunked prefill), at most 4 requests per rank per "
                "iteration, --out writes what was priced") in notes
        argv = sz.gen_config_argv(args, seen[0])
        assert ("--ctx-batch" in argv) == bool(want[0])
        if want[0]:
            assert argv[argv.index("--ctx-batch") + 1] == "4"


def _dc(spec):
    from dwdp_trtllm.sizing.decode_cost import decode_cost
    return decode_cost(spec.model, spec.gpu.name, spec.weight_dtype)


def test_size_help_names_the_context_batching_flags_within_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as e:
        main(["size", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    flat = " ".join(out.split())
    assert "--ctx-max-batch" in flat and "--no-chunked-prefill" in flat and "max_batch_size" in flat


def test_context_servers_are_written_chunked_as_they_were_priced(tmp_path, capsys):
    """`dwdp size` prices chunked prefill unless --no-chunked-prefill, and no request cap unless --ctx-max-batch;
    `--out` asks gen-config for both (--chunked-prefill; --ctx-batch of what one iteration held), which writes enable_chunked_prefill: true (tensorrt_llm/llmapi/llm_args.py @
    fcd3f31682808ae5, BaseLlmArgs.enable_chunked_prefill, default False) on the context servers only; whole prompts
    leave the key out (TensorRT-LLM's default, upstream's recipe). The file passes check-config."""
    import argparse

    import yaml

    from dwdp_trtllm.commands import size as sz
    from dwdp_trtllm.sizing.simulator import Deployment

    ap = argparse.ArgumentParser()
    sz.add_parser(ap.add_subparsers())
    args = ap.parse_args(["size", "--rate", "1"])
    assert "--chunked-prefill" in sz.gen_config_argv(args, Deployment("dwdp", 8, 8, 16384, 8, 1, 6))
    assert "--chunked-prefill" not in sz.gen_config_argv(args, Deployment("dwdp", 8, 8, 16384, 8, 1, 6, chunked=False))
    # priced with no request cap: max_batch_size lets an iteration hold what one of MNT tokens can (shortest prompt
    # 6554 tokens: a 1-token tail, 2 whole, a first chunk = 4; whole prompts: 2)
    for chunked, want in ((True, "4"), (False, "2")):
        argv = sz.gen_config_argv(args, Deployment("dwdp", 8, 8, 16384, 8, 1, 6, chunked=chunked), min_isl=6554)
        assert argv[argv.index("--ctx-batch") + 1] == want
    capped = ap.parse_args(["size", "--rate", "1", "--ctx-max-batch", "2"])  # a cap: that, whatever the prompts
    argv = sz.gen_config_argv(capped, Deployment("dwdp", 8, 8, 16384, 8, 1, 6), min_isl=6554)
    assert argv[argv.index("--ctx-batch") + 1] == "2"
    base = ["gen-config", "--mode", "disaggregated", "--model", "m", "--preset", "deepseek-r1", "--dwdp-size", "8",
            "--gen-tp", "8", "--mtp", "0"]
    for extra, want in ((["--chunked-prefill"], True), ([], None)):
        out = tmp_path / f"x{len(extra)}"
        assert main(base + extra + ["--out", str(out)]) == 0
        capsys.readouterr()
        doc = yaml.safe_load((out / "disagg_worker.yaml").read_text())
        assert doc["context_servers"].get("enable_chunked_prefill") == want
        assert "enable_chunked_prefill" not in doc["generation_servers"]
        assert main(["check-config", str(out / "disagg_worker.yaml")]) == 0, capsys.readouterr().out
        capsys.readouterr()
