"""`dwdp verify` tests DWDP: its default dwdp_size makes ranks fetch; a configuration that fetches nothing is refused."""
from __future__ import annotations

import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.bench.preflight import fetched_per_rank
from dwdp_trtllm.commands import verify


@pytest.fixture
def captured(monkeypatch):
    """verify's configuration, without spawning ranks (run_verify replaced)."""
    seen = {}

    def fake(cfg, tol=None):
        seen["cfg"] = cfg
        return {"dwdp": {"hidden_abs": 0.0, "hidden_rel": 0.0}}, 1e-4, True
    monkeypatch.setattr(verify, "run_verify", fake)
    return seen


def _yaml(tmp_path, text: str):
    f = tmp_path / "v.yaml"
    f.write_text("model:\n  preset: tiny\n  dtype: float32\nrun:\n  device: cpu\n" + text)
    return str(f)


def test_minimal_config_fetches_by_default(tmp_path, capsys, captured):
    assert cli.main(["verify", _yaml(tmp_path, "")]) == 0
    cfg = captured["cfg"]
    assert cfg.dwdp.dwdp_size == 2 and cfg.run.ranks >= 2
    assert min(fetched_per_rank(cfg)) > 0
    out = capsys.readouterr().out
    assert "dwdp_size 2 (each rank fetches 8 of 16 experts per MoE layer)" in out, out


def test_dwdp_size_given_is_kept(tmp_path, capsys, captured):
    assert cli.main(["verify", _yaml(tmp_path, "dwdp:\n  dwdp_size: 4\n")]) == 0
    assert captured["cfg"].dwdp.dwdp_size == 4 and "fetches 12 of 16" in capsys.readouterr().out


@pytest.mark.parametrize("text,argv", [
    ("dwdp:\n  dwdp_size: 1\n", []),  # the engine's default: every expert local
    ("", ["--ranks", "1"]),  # one rank: no peer to fetch from
    ("dwdp:\n  dwdp_size: 2\n  redundant_experts: 8\n", []),  # redundancy makes every expert local
    ("", ["--set", "dwdp.dwdp_size=1"]),
])
def test_a_config_where_dwdp_fetches_nothing_is_refused(tmp_path, capsys, captured, text, argv):
    assert cli.main(["verify", _yaml(tmp_path, text), *argv]) == 2
    err = capsys.readouterr().err
    assert "dwdp.dwdp_size" in err and "DWDP fetches no expert here" in err and "cfg" not in captured, err


@pytest.fixture
def reads(monkeypatch):
    """Paths read through Path.read_text (schema.load_yaml reads a config file that way), in order."""
    from pathlib import Path

    seen = []
    real = Path.read_text

    def spy(self, *a, **kw):
        seen.append(Path(self).resolve())
        return real(self, *a, **kw)
    monkeypatch.setattr(Path, "read_text", spy)
    return seen


@pytest.mark.parametrize("text", ["", "dwdp:\n  dwdp_size: 4\n"])  # verify's default size, and the file's
def test_config_file_is_read_once(tmp_path, capsys, captured, reads, text):
    from pathlib import Path

    f = _yaml(tmp_path, text)
    assert cli.main(["verify", f]) == 0
    assert reads.count(Path(f).resolve()) == 1, reads
    assert captured["cfg"].dwdp.dwdp_size == (4 if text else 2)


def test_default_size_that_does_not_divide_the_ranks_names_the_file_and_the_default(tmp_path, capsys, captured):
    f = _yaml(tmp_path, "")
    assert cli.main(["verify", f, "--ranks", "3"]) == 2
    err = capsys.readouterr().err
    assert f"{f}: dwdp.dwdp_size:" in err and "verify's default" in err and "--set" not in err, err


