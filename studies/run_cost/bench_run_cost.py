"""What a comparison run's seconds go to, and what the cheaper evaluation schedule saves (issue 53, item 2).

  python studies/run_cost/bench_run_cost.py --section eval
  python studies/run_cost/bench_run_cost.py --section schedule

Both start from a stored comparison's shared SFT checkpoint (default: the decisive comparison's GRPO seed 7 run,
`studies/decisive/config.py:confirm`).

`eval`: one held-out evaluation (greedy on --tasks tasks, mean-of-k on as many) through the turn-synchronous
schedule (`rl.decode_chunk=0`) and through the continuous scheduler (`--chunk` decode steps per call), in
alternating repeats after one warm-up each; prints median [min, max] seconds and the ratio, and whether the
greedy outcomes are the same task for task (they must be: the same trees token for token).

`schedule`: the run itself, --steps RL steps, twice: under the phase-2 evaluation schedule (greedy on every
evaluation task every --eval_every steps, mean-of-k every --sample_every and at the end) and under the cheaper one
(greedy on the first --subset tasks between the first and the last evaluation, mean-of-k only at the end). Prints
each run's seconds: RL steps (sum of step_s), evaluation (`eval_s`), compiling (`compile_s`, JAX's own compile
events) and wall, side by side, and the evaluation seconds the cheaper schedule saves.

The last line printed is one JSON object with the headline figures.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo root

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

flags.DEFINE_enum("section", "eval", ["eval", "schedule"], "What to measure.")
flags.DEFINE_string("config", "studies/decisive/config.py:confirm", "A comparison with a stored shared start.")
flags.DEFINE_string("variant", "grpo", "The run's variant.")
flags.DEFINE_integer("seed", 7, "The run's seed.")
flags.DEFINE_integer("tasks", 200, "eval: tasks evaluated (greedy, and mean-of-k on the same tasks).")
flags.DEFINE_integer("chunk", 16, "eval: the continuous scheduler's decode steps per call.")
flags.DEFINE_integer("repeats", 3, "eval: alternating repeats per schedule.")
flags.DEFINE_integer("steps", 40, "schedule: RL steps per run.")
flags.DEFINE_integer("eval_every", 10, "schedule: RL steps between intermediate greedy evaluations.")
flags.DEFINE_integer("sample_every", 20, "schedule: the phase-2 schedule's steps between mean-of-k evaluations.")
flags.DEFINE_integer("subset", 200, "schedule: the cheaper schedule's intermediate greedy tasks.")
FLAGS = flags.FLAGS
COUNTS = ("tasks", "chunk", "repeats", "steps", "eval_every", "sample_every", "subset")


def _stats(xs: list[float]) -> dict:
    return {"median": float(np.median(xs)), "min": float(min(xs)), "max": float(max(xs))}


def _stored():
    from trace_jax.compare import grid_runs
    from trace_jax.config.files import load_config_file
    return grid_runs.stored_run(load_config_file(FLAGS.config), FLAGS.variant, FLAGS.seed)


def bench_eval() -> dict:
    from trace_jax.compare import grid_runs
    from trace_jax.run import evaluation, experiment
    from trace_jax.run.sft import warm_start

    run, shared, _ = _stored()
    run = dataclasses.replace(run, eval=dataclasses.replace(run.eval, num_tasks=min(run.eval.num_tasks or FLAGS.tasks,
                                                                                   FLAGS.tasks),
                                                            sample_tasks=FLAGS.tasks, sample_every=0))
    workdir = tempfile.mkdtemp(prefix="bench_run_cost_")
    grid_runs.link_shared(shared, workdir)
    setups = {chunk: experiment.build(dataclasses.replace(run, rl=dataclasses.replace(run.rl, decode_chunk=chunk)), workdir)
              for chunk in (0, FLAGS.chunk)}
    params = warm_start(setups[0], workdir, None)  # restores the stored SFT checkpoint
    times = {chunk: [] for chunk in setups}
    outcomes = {}
    for repeat in range(FLAGS.repeats + 1):  # repeat 0 warms up (compiles) both
        for chunk, setup in setups.items():
            began = time.perf_counter()
            path = os.path.join(workdir, f"eval_{chunk}.json")
            evaluation.held_out(setup, params, outcomes_path=path)
            if repeat:
                times[chunk].append(time.perf_counter() - began)
            outcomes[chunk] = evaluation.read_outcomes(path)
    same = outcomes[0]["greedy"].successes == outcomes[FLAGS.chunk]["greedy"].successes
    same_sampled = ("sampled" not in outcomes[0]
                    or outcomes[0]["sampled"].successes == outcomes[FLAGS.chunk]["sampled"].successes)
    stats = {f"decode_chunk={c}": _stats(t) for c, t in times.items()}
    ratio = stats["decode_chunk=0"]["median"] / stats[f"decode_chunk={FLAGS.chunk}"]["median"]
    for name, s in stats.items():
        print(f"{name}: {s['median']:.1f} s [{s['min']:.1f}, {s['max']:.1f}] per evaluation "
              f"(greedy + mean-of-{run.eval.sample_k} on {FLAGS.tasks} tasks)")
    print(f"turn-synchronous / continuous: {ratio:.2f}x; outcomes identical: greedy {same}, sampled {same_sampled}")
    return {"bench": "run_cost", "section": "eval", "tasks": FLAGS.tasks, "sample_k": run.eval.sample_k, **stats,
            "synchronous_over_continuous": ratio, "greedy_identical": bool(same),
            "sampled_identical": bool(same_sampled)}


def bench_schedule() -> dict:
    import jax

    from trace_jax.compare import grid_runs
    from trace_jax.run import train

    run, shared, after_sft = _stored()
    every = dataclasses.replace(run.rl, steps=FLAGS.steps, eval_every=FLAGS.eval_every)
    schedules = {
        "phase 2": dataclasses.replace(run, rl=every, eval=dataclasses.replace(run.eval, sample_every=FLAGS.sample_every,
                                                                                intermediate_tasks=0)),
        "cheaper": dataclasses.replace(run, rl=every, eval=dataclasses.replace(run.eval, sample_every=0,
                                                                                intermediate_tasks=FLAGS.subset)),
    }
    out = {}
    for name, config in schedules.items():
        directory = tempfile.mkdtemp(prefix="bench_run_cost_")
        grid_runs.link_shared(shared, directory)
        summary = train.train_and_evaluate(config, directory, after_sft=after_sft)
        jax.clear_caches()
        with open(os.path.join(directory, "steps.jsonl"), encoding="utf-8") as f:
            rl_s = sum(json.loads(line)["timings"]["step_s"] for line in f if line.strip())
        out[name] = {"wall_s": summary["wall_s"], "rl_s": round(rl_s, 1), "eval_s": summary["eval_s"],
                     "compile_s": summary["compile_s"]}
        print(f"{name}: wall {summary['wall_s']:.0f} s = RL steps {rl_s:.0f} s + evaluation {summary['eval_s']:.0f} s "
              f"+ the rest; compiling {summary['compile_s']:.0f} s (within both)")
    saved = out["phase 2"]["eval_s"] - out["cheaper"]["eval_s"]
    print(f"evaluation seconds saved per {FLAGS.steps}-step run: {saved:.0f} "
          f"({out['phase 2']['eval_s']:.0f} -> {out['cheaper']['eval_s']:.0f})")
    return {"bench": "run_cost", "section": "schedule", "steps": FLAGS.steps, "eval_every": FLAGS.eval_every,
            "sample_every": FLAGS.sample_every, "subset": FLAGS.subset, **out,
            "eval_ratio": out["phase 2"]["eval_s"] / max(out["cheaper"]["eval_s"], 1e-9)}


def main(argv):
    del argv
    for name in COUNTS:  # before any compute; exit status 2, as the other benchmarks' bad flags
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}", exitcode=2)
    out = bench_eval() if FLAGS.section == "eval" else bench_schedule()
    print(json.dumps(out))


if __name__ == "__main__":
    app.run(main)
