"""A small run whose leaves are rewarded by the parity of their tokens (the tiny model never answers within the
smoke run's token limit, so without this every reward is 0, no update moves the params and staleness could not
matter), for the async-rollout tests: in-process (`config`, `parity_rewards`) or as a process to kill or give 2 devices:

  python tests/run/async_driver.py WORKDIR rl.max_staleness=1 mesh.sampler_devices=1 ...
"""

import ast
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from configs import quickstart  # noqa: E402
from trace_jax.run import train  # noqa: E402

OVERRIDES = {"model.preset": "tiny", "rl.steps": 4, "checkpoint.every": 1, "eval.num_tasks": 4, "sft.steps": 10,
             "budget.rollouts": 8, "budget.prompts": 2, "budget.candidates": 4, "learner.learning_rate": 3e-3,
             "rl.max_staleness": 1, "loss.name": "decoupled_ppo"}


def config(**changes):
    c = quickstart.get_config("runlocal")
    for dotted, value in {**OVERRIDES, **changes}.items():
        section, key = dotted.split(".")
        c[section][key] = value
    return c


def parity_rewards(roll_out):
    """`train.roll_out` whose leaves get reward 1 when their path's generated tokens sum to an odd number."""

    def rewarded(*args, **kwargs):
        rollouts = roll_out(*args, **kwargs)
        for tree in rollouts.outcome.trees:
            for leaf in tree.leaves():
                node, total = leaf, 0
                while node is not None and node.parent is not None:
                    total += sum(node.tokens)
                    node = tree.nodes[node.parent]
                leaf.reward = float(total % 2)
                leaf.success = bool(total % 2)
        return rollouts

    return rewarded


if __name__ == "__main__":
    workdir, *pairs = sys.argv[1:]
    changes = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        try:
            changes[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            changes[key] = value
    train.roll_out = parity_rewards(train.roll_out)
    train.train_and_evaluate(config(**changes), workdir)
