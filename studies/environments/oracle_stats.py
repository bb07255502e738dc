"""Oracle success by task source, difficulty and mistake rate: how hard the synthetic envs are, and whether a
dataset source's oracle solves its tasks.

  python studies/environments/oracle_stats.py --split validation      # the synthetic sources, ~20 s on a 2-core CPU
  python studies/environments/oracle_stats.py --source bfcl_multi_turn --split test --rates 0.0
  python studies/environments/oracle_stats.py --source deepscaler --train_path deepscaler.json --split train --rates 0.0

Prints a table and, last, one JSON line {source: {mistake_rate: {difficulty: success}}}.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from trace_jax.envs import SOURCES
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.sources import TASK_SOURCES, build


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="validation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rates", default="0.0,0.3")
    parser.add_argument("--source", default="", help="one source (synthetic or dataset); default: every synthetic one")
    parser.add_argument("--train_path", default="")
    parser.add_argument("--test_path", default="")
    parser.add_argument("--categories", default="")
    args = parser.parse_args()
    out = {}
    if args.source and args.source not in TASK_SOURCES:
        parser.error(f"unknown --source {args.source!r}; known: {TASK_SOURCES.names()}")
    names = [args.source] if args.source else list(SOURCES)
    files = {k: v for k, v in (("train_path", args.train_path), ("test_path", args.test_path),
                               ("categories", args.categories)) if v}
    for name in names:
        # a synthetic source at its own difficulty range (max_difficulty 0), a file source from the files given
        source = build(name, seed=args.seed, max_difficulty=0) if name in SOURCES else build(name, seed=args.seed, **files)
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
