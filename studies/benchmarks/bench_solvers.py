"""Allocation solvers: greedy vs exact DP (worst-case ratio) and the greedy's speed at scale.

  python studies/benchmarks/bench_solvers.py          # ~1 min on a 2-core CPU

Prints the worst greedy/DP objective ratio over random instances of realistic size, the DP and
greedy times there, and the greedy's time at C=4096 candidates with M=16384 rollouts; the last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from trace_jax.allocation import solvers


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ratios, dp_times, greedy_times = [], [], []
    for _ in range(args.instances):
        C, B = 256, 64
        v = rng.beta(0.6, 0.6, size=C)
        budget = int(rng.integers(2 * B, 8 * B))
        kw = dict(m_min=2, m_max=16, max_items=B)
        table = solvers.root_values(v, 512)
        dp, t_dp = timed(lambda: solvers.solve_dp(table, budget, **kw))
        greedy, t_greedy = timed(lambda: solvers.root_greedy(v, budget, spend_all=False, **kw))
        ratios.append(solvers.objective(table, greedy) / solvers.objective(table, dp))
        dp_times.append(t_dp)
        greedy_times.append(t_greedy)
    print(f"C=256, B=64, M in [128, 512), m in {{0}} U [2, 16], {args.instances} instances: worst greedy/DP "
          f"{min(ratios):.5f}, median DP {statistics.median(dp_times) * 1e3:.1f} ms, "
          f"median greedy {statistics.median(greedy_times) * 1e3:.2f} ms")
    big_v = rng.beta(0.6, 0.6, size=4096)
    times = [timed(lambda: solvers.root_greedy(big_v, 16384, m_min=2, m_max=16, max_items=1024))[1]
             for _ in range(5)]
    q = rng.random(20000)
    prefix_times = [timed(lambda: solvers.prefix_greedy(q, np.ones(len(q)), 16384))[1] for _ in range(5)]
    print(f"root greedy at C=4096, M=16384, B=1024: median {statistics.median(times) * 1e3:.1f} ms; "
          f"prefix greedy over 20000 anchors, budget 16384: median {statistics.median(prefix_times) * 1e3:.1f} ms")
    print(json.dumps({"worst_greedy_over_dp": round(min(ratios), 6),
                      "dp_ms_median": round(statistics.median(dp_times) * 1e3, 2),
                      "greedy_ms_median": round(statistics.median(greedy_times) * 1e3, 3),
                      "greedy_ms_C4096_M16384": round(statistics.median(times) * 1e3, 2),
                      "prefix_greedy_ms_20000": round(statistics.median(prefix_times) * 1e3, 2)}))


if __name__ == "__main__":
    main()
