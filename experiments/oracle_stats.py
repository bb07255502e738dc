"""Oracle success by task source, difficulty and mistake rate: how hard the synthetic envs are.

  python experiments/oracle_stats.py --split validation      # ~20 s on a 2-core CPU

Prints a table and, last, one JSON line {source: {mistake_rate: {difficulty: success}}}.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from trace_jax.envs import SOURCES
from trace_jax.envs.oracle import run_episode


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="validation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rates", default="0.0,0.3")
    args = parser.parse_args()
    out = {}
    for name, cls in SOURCES.items():
        source = cls(args.seed)
        env = source.make_env()
        tasks = source.tasks(args.split)
        for rate in map(float, args.rates.split(",")):
            by_level = {}
            for task in tasks:
                result = run_episode(env, task, source.oracle(rate), seed=args.seed)
                by_level.setdefault(task.difficulty, []).append(result.success)
            stats = {str(d): round(float(np.mean(v)), 3) for d, v in sorted(by_level.items())}
            out.setdefault(name, {})[str(rate)] = stats
            print(f"{name:9s} mistake_rate={rate:.1f} ({len(tasks)} {args.split} tasks): "
                  + "  ".join(f"level {d}: {s:.2f}" for d, s in stats.items()), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
