"""Benchmark: the continuous scheduler's chunk size on real allocator steps, with the time split into compiling
and the rest (`docs/sampler.md`: which chunk pays when).

  python studies/benchmarks/bench_scheduler.py                        # math, TRACE and GRPO, 6 steps (~15 min, 2 cores)
  python studies/benchmarks/bench_scheduler.py --arms trace --steps 3 # a smoke run
  python studies/benchmarks/bench_scheduler.py --learn                # the learner in the loop (a real RL run's steps)

Each arm's steps start from the powered math grid's stored SFT checkpoint (`studies/powered/results/math`)
with the params frozen, so every mode sees the same policy; step i draws the same candidate pool and seed in
every mode, and each mode has its own allocator (TRACE's predictor state evolves per mode, identically while
the modes sample the same trees: checked through the ledgers). Modes: `whole_turns` (rl.decode_chunk=0, the
default: a whole turn per decode call, the turn-synchronous schedule) and `chunk16` (16 decode steps per call,
a slot per branch). The turn-synchronous loop itself, which the scheduler replaced, was measured beside them
up to commit 08b58e4 (docs/sampler.md). The modes alternate within a step
(order rotated per step). Per mode and step: wall seconds, seconds spent compiling (XLA's own
`backend_compile` and tracing/lowering durations from `jax.monitoring`) and programs compiled; the summary
gives the steps after the first `--warm` (when the programs of this workload exist), medians [min, max] of
the per-step ratios to `whole_turns`. No persistent compilation cache is used. The last line is one JSON object.

`--learn`: each mode trains as a run does (`train.rl_step`: rollouts, then the configured learner's update of
that mode's own params and optimizer state), so the modes' params, and later their samples, part at float level;
the ledgers then say from which step on.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
from jax import monitoring

from bench_learner import arm_start
from trace_jax.compare.grid import ARMS
from trace_jax.rl import learner
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.run import train
from trace_jax.rollout.continuous import Batching

COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/jaxpr_trace_duration")


class CompileClock:
    """Seconds spent tracing, lowering and compiling, and programs compiled, since the last `take`."""

    def __init__(self):
        self.seconds, self.programs = 0.0, 0
        monitoring.register_event_duration_secs_listener(self._record)

    def _record(self, event: str, seconds: float, **_):
        if event in COMPILE_EVENTS:
            self.seconds += seconds
            self.programs += event == COMPILE_EVENTS[0]

    def take(self) -> tuple[float, int]:
        out = (self.seconds, self.programs)
        self.seconds, self.programs = 0.0, 0
        return out


BASELINE = "whole_turns"


def modes(max_new_tokens: int) -> dict[str, Batching]:
    return {"whole_turns": Batching(), "chunk16": Batching(chunk=min(16, max_new_tokens))}


def _with_batching(setup, batching: Batching):
    """`setup` whose run's rl section schedules rollouts as `batching` says (what `rl_step` reads)."""
    rl = dataclasses.replace(setup.run.rl, decode_chunk=batching.chunk, decode_slots=batching.slots)
    return dataclasses.replace(setup, run=dataclasses.replace(setup.run, rl=rl))


