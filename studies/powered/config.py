"""The powered, paired comparison (primary endpoint: TRACE - GRPO greedy held-out success at equal measured generated
tokens, declared in the README before the runs; docs/results.md, "The powered comparison"): 120 RL steps, GRPO and
TRACE (global stage-2 mode, one update per step) on seeds 0-7, the other arms on 0-2 (every allocator on math; PCL
and TreePO on the others).

  python experiments/compare.py --config studies/powered/config.py:task=math --workdir /tmp/powered_math
  python studies/powered/primary_endpoint.py                    # the 3-task mean -> results/primary_endpoint.json

Held-out greedy success on 1000 tasks of the separate eval generator (multi-hop: its 123 test-split questions)
every 30 steps, mean-of-8 on 250 of them after the last step; every finished run is kept in results/<task>/, from
which a fresh workdir resumes.
"""

import os

import ml_collections

from configs import compare_multihop
from studies.mechanism.config import COMPARISONS
from trace_jax.config.files import config_args
from trace_jax.config.schema import ConfigError

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# Each grid's equal-tokens cap, measured on its shared SFT start by its first invocation (what GRPO's 32 rollouts
# cost there; each report's setting line states it) and fixed here, so a fresh clone finds every committed run
# under the cap it ran at instead of measuring it again.
TOKEN_CAPS = {"math": 2764, "multihop": 1948, "funcall": 4320}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = config_args(arg, values={"task": ""}, config="studies/powered/config.py")
    if args["task"] not in COMPARISONS:
        raise ConfigError(f"studies/powered/config.py needs task= one of {sorted(COMPARISONS)}, got {args['task']!r}")
    c = COMPARISONS[args["task"]].get_config()
    c.rl.steps, c.rl.eval_every = 120, 30
    c.checkpoint.every = 30
    if c.task.source == "multihop":
        # Separate multi-hop worlds score 0.000 for this policy (it writes the training world's entity names
        # instead of copying unseen ones) and 3-hop questions 0.015: the 123 test-split questions it is.
        c.eval.split, c.eval.num_tasks, c.eval.sample_tasks = "test", 0, 123
    else:
        c.eval.split, c.eval.num_tasks, c.eval.sample_tasks = "separate", 1000, 250
    c.eval.sample_k = 8
    c.compare.unit, c.compare.tokens = "tokens", TOKEN_CAPS[args["task"]]
    c.compare.seeds, c.compare.primary_seeds = (0, 1, 2), tuple(range(8))
    c.compare.allocators = compare_multihop.ALLOCATORS if c.task.source == "math" else ("grpo", "pcl", "treepo", "trace")
    c.compare.generalization_steps = 0  # measured in the mechanism studies; not needed for the endpoint
    # The powered grids ran TRACE in global stage-2 mode, the arm `trace` meant then (the paper's local mode became
    # `trace` on 2026-12-05): the arm keeps its name in the reports and the mode it ran in.
    c.compare.arms = {"trace": {"allocator": {"name": "trace", "prefix_budget": "global"}}}
    c.compare.results = os.path.join(RESULTS, args["task"])
    return c
