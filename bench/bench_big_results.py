"""Peak memory of `run` on a one-million-row SELECT and on 50 rows of 15 MB values, against
keeping the whole result.

Usage: python bench/bench_big_results.py [--rows 1000000] [--value-rows 50] [--value-bytes 15000000]
       [--dsn mysql://root@127.0.0.1:3306/]

The anchor, measured in the same run, is what `run` did before results were streamed and
before values were cut: the whole result stored by the client (store_result) and every row
converted and kept. Both are separate processes; each reports its own peak RSS (ru_maxrss).
`run` on the big values also reports its wall time: before values were cut it rendered them
whole (1.4 GB and 150 s for the 50 rows with --step-timeout 20).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STREAMED = """\
import resource, sys
sys.path.insert(0, {root!r})
from jobqueue_demo.cli.main import main
code = main(["run", sys.argv[1], "--format", "json", "--step-timeout", "60"])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""

# The anchor loads the same modules first, so both start from the same interpreter size.
STORED = """\
import resource, sys
sys.path.insert(0, {root!r})
import jobqueue_demo.cli.main
from jobqueue_demo.engine.seam import open_server
from jobqueue_demo.engine.mysql.session import _text
with open_server(None) as server:
    conn = server.params.connect(database="mysql")
    conn.query(sys.argv[1].encode())
    rows = tuple(tuple(_text(v) for v in row) for row in conn.store_result().fetch_row(0))
    conn.close()
print(len(rows), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def peak_kib(code: str, arg: str, env: dict) -> int:
    done = subprocess.run([sys.executable, "-c", code.format(root=str(ROOT)), arg], capture_output=True,
                          text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"failed: {done.stderr.strip()}")
    return int(done.stderr.split()[-1])


def compare(what: str, sql: str, env: dict) -> None:
    """`run` on `sql` against the anchor, both peaks printed."""
    with tempfile.TemporaryDirectory() as folder:
        scenario = Path(folder) / "big.yaml"
        scenario.write_text(f"title: big\nsessions: [A]\nsteps:\n  - A: {sql};\n")
        started = time.perf_counter()
        streamed = peak_kib(STREAMED, str(scenario), env)
        took = time.perf_counter() - started
    stored = peak_kib(STORED, sql, env)
    print(f"{what}: run peak RSS {streamed / 1024:.0f} MiB ({took:.1f} s)")
    print(f"  anchor (whole result stored and kept, as before) peak RSS {stored / 1024:.0f} MiB")
    print(f"  ratio {stored / streamed:.1f}x less memory")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--value-rows", type=int, default=50)
    parser.add_argument("--value-bytes", type=int, default=15_000_000)
    parser.add_argument("--dsn", default=None, help="server to use (default: the embedded one)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    if args.dsn:
        env["JOBQUEUE_DEMO_DSN"] = args.dsn
    compare(f"{args.rows} rows (streamed, 1000 kept)", f"SELECT seq FROM seq_1_to_{args.rows}", env)
    compare(f"{args.value_rows} rows of {args.value_bytes} bytes (each value cut to 4 KiB)",
            f"SELECT seq, REPEAT('x', {args.value_bytes}) FROM seq_1_to_{args.value_rows}", env)


if __name__ == "__main__":
    main()
