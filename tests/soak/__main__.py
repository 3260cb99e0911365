"""``python -m tests.soak [--long] [--seconds N] [--db postgres|mysql]...``: the fault soak
outside pytest, printing its figures as JSON; exits 1 when it found a violation.

The database URLs come from ``MEMSTORE_TEST_POSTGRES_URL`` / ``MEMSTORE_TEST_MYSQL_URL`` (as
for the tests); ``redis-server`` must be installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from tests.soak.controller import SoakParams, run_soak

URL_VARIABLES = {"postgres": "MEMSTORE_TEST_POSTGRES_URL", "mysql": "MEMSTORE_TEST_MYSQL_URL"}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--long", action="store_true", help="the long form (8 workers, 30 min)")
    parser.add_argument("--seconds", type=float, help="stretch the form to this many seconds")
    parser.add_argument("--workers", type=int, help="worker processes (default: the form's)")
    parser.add_argument(
        "--prefill", type=int, help="rows written into filler apps first (default: the form's)"
    )
    parser.add_argument(
        "--db", action="append", choices=sorted(URL_VARIABLES), help="default: both"
    )
    args = parser.parse_args()
    params = SoakParams.long() if args.long else SoakParams.short()
    if args.seconds:
        params = params.scaled(args.seconds)
    if args.prefill is not None:
        params = replace(params, prefill_rows=args.prefill)
    if args.workers:
        params = replace(params, workers=args.workers)
    failed = False
    for db in args.db or sorted(URL_VARIABLES, reverse=True):
        url = os.environ.get(URL_VARIABLES[db])
        if not url:
            parser.error(f"{URL_VARIABLES[db]} is not set")
        with tempfile.TemporaryDirectory(prefix="memstore-soak-") as workdir:
            result = run_soak(db, url, params, Path(workdir))
        print(json.dumps({**result.figures, "faults_applied": result.faults}, indent=1))
        for violation in result.violations:
            print(f"VIOLATION: {violation}", file=sys.stderr)
        failed |= bool(result.violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
