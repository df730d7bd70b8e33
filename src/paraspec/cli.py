"""Command line: `paraspec generate`, `serve`, `bench`, `info`, `aspd`, `fetch` and `draft-head`.

Each sub-command's module adds its own parser (add_parser) and runs it; the flags several share are
in cli_flags.py. Flags map one to one onto API fields. User errors print one line on stderr and exit
with 2. Nothing here loads torch or the model: `paraspec --help` stays quick.
"""

from __future__ import annotations

import argparse
import sys

from . import catalog, draft_head_command, generate, info
from .aspd import command as aspd
from .bench import run as bench
from .errors import ParaspecError
from .server import command as serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paraspec", description="LLM inference with lossless parallel decoding"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (generate, serve, bench, info, aspd, catalog, draft_head_command):
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ParaspecError as e:
        print(f"paraspec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
