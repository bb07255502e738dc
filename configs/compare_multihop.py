"""The headline comparison on multi-hop QA: all eight allocators from one SFT checkpoint (the
quickstart's), 60 RL steps at M=32 rollouts per step, 3 seeds, held-out accuracy every 15 steps.

  python experiments/compare.py --config configs/compare_multihop.py --workdir /tmp/compare_multihop
  python experiments/compare.py --config configs/compare_multihop.py:runlocal --workdir /tmp/compare_local

`:runlocal`: the same SFT checkpoint, 5 RL steps, 60 held-out tasks, a smaller study. Add
`--ablation=stages|stage2|lambda_local|featurizer|advantage` for TRACE's ablations, `--study=mechanism` for the
frozen-policy mechanism study (no training; `:runlocal` about 10 min after the SFT). The studies built on this
comparison (powered, decisive, mechanism, stage ablation) keep their own configs under studies/.

Expected runtime on a 2-core CPU: about 55 min (SFT about 5); `:runlocal` about 13 min from scratch.
Measurements: README, "Allocator comparison at equal budget".
"""

import ml_collections

from configs import quickstart
from trace_jax.config.files import config_args

ALLOCATORS = ("grpo", "dapo", "mopps", "knapsack", "pcl", "treepo", "entropy_branch", "trace")


def get_config(arg: str | None = None, base=quickstart.base) -> ml_collections.ConfigDict:
    args = config_args(arg, flags=("runlocal",), config="the comparison configs")
    c = base()
    c.rl.steps, c.rl.eval_every = 60, 15
    # A pool of 256 training prompts recurs every few steps, so allocators with per-prompt histories
    # (mopps, knapsack) have histories to use; with the whole split no prompt came back within 60 steps.
    c.rl.train_prompts = 256
    c.checkpoint.every = 20
    # More passes over the replay buffer than the quickstart's 4: fitted offline on root outcomes of 160 prompts
    # (8 rollouts each) of an SFT policy trained on 1-4 hop questions, AUC on 96 validation prompts rose from
    # 0.59 (4 epochs) to 0.62 (16) and 0.64 (30), mean of 3 predictor seeds (a one-off probe, not in the repo).
    c.predictor.epochs = 16
    # The tree-packed learner: the same losses and gradients as one sequence per leaf path (to 1e-5), 1.1x-2.1x
    # faster on every arm measured, memory never larger (studies/benchmarks/bench_learner.py --section layouts;
    # docs/results.md, "The tree-packed learner"). The stored runs that trained per path are still read back:
    # the layout is not part of a run's identity (`schema.EXECUTION_SETTINGS`).
    c.learner.layout = "packed"
    c.compare = ml_collections.ConfigDict(dict(allocators=ALLOCATORS, seeds=(0, 1, 2), ablation="",
                                               generalization_steps=8, generalization_prompts=32, study="",
                                               mechanism_steps=50, mechanism_reference=2048, mechanism_group=8,
                                               mechanism_holdout=4, mechanism_advantage="trace_tree",
                                               mechanism_rl_steps=0,
                                               unit="rollouts", endpoint="greedy", equivalence_margin=0.0, tokens=0,
                                               token_calibration=256))
    if args["runlocal"]:
        c.rl.steps, c.rl.eval_every = 5, 0
        c.checkpoint.every = 5
        c.eval.num_tasks = 60
        c.compare.generalization_steps, c.compare.generalization_prompts = 4, 16
        c.compare.mechanism_steps, c.compare.mechanism_reference = 10, 512
    return c