def run_arm(task: str, arm: str, steps: int, workdir: str, clock: CompileClock, learn: bool) -> dict:
    setup, params, make_allocator, pools = arm_start(task, arm, workdir)
    policy = setup.policy(params)
    batchings = modes(policy.sampling.max_new_tokens)
    allocators = {name: make_allocator() for name in batchings}
    trainers = {}
    if learn:
        optimizer = learner.make_optimizer(setup.run.learner)
        for name, batching in batchings.items():
            mode_setup = _with_batching(setup, batching)
            learn_fn, p, o = train._learner(mode_setup, optimizer, jax.tree.map(jnp.copy, params),
                                            optimizer.init(params))
            trainers[name] = [mode_setup, learn_fn, p, o]
    per_step = collections.defaultdict(list)
    same_ledgers = True
    names = list(batchings)
    for step in range(steps):
        order = names[step % len(names):] + names[:step % len(names)]
        ledgers = {}
        for name in order:
            allocator = allocators[name]
            pool = pools(step, allocator.pool_size)
            clock.take()
            t0 = time.perf_counter()
            if learn:
                mode_setup, learn_fn, p, o = trainers[name]
                p, o, record = train.rl_step(mode_setup, allocator, learn_fn, p, o, pool, step=step + 1)
                jax.block_until_ready(p)
                trainers[name][2:] = [p, o]
                ledger = record.ledger
            else:
                engine = RolloutEngine(dataclasses.replace(policy, batching=batchings[name]), setup.env,
                                       seed=setup.run.seed + step)
                allocator.step(engine, pool)
                ledger = engine.ledger
            wall = time.perf_counter() - t0
            compile_s, programs = clock.take()
            per_step[name].append({"wall_s": wall, "compile_s": compile_s, "programs": programs,
                                   "tokens": ledger.tokens_generated})
            ledgers[name] = ledger
        same = all(ledger == ledgers[BASELINE] for ledger in ledgers.values())
        same_ledgers &= same
        print(f"{task} {arm} step {step + 1}: " + "; ".join(
            f"{n} {per_step[n][-1]['wall_s']:.1f} s ({per_step[n][-1]['compile_s']:.1f} s compiling, "
            f"{per_step[n][-1]['programs']} programs)" for n in names) + f"; ledgers equal: {same}", flush=True)
    return {"steps": dict(per_step), "same_ledgers": same_ledgers}


def summary(result: dict, warm: int) -> dict:
    """Per mode: total wall and compile seconds, and after `warm` steps the median [min, max] per-step ratio
    of wall time to the baseline's (whole turns), with and without compile time."""
    steps = result["steps"]
    out = {}
    for name, rows in steps.items():
        later = list(range(warm, len(rows)))
        ratio = [rows[i]["wall_s"] / steps[BASELINE][i]["wall_s"] for i in later]
        net = [(rows[i]["wall_s"] - rows[i]["compile_s"]) / (steps[BASELINE][i]["wall_s"] - steps[BASELINE][i]["compile_s"])
               for i in later]
        out[name] = {"wall_s": round(sum(r["wall_s"] for r in rows), 1),
                     "compile_s": round(sum(r["compile_s"] for r in rows), 1),
                     "programs": sum(r["programs"] for r in rows)}
        if later:
            out[name].update(after_warm_vs_whole_turns=[round(statistics.median(ratio), 3), round(min(ratio), 3),
                                                 round(max(ratio), 3)],
                             after_warm_net_of_compiling_vs_whole_turns=[round(statistics.median(net), 3),
                                                                  round(min(net), 3), round(max(net), 3)])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="math")
    parser.add_argument("--arms", default="trace,grpo")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warm", type=int, default=2, help="steps left out of the after-warm ratios")
    parser.add_argument("--learn", action="store_true", help="each mode trains its own params between steps")
    args = parser.parse_args()
    if args.steps < 1 or not 0 <= args.warm < args.steps:
        parser.error(f"--steps {args.steps} and --warm {args.warm}: need steps >= 1 and 0 <= warm < steps")
    unknown = [a for a in args.arms.split(",") if a not in ARMS]
    if unknown:
        parser.error(f"--arms: {unknown} not among {sorted(ARMS)}")
    clock = CompileClock()
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for arm in args.arms.split(","):
            result = run_arm(args.task, arm, args.steps, workdir, clock, args.learn)
            results[arm] = {"same_ledgers": result["same_ledgers"], **summary(result, args.warm)}
            print(f"{args.task} {arm}: {json.dumps(results[arm])}", flush=True)
            jax.clear_caches()
    print(json.dumps({"bench": "scheduler", "task": args.task, "steps": args.steps, "warm": args.warm,
                      "learn": args.learn,
                      "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}", "jax": jax.__version__,
                      "arms": results}))


if __name__ == "__main__":
    main()
