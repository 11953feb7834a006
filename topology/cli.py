"""The ``cedar`` command line (SPEC §10). This minimal entry point only prints the usage; the
subcommands are being written."""

from __future__ import annotations

import sys

USAGE = """usage: cedar COMMAND [ARGS]

commands:
  demo                     run the main job on an embedded default (local Ray and Spark)
  run SCRIPT.py [--address ADDR]
                           run a topology script
  status                   list the queries running on a cluster
  inspect NAME             show one running query live
"""


def main(argv: list[str] | None = None) -> int:
    """Print the usage; return 0 for ``-h``/``--help``/no command, 2 otherwise."""
    args = sys.argv[1:] if argv is None else argv
    print(USAGE, end="")
    return 0 if not args or args[0] in ("-h", "--help", "help") else 2


if __name__ == "__main__":
    raise SystemExit(main())
