"""Cold and warm start of the embedded 3-node Galera cluster, against the single embedded server.

Usage: python bench/bench_cluster_start.py [--runs 3] [--nodes 3]

Cold: the cached cluster template is removed first (the plain server template is kept, as
any earlier run has made it). Warm: the template is in the cache. The anchor, a single
embedded server's start+stop, is measured in the same run, interleaved with the warm runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

# Run as a plain script from a checkout, without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobqueue_demo.engine.galera.cluster import TEMPLATE_SUFFIX, EmbeddedCluster  # noqa: E402
from jobqueue_demo.engine.mysql.embedded import EmbeddedServer, find_server_binary
from jobqueue_demo.engine.throwaway import cache_root  # noqa: E402


def timed(make) -> float:
    started = time.perf_counter()
    with make():
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    cluster_template = cache_root() / (find_server_binary().template_key + TEMPLATE_SUFFIX)
    shutil.rmtree(cluster_template, ignore_errors=True)
    cold = timed(lambda: EmbeddedCluster(args.nodes))
    warm, single = [], []
    for _ in range(args.runs):
        warm.append(timed(lambda: EmbeddedCluster(args.nodes)))
        single.append(timed(EmbeddedServer))
    anchor = statistics.median(single)
    print(f"single embedded server start+stop (anchor): {anchor:.2f} s")
    print(f"cold {args.nodes}-node cluster start+stop:  {cold:.2f} s  ({cold / anchor:.1f}x the anchor)")
    print(f"warm {args.nodes}-node cluster start+stop:  {statistics.median(warm):.2f} s  "
          f"({statistics.median(warm) / anchor:.1f}x the anchor; median of {args.runs})")


if __name__ == "__main__":
    main()
