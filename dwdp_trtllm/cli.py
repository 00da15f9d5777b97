"""The `dwdp` command. Each subcommand lives in dwdp_trtllm/commands/<name>.py with add_parser() and run()."""
from __future__ import annotations

import argparse
import importlib
import sys

from .schema import ConfigError

#: subcommand module names (commands/<module>.py); a module that is missing is not offered
COMMANDS = ("bench", "verify", "plan", "plan_placement", "validate_plan", "build_ops", "check_trtllm", "gen_config", "serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dwdp", description="Distributed Weight Data Parallelism for MoE prefill")
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except ConfigError as e:
        print(f"dwdp {args.command}: config error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dwdp {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
