"""Quickstart (the embedded default): the `mini` preset on synthetic multi-hop QA, SFT then TRACE RL.

  python experiments/train.py --config configs/quickstart.py --workdir /tmp/quickstart

Expected runtime: under 5 minutes on a 2-core CPU (291 s measured with the CPU free; docs/results.md,
"Quickstart results").
Switch the allocator with `--config.allocator.name=grpo` (or dapo, mopps, knapsack, pcl, treepo,
entropy_branch). `get_config("runlocal")` shrinks every stage for a one-minute smoke run.
"""

import ml_collections

from trace_jax.config.files import config_args, default_config

# The quickstart's RL stage: 40 steps at learning rate 3e-4 instead of the library's 80 at 1e-4. Measured
# (seed 0, one run each): 0.569 -> 0.699 held-out in 291 s with the CPU free (510 s beside the decisive screen),
# where the library's 80 steps gave 0.569 -> 0.626 in 910 s beside it; the decisive screen chose 3e-4 for TRACE
# on math too (studies/decisive/results/selection.json).
RL_STEPS, LEARNING_RATE = 40, 3e-4


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """`base` with the quickstart's shorter, larger-step RL stage (`RL_STEPS`, `LEARNING_RATE`)."""
    c = base(arg)
    if not config_args(arg, flags=("runlocal",), config="configs/quickstart.py")["runlocal"]:
        c.rl.steps, c.learner.learning_rate = RL_STEPS, LEARNING_RATE
    return c


def base(arg: str | None = None) -> ml_collections.ConfigDict:
    """The library's defaults (`trace_jax/config/schema.py` holds them), what the comparison and tiny configs
    build on; `runlocal` shrinks every stage."""
    args = config_args(arg, flags=("runlocal",), config="configs/quickstart.py")
    c = default_config()
    if args["runlocal"]:
        c.sft.steps, c.sft.num_demos = 20, 100
        c.rl.steps, c.rl.max_new_tokens = 2, 16
        c.budget.update(rollouts=8, prompts=2, candidates=4)
        c.eval.num_tasks = 16
        c.checkpoint.every = 1
    return c
