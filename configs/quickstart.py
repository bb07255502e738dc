"""Quickstart (the embedded default): the `mini` preset on synthetic multi-hop QA, SFT then TRACE RL.

  python experiments/train.py --config configs/quickstart.py --workdir /tmp/quickstart

Expected runtime: under 10 minutes on a 2-core CPU. Switch the allocator with
`--config.allocator.name=grpo` (or dapo, mopps, knapsack, pcl, treepo, entropy_branch).
`get_config("runlocal")` shrinks every stage for a one-minute smoke run.
"""

import ml_collections

from trace_jax.config.files import config_args, default_config


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The library's defaults (`trace_jax/config/schema.py` holds them); `runlocal` shrinks every stage."""
    args = config_args(arg, flags=("runlocal",), config="configs/quickstart.py")
    c = default_config()
    if args["runlocal"]:
        c.sft.steps, c.sft.num_demos = 20, 100
        c.rl.steps, c.rl.max_new_tokens = 2, 16
        c.budget.update(rollouts=8, prompts=2, candidates=4)
        c.eval.num_tasks = 16
        c.checkpoint.every = 1
    return c
