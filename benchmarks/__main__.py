"""Run every benchmark and print its Markdown tables, then one summary of the targets.

    python -m benchmarks                         # full run (compare seeds >= 1M rows per
                                                 # system: long; --only to pick parts)
    python -m benchmarks --quick                 # smaller histories, fewer repetitions
    python -m benchmarks --databases sqlite      # skip PostgreSQL
    python -m benchmarks --only hot_read --profile

Progress goes to stderr, the tables to stdout. Exit status 1 when a target is missed.
Services (defaults): PostgreSQL 127.0.0.1:5432, scratch database ``memstore_bench`` (created
if missing, one schema per run, dropped afterwards); Redis 127.0.0.1:6379 db 14 (only keys of
one unique app id are written, and deleted afterwards; nothing is flushed).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

from benchmarks import compare, encryption, hot_read, load_window, local_cache
from benchmarks.common import (
    Options,
    Report,
    add_arguments,
    checks_table,
    machine_notes,
    options_from,
)

# hot_read runs first: its microsecond timings are the most sensitive to the background work
# (checkpoints, autovacuum, dropped schemas) that the bulk loads of load_window leave behind.
BENCHMARKS: dict[str, Callable[[Options, Callable[[str], None]], Report]] = {
    "hot_read": hot_read.run,
    "load_window": load_window.run,
    "local_cache": local_cache.run,
    "encryption": encryption.run,
    # last: it seeds the largest data set (>= 1M rows per system at full size)
    "compare": compare.run,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=(__doc__ or "").splitlines()[0]
    )
    add_arguments(parser)
    parser.add_argument(
        "--only",
        default=",".join(BENCHMARKS),
        help=f"comma-separated subset of: {','.join(BENCHMARKS)}",
    )
    args = parser.parse_args(argv)
    options = options_from(args)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown or not chosen:
        parser.error(f"--only: unknown {unknown}; choose from {','.join(BENCHMARKS)}")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    reports = [BENCHMARKS[name](options, log) for name in chosen]
    elapsed = time.perf_counter() - started
    mode = "quick" if options.quick else "full"
    print(f"## memstore benchmarks ({mode} run, {elapsed:.0f} s)\n")
    print(f"Machine: {machine_notes()}.\n")
    for report in reports:
        print(report.render() + "\n")
    checks = [check for report in reports for check in report.checks]
    print("### Targets\n")
    print(checks_table(checks))
    return 0 if all(check.passed for check in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
