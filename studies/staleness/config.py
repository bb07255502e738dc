"""Learning under staleness (issue 56; PLAN.md beside this file): does sampling each step's rollouts with the params
one learner step behind (`rl.max_staleness` = 1, with the decoupled PPO loss) learn as well as the synchronous loop
at equal steps, for TRACE and for GRPO, on the multi-hop comparison's task?

  python experiments/compare.py --config studies/staleness/config.py --workdir /tmp/staleness
  python experiments/compare.py --config studies/staleness/config.py:runlocal --workdir /tmp/staleness_local

Arms: {trace, grpo} x {s0, s1}, every one with loss.name="decoupled_ppo" (at s = 0 its proximal policy is the
sampler's up to float rounding: the loss is ppo_clip's), so the arms of one allocator differ in staleness only.
Primary endpoint: trace_s1 - trace_s0, greedy held-out success after the last step, paired by seed and task, with
the equivalence margin fixed in PLAN.md before any run. Every finished run is kept in results/, from which a fresh
workdir resumes.
"""

import os

import ml_collections

from configs import compare_multihop
from trace_jax.config.files import config_args

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MARGIN = 0.03  # PLAN.md: "equivalent" inside +/- 3 points of held-out success, fixed before the runs
ARMS = {f"{allocator}_s{s}": {"allocator": {"name": allocator}, "rl": {"max_staleness": s},
                              "loss": {"name": "decoupled_ppo"}}
        for allocator in ("trace", "grpo") for s in (0, 1)}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = config_args(arg, flags=("runlocal",), config="studies/staleness/config.py")
    c = compare_multihop.get_config("runlocal" if args["runlocal"] else None)
    c.compare.arms = ARMS
    c.compare.allocators = tuple(ARMS)
    c.compare.primary = ("trace_s1", "trace_s0")
    c.compare.seeds = (0, 1, 2, 3)
    c.compare.generalization_steps = 0
    c.compare.equivalence_margin = MARGIN
    c.compare.results = "" if args["runlocal"] else os.path.join(RESULTS, "multihop")
    return c
