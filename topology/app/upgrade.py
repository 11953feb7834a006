"""``cedar upgrade NEW.py --savepoint PATH``: which step of a new query keeps which state.

The savepoint records each step's fingerprints (own and upstream: :mod:`actors.savepoints`),
so the old query's script is not needed: NEW.py and the savepoint say all there is to say.
The command prints, per step of the new query, its fate as ``deploy(..., restore=PATH)``
would decide it (:func:`topology.running.upgrades.match`), and exits 1 if any step is
refused. Nothing is deployed and no cluster is needed.

With ``--check`` it then proves the upgrade on the data (:mod:`topology.seeing.cutover`):
NEW.py's sources, read again from their beginning (the retained input: a restorable
savepoint's sources must be re-readable), run through the new query twice, inline: from
scratch, and restored from the savepoint as ``deploy(..., restore=PATH)`` would restore it.
It prints whether the output from the cut-over (every row reaching past the old output's
CTI at the cut) is the same, and the first differing rows if not; exit 0 equal, 1 different
or refused.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Any

DESCRIPTION = (
    "Load NEW.py, which defines `stream` (the new query, a topology.Stream, as it will be "
    "deployed), and read the savepoint at PATH (written by `cedar stop NAME --savepoint "
    "PATH`). Print, per step of the new query, whether it keeps the state of a step of the "
    "savepoint (unchanged; or the same step with something upstream of it changed), starts "
    "fresh (a new or changed step that holds no state, e.g. where/select, or whose state "
    "was empty), or is refused (a new or changed source, or a new or changed step holding "
    "state: no input log is retained to rebuild it); exit 1 if any is refused. The old "
    "query's script is not needed: the savepoint records every step's fingerprints.\n\n"
    "--check then proves it on the data: NEW.py's sources, read again from their beginning, "
    "run through the new query from scratch and restored from the savepoint (inline, no "
    "cluster), and the output from the cut-over (the rows reaching past the old output's "
    "CTI at the cut) compared; it prints the verdict and the first differing rows, and "
    "exits 0 when equal, 1 when different or refused.")


def add_parser(sub: Any) -> None:
    """Add ``upgrade`` to ``cedar``'s sub-commands."""
    up = sub.add_parser("upgrade", help="show which steps of a new query keep their state "
                                        "from a savepoint", description=DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    up.add_argument("script", metavar="NEW.py", help="the Python file defining `stream`")
    up.add_argument("--savepoint", required=True, metavar="PATH",
                    help="the savepoint's location (a directory or storage URI)")
    up.add_argument("--check", action="store_true",
                    help="also run the new query restored and from scratch over its input "
                         "read again, and say whether their outputs from the cut-over are "
                         "equal (exit 1 if not)")


def _load(path: str) -> Any:
    """Run the script as ``cedar check`` does (its folder on the path, under its own name)."""
    path = os.path.abspath(path)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None
    sys.path.insert(0, os.path.dirname(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run(args: Any) -> int:
    """``cedar upgrade``: 0 when every step of the new query restores (and, with ``--check``,
    its output from the cut-over is a from-scratch run's), 1 when one is refused (or the
    outputs differ), 2 when the script or the savepoint cannot be read."""
    import datetime as dt

    from actors import checkpoint as ck
    from actors.savepoints import load_record
    from topology import Stream
    from topology.running.upgrades import dropped, match, table

    module = _load(args.script)
    stream = getattr(module, "stream", None)
    if not isinstance(stream, Stream):
        print(f"cedar upgrade: {args.script} must define `stream`, the new query (a "
              f"topology.Stream, as you deploy it)", file=sys.stderr)
        return 2
    try:
        record = load_record(args.savepoint)
    except ValueError as exc:
        print(f"cedar upgrade: {exc}", file=sys.stderr)
        return 2
    fates = match(stream.plan(), record, ck.normalize(args.savepoint))
    taken = dt.datetime.fromtimestamp(record["taken"], dt.UTC)
    print(f"savepoint of query {record['query']!r} taken at {taken:%Y-%m-%d %H:%M:%S} UTC "
          f"(fingerprint {record.get('fingerprint')}), restored into {args.script}:")
    print(table(fates))
    gone = dropped(record, fates)
    if gone:
        print(f"not restored (no step of the new query takes its state): {', '.join(gone)}")
    refused = [f.step for f in fates if f.refused]
    if refused:
        print(f"refused: {', '.join(refused)}: deploy(..., restore=) would refuse this query")
        return 1
    print("every step restores: deploy(..., restore=) takes it")
    return _check(args, stream) if args.check else 0


def _check(args: Any, stream: Any) -> int:
    """``--check``: the verdict of :func:`topology.seeing.cutover.check_upgrade`."""
    from topology.seeing.cutover import check_upgrade

    try:
        report = check_upgrade(stream, args.savepoint)
    except ValueError as exc:
        print(f"cedar upgrade --check: {exc}", file=sys.stderr)
        return 2
    print(f"check on the input read again ({report.record['rounds']:,} batches of each "
          f"source before the cut):")
    print(report.verdict())
    return 0 if report.ok else 1
