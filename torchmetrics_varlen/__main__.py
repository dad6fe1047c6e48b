"""Command line: ``python -m torchmetrics_varlen demo``."""

from __future__ import annotations

import argparse
import sys

from torchmetrics_varlen import _demo


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="torchmetrics-varlen",
        description="Exact distributed evaluation metrics for PyTorch.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _demo.add_arguments(commands.add_parser("demo", help=_demo.HELP, description=_demo.DESCRIPTION))
    args = parser.parse_args(argv)
    return _demo.run(args)


if __name__ == "__main__":
    sys.exit(main())
