"""One output-path check for every command that writes (issue 22): bench --out, gen-config --out, plan --plot.

Each bad path exits 2 in one line naming the flag, and nothing is created (not in the working directory, not at a
dangling link's target)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from dwdp_trtllm import cli

from dwdp_trtllm.deploy import out_path
from dwdp_trtllm.spec.schema import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs/bench/ci_smoke.yaml")

COMMANDS = {
    "bench": (["bench", SMOKE, "--no-plots", "--out"], "--out", ""),
    "gen-config": (["gen-config", "--mode", "bench", "--model", "m", "--num-experts", "16", "--weight-dtype", "nvfp4",
                    "--out"], "--out", ""),
    "plan": (["plan", "--isl", "8192", "--no-bench-results", "--plot"], "--plot", ".png"),
}


def _layout(tmp_path: Path) -> None:
    (tmp_path / "loop_a").symlink_to("loop_b")
    (tmp_path / "loop_b").symlink_to("loop_a")
    (tmp_path / "loop_a.png").symlink_to("loop_b.png")
    (tmp_path / "loop_b.png").symlink_to("loop_a.png")
    (tmp_path / "dangling").symlink_to(tmp_path / "elsewhere" / "deep")
    (tmp_path / "dangling.png").symlink_to(tmp_path / "elsewhere" / "p.png")
    (tmp_path / "FILE").write_text("x")


CASES = {  # name -> (path text (tmp_path/ prefixed unless empty), words of the refusal: a string or a tuple of them)
    "empty": ("", "path, got an empty string"),
    "loop": ("loop_a", "is a symbolic link loop"),
    "under_a_loop": ("loop_a/x.png", "is a symbolic link loop"),
    "dangling": ("dangling", "is a dangling symbolic link"),
    # the whole path's length depends on pytest's temporary folder: only its longest part (300 bytes + suffix) is ours
    "too_long": ("n" * 300, ("name too long (", " bytes, its longest part 30")),
    "file_in_the_way": ("FILE/sub", "FILE is a file, not a directory"),
    # a shell passes the byte 0xff; Python's argv carries it as the surrogate U+DCFF (was a UnicodeEncodeError
    # traceback from gen-config, with its temporary directory left behind)
    "not_utf8": ("out_\udcff_x", "expected a path of UTF-8 characters, got the bytes b'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_bad_output_paths_exit_2_naming_the_flag_and_create_nothing(tmp_path, capsys, monkeypatch, command, case):
    _layout(tmp_path)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    argv, flag, suffix = COMMANDS[command]
    text, words = CASES[case]
    if text:
        text = str(tmp_path / text) + ("" if case == "under_a_loop" else suffix)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main([*argv, text]) == 2
    err = capsys.readouterr().err
    words = words if isinstance(words, tuple) else (words,)
    assert f"{flag}: " in err and all(w in err for w in words) and "Traceback" not in err \
        and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and list(work.iterdir()) == []
    assert not (tmp_path / "elsewhere").exists()


def test_an_unwritable_place_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """Root ignores permissions: the refusal is simulated through os.access, as a non-root user meets it."""
    monkeypatch.setattr(os, "access", lambda p, mode: not str(p).startswith(str(tmp_path)))
    with pytest.raises(ConfigError, match=r"--out: cannot write .*not writable by this user"):
        out_path.check_out_dir(tmp_path / "new")
    with pytest.raises(ConfigError, match=r"--out: cannot write .*not writable by this user"):
        out_path.check_out_dir(tmp_path)
    (tmp_path / "p.png").write_text("")
    with pytest.raises(ConfigError, match=r"--plot: cannot write"):
        out_path.check_out_file(tmp_path / "p.png", "--plot", suffixes=(".png",))


def test_good_paths_pass_unchanged(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d")
    assert out_path.check_out_dir(str(tmp_path / "link" / "new" / "deeper")) == tmp_path / "link" / "new" / "deeper"
    assert out_path.check_out_dir(tmp_path / "d") == tmp_path / "d"
    assert out_path.check_out_file(tmp_path / "d" / "p.PNG", "--plot", suffixes=(".png",)) == tmp_path / "d" / "p.PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "link"] and list((tmp_path / "d").iterdir()) == []
    with pytest.raises(ConfigError, match="is a directory; expected a file name"):
        out_path.check_out_file(tmp_path / "d", "--plot")


def test_verify_failure_log_goes_to_the_temp_dir_not_the_working_directory(tmp_path, capsys, monkeypatch):
    from dwdp_trtllm.commands import verify
    from dwdp_trtllm.engine.launcher import RankFailed

    def fail(cfg, tol=None):
        raise RankFailed(1, "reference,dep,dwdp", "Traceback\nRuntimeError: boom")
    monkeypatch.setattr(verify, "run_verify", fail)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["verify", SMOKE]) == 1
    err = capsys.readouterr().err
    log = Path(err.split("full tracebacks: ")[1].split()[0])
    assert log.is_file() and log.parent == Path(tempfile.gettempdir()) and "RuntimeError: boom" in log.read_text()
    assert list(tmp_path.iterdir()) == []  # no ./bench_out
    log.unlink()


def test_gen_config_leaves_no_temporary_directory_when_writing_is_interrupted(tmp_path, monkeypatch):
    from dwdp_trtllm.commands import gen_config_files

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gen_config_files.write_all(tmp_path / "out", {"a.yaml": "x: 1\n"})
    assert list(tmp_path.iterdir()) == []
