"""The headline comparison on multi-hop QA: all seven allocators from one SFT checkpoint (the
quickstart's), 60 RL steps at M=32 rollouts per step, 3 seeds, held-out accuracy every 15 steps.

  python experiments/compare.py --config configs/compare_multihop.py --workdir /tmp/compare_multihop
  python experiments/compare.py --config configs/compare_multihop.py:runlocal --workdir /tmp/compare_local

`:runlocal`: the same SFT checkpoint, 5 RL steps, 60 held-out tasks, a smaller study.
Add `--ablation=stages|unit|lambda_local|featurizer` for TRACE's ablations.

Measured on the 2-core CPU (one run each): the full comparison, 21 runs, 2825 s of run wall time and
49.7 min over two invocations with the SFT checkpoint copied in (SFT itself: about 5 min); `:runlocal`
from scratch 12.6 min, SFT included.
"""

import ml_collections

from configs import quickstart

ALLOCATORS = ("grpo", "dapo", "mopps", "knapsack", "tree_random", "entropy_branch", "trace")


def get_config(arg: str | None = None, base=quickstart.get_config) -> ml_collections.ConfigDict:
    c = base()
    c.rl.steps, c.rl.eval_every = 60, 15
    c.checkpoint.every = 20
    # More passes over the replay buffer than the quickstart's 4: fitted offline on root outcomes of 160 prompts
    # (8 rollouts each) of an SFT policy trained on 1-4 hop questions, AUC on 96 validation prompts rose from
    # 0.59 (4 epochs) to 0.62 (16) and 0.64 (30), mean of 3 predictor seeds (a one-off probe, not in the repo).
    c.predictor.epochs = 16
    c.compare = ml_collections.ConfigDict(dict(allocators=ALLOCATORS, seeds=(0, 1, 2), ablation="",
                                               generalization_steps=8, generalization_prompts=32))
    if arg and "runlocal" in arg.split(","):
        c.rl.steps, c.rl.eval_every = 5, 0
        c.checkpoint.every = 5
        c.eval.num_tasks = 60
        c.compare.generalization_steps, c.compare.generalization_prompts = 4, 16
    return c