def test_verify_says_which_gemm_it_runs_and_how_to_verify_the_deployed_one(tmp_path, capsys, captured):
    """verify ran DwdpConfig's default (merge), a path no deployment without gemm takes, and did not say so. Now its
    second line names the gemm, whether it is moe_evidence.default_gemm's for these weights and GPU, and the --set
    that verifies the deployed one."""
    line = verify.gemm_line("merge", False, "fp8", "cuda", 90)
    assert line == ("gemm merge (DwdpConfig's default; NOT the deployed path: a deployment without gemm takes "
                    "multi_buffer first on this GPU, sm_90, moe_evidence.default_gemm: verify it with "
                    "--set dwdp.gemm=multi_buffer)")
    assert "--set dwdp.gemm=composite_view" in verify.gemm_line("merge", False, "bf16", "cuda", 90)
    assert "--set dwdp.gemm=composite_view" in verify.gemm_line("merge", False, "fp8", "cuda", 100)
    assert verify.gemm_line("multi_buffer", True, "fp8", "cuda", 90) == (
        "gemm multi_buffer (the config's; the path a deployment without gemm takes first on this GPU, sm_90)")
    assert cli.main(["verify", _yaml(tmp_path, "")]) == 0
    out = capsys.readouterr().out
    assert captured["cfg"].dwdp.gemm == "merge"
    assert ("dwdp verify: DWDP runs gemm merge (DwdpConfig's default; a deployment without gemm takes "
            "moe_evidence.default_gemm's path, for bf16 composite_view on every GPU: verify it on that GPU with "
            "--device cuda --set dwdp.gemm=<path>)") in out, out
    assert cli.main(["verify", _yaml(tmp_path, ""), "--set", "dwdp.gemm=reference"]) == 0
    assert "DWDP runs gemm reference (the config's; " in capsys.readouterr().out


@pytest.mark.parametrize("tol", ["inf", "nan", "0", "-1", "1.5"])
def test_a_tolerance_that_cannot_fail_or_pass_is_refused_before_anything_runs(tmp_path, capsys, captured, tol):
    """--tol inf was accepted: a verification that cannot fail."""
    assert cli.main(["verify", _yaml(tmp_path, ""), "--tol", tol]) == 2
    err = capsys.readouterr().err
    assert f"--tol: expected a number in (0, 1] (a relative error; more cannot fail), got {float(tol)}" in err, err
    assert len(err.strip().splitlines()) == 1 and "cfg" not in captured


def test_the_largest_tolerance_is_taken(tmp_path, captured):
    assert cli.main(["verify", _yaml(tmp_path, ""), "--tol", "1"]) == 0 and "cfg" in captured


def test_verify_prints_a_line_as_each_mode_finishes(monkeypatch):
    """run_verify reports while the ranks run: a start line, then one line per mode when its last request is done
    (progress events from run_modes, here replayed by a fake that interleaves ranks as the real ranks do)."""
    from dwdp_trtllm.spec.config import BenchConfig
    from dwdp_trtllm.engine import launcher
    from dwdp_trtllm.spec.schema import from_dict

    cfg = from_dict(BenchConfig, {"model": {"preset": "tiny", "dtype": "float32"}, "dwdp": {"dwdp_size": 2},
                                 "workload": {"isl": 64, "requests_per_rank": 2, "max_num_tokens": 128},
                                 "run": {"device": "cpu", "ranks": 2}})
    lines = []

    def fake_run_modes(cfg, modes, queues, *, progress=None, collect_outputs=False):
        assert [len(q) for q in queues] == [2, 2]
        outputs = {}
        for mode in modes:
            for done in (1, 2):
                for rank in (0, 1):
                    progress(rank, mode, done, 2)
                    lines.append(f"event {mode} {rank} {done}")
            outputs[mode] = mode
        return outputs
    monkeypatch.setattr(launcher, "run_modes", fake_run_modes)
    monkeypatch.setattr(verify, "compare", lambda outputs, lm_head=None: {"dwdp": {"hidden_abs": 0.0, "hidden_rel": 0.0}})
    verify.run_verify(cfg, out=lines.append)
    assert lines[0] == "dwdp verify: starting 2 rank processes; reference, dep, dwdp run in turn on the same 4 requests"
    said = [ln for ln in lines if ln.startswith("dwdp verify: ") and " done " in ln]
    assert [ln.split(" done ")[0] for ln in said] == ["dwdp verify: reference", "dwdp verify: dep", "dwdp verify: dwdp"]
    assert "(3/3): 4 requests in " in said[-1] and said[0].endswith(" s (the ranks' start-up included)")
    # each line comes right after the mode's last event, not at the end of the run
    assert lines.index(said[0]) == lines.index("event reference 1 2") - 1
    assert lines.index(said[1]) == lines.index("event dep 1 2") - 1
