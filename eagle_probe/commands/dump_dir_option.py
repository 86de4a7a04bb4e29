"""The dump directory option every offline command takes: `--dump-dir`, the name `eagle-probe run` uses for the
same directory. The older `--dump` still works and says, on stderr, that it is deprecated."""

import argparse
import sys

OPTION = "--dump-dir"
DEPRECATED = "--dump"


class _DeprecatedDump(argparse.Action):
    """Stores the value like --dump-dir and prints one deprecation line on stderr."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {DEPRECATED} is deprecated; use {OPTION} (the same directory)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_dump_dir_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Adds the required --dump-dir DIR (args.dump_dir), with --dump as its deprecated spelling."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(OPTION, dest="dump_dir", metavar="DIR", help=help_text)
    group.add_argument(DEPRECATED, dest="dump_dir", metavar="DIR", action=_DeprecatedDump,
                       help=f"deprecated spelling of {OPTION}")
