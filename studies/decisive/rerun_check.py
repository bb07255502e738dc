"""Does a rerun reproduce a stored comparison run? Compares two run directories step by step and at the end.

  python studies/decisive/rerun_check.py --committed studies/decisive/results/confirm_math/runs/grpo/seed7-68dde17f \
      --rerun /tmp/repro/runs/grpo/seed7-68dde17f
  python studies/decisive/rerun_check.py --config studies/decisive/config.py:confirm --variant grpo --seed 7 --steps 12

The first form reads two finished runs (the stored one and one retrained from the same stored SFT checkpoint,
e.g. `compare.py ... --config.compare.results=<a copy without that run> --seeds=7`): the first RL step whose
ledger (tokens, rollouts, tool calls) differs, whether every step record is the same (wall times aside), the
largest relative difference of the learner's loss before
it, and the final held-out outcomes with their paired differences (tasks paired; one seed). The second form
trains the run's first `--steps` steps twice on this machine from the grid's stored SFT checkpoint, in two
fresh workdirs, and compares them the same way: whether the machine itself reproduces a run bit for bit.
The last line printed is one JSON object.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo root

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

flags.DEFINE_string("committed", None, "A stored run directory (steps.jsonl, eval/step_N.json).")
flags.DEFINE_string("rerun", None, "The rerun's directory.")
flags.DEFINE_string("config", None, "a comparison config (configs/*.py or studies/*/config.py)[:args]: train one of its runs twice here.")
flags.DEFINE_string("variant", "grpo", "With --config: the variant.")
flags.DEFINE_integer("seed", 0, "With --config: the seed.")
flags.DEFINE_integer("steps", 12, "With --config: RL steps per training.")
FLAGS = flags.FLAGS


def _steps(directory: str) -> list[dict]:
    with open(os.path.join(directory, "steps.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def compare_runs(committed: str, rerun: str) -> dict:
    """Step-by-step and final agreement of two run directories."""
    from trace_jax.compare.paired import paired_bootstrap

    a, b = _steps(committed), _steps(rerun)
    shared = min(len(a), len(b))
    diverged = next((i + 1 for i in range(shared) if a[i]["ledger"] != b[i]["ledger"]), None)
    before = range((diverged or shared + 1) - 1)
    losses = [(x["learner"] or {}).get("loss") for x in a], [(x["learner"] or {}).get("loss") for x in b]
    rel = [abs(losses[0][i] - losses[1][i]) / max(abs(losses[0][i]), 1e-6) for i in before
           if losses[0][i] is not None and losses[1][i] is not None]
    untimed = [[{k: v for k, v in x.items() if k != "timings"} for x in run] for run in (a, b)]
    out = {"steps": [len(a), len(b)], "identical_steps": untimed[0] == untimed[1], "first_ledger_divergence": diverged,
           "max_relative_loss_difference_before": max(rel) if rel else 0.0, "final": {}}
    finals = [sorted(glob.glob(os.path.join(d, "eval", "step_*.json")), key=lambda p: int(p.split("_")[-1][:-5]))
              for d in (committed, rerun)]
    if finals[0] and finals[1] and os.path.basename(finals[0][-1]) == os.path.basename(finals[1][-1]):
        stored, again = (json.load(open(f[-1], encoding="utf-8")) for f in finals)
        for kind in stored.keys() & again.keys():
            x, y = (np.asarray(o[kind]["successes"], float) / o[kind]["k"] for o in (again, stored))
            d = paired_bootstrap(x[None], y[None])
            out["final"][kind] = {"rerun": float(x.mean()), "committed": float(y.mean()), "identical": stored[kind] == again[kind],
                                  "diff": d.diff, "ci95_tasks": list(d.ci95)}
    return out


def train_twice(config_arg: str, variant: str, seed: int, steps: int) -> dict:
    """The run (variant, seed) of a comparison config, its first `steps` steps trained twice here from the stored SFT."""
    import jax

    from trace_jax.compare import grid_runs
    from trace_jax.config.files import load_config_file
    from trace_jax.run import train

    run, shared, after_sft = grid_runs.stored_run(load_config_file(config_arg), variant, seed)
    run = dataclasses.replace(run, rl=dataclasses.replace(run.rl, steps=steps, eval_every=0),
                              eval=dataclasses.replace(run.eval, num_tasks=min(run.eval.num_tasks or 64, 64),
                                                       sample_tasks=min(run.eval.sample_tasks, 64), sample_every=0),
                              checkpoint=dataclasses.replace(run.checkpoint, every=steps))
    dirs = []
    for _ in range(2):
        directory = tempfile.mkdtemp(prefix="rerun_check_")
        grid_runs.link_shared(shared, directory)
        train.train_and_evaluate(run, directory, after_sft=after_sft)
        jax.clear_caches()
        dirs.append(directory)
    return {"config": config_arg, "variant": variant, "seed": seed, **compare_runs(*dirs), "workdirs": dirs}


def main(argv):
    del argv
    if FLAGS.config:
        out = train_twice(FLAGS.config, FLAGS.variant, FLAGS.seed, FLAGS.steps)
    elif FLAGS.committed and FLAGS.rerun:
        out = compare_runs(FLAGS.committed, FLAGS.rerun)
    else:
        raise app.UsageError("give --committed and --rerun, or --config")
    print(f"steps {out['steps']}, step records identical (wall times aside): {out['identical_steps']}, first ledger divergence: "
          f"{out['first_ledger_divergence']}, max relative loss difference before it: "
          f"{out['max_relative_loss_difference_before']:.2e}")
    for kind, f in out["final"].items():
        print(f"final {kind}: rerun {f['rerun']:.4f}, committed {f['committed']:.4f}, rerun - committed "
              f"{100 * f['diff']:+.2f} points [{100 * f['ci95_tasks'][0]:+.2f}, {100 * f['ci95_tasks'][1]:+.2f}] "
              f"(tasks resampled; identical: {f['identical']})")
    print(json.dumps(out))


if __name__ == "__main__":
    app.run(main)
