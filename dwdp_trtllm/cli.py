"""The `dwdp` command. Each subcommand lives in dwdp_trtllm/commands/<name>.py with add_parser() and run()."""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .spec.schema import ConfigError

#: subcommand module names (commands/<module>.py); a module that is missing is not offered
COMMANDS = ("bench", "verify", "plan", "plan_placement", "validate_plan", "calibrate", "build_ops", "check_trtllm", "gen_config", "serve", "size", "check_config")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="dwdp", description="Distributed Weight Data Parallelism for MoE prefill")
    parser.add_argument("--version", action="version", version=f"dwdp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as e:
            if e.name and e.name.endswith(f"commands.{name}"):
                continue
            raise
        p = mod.add_parser(sub)
        p.set_defaults(_run=mod.run)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM / SIGHUP, handled like Ctrl-C: the run's ranks are stopped and its shared memory removed."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, _frame) -> None:
    raise Terminated(signum)


#: failures of a run inside its ranks (engine/launcher.py), caught by class name so that config errors need no torch
RUN_FAILURES = ("RankFailed", "RankTimeout")


def _failure_log(args, exc: BaseException) -> str:
    """Write the full error (every rank's traceback) under the run's output folder (else the temp dir); its path,
    or why it could not be written (a full disk). Only `dwdp bench` has a default output folder (bench_out/<stem>);
    a command without one (verify) writes its log to the temp dir, not into the working directory."""
    out = getattr(args, "out", None)
    if out is None and getattr(args, "command", None) == "bench" and getattr(args, "config", None) is not None:
        out = Path("bench_out") / Path(args.config).stem
    text = "".join(traceback.format_exception(exc))
    try:
        if out is not None:  # beside the run's output; else a temp file (below)
            (Path(out) / "logs").mkdir(parents=True, exist_ok=True)
            path = Path(out) / "logs" / f"failure-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
            path.write_text(text)
            return str(path)
    except OSError:
        pass
    try:
        fd, name = tempfile.mkstemp(prefix="dwdp-failure-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return name
    except OSError as e:
        return f"not written ({e.strerror or e})"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, _on_signal)
        except (ValueError, OSError):  # not the main thread (embedded use): leave the handlers alone
            pass
    try:
        return int(args._run(args) or 0)
    except ConfigError as e:
        print(f"dwdp {args.command}: config error: {e}", file=sys.stderr)
        return 2
    except Terminated as e:
        print(f"dwdp {args.command}: terminated by {signal.Signals(e.signum).name}; ranks stopped", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print(f"dwdp {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # an output that cannot be written (full disk, read-only): the file and why
        what = f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
        print(f"dwdp {args.command}: cannot write or read a file: {what}\nfull traceback: {_failure_log(args, e)}",
              file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a run's failure: one paragraph here, the tracebacks in a log file
        if type(e).__name__ not in RUN_FAILURES:
            raise
        summary = str(e).split("\n--- rank")[0].strip()
        print(f"dwdp {args.command}: run failed: {summary}\nfull tracebacks: {_failure_log(args, e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
