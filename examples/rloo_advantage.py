"""A new advantage estimator in one file: RLOO (REINFORCE leave-one-out).

Every leaf path gets r_i - mean of the other leaves' rewards of its prompt, on every turn it trains
(trajectory-level, like `grpo`, without the std scaling). Registered as "rloo": import this module in a
config file and set `advantage.name = "rloo"`.
"""

from __future__ import annotations

import numpy as np

from trace_jax.rl.advantages import ESTIMATORS, AdvantageConfig, Sequence


@ESTIMATORS.register("rloo", config=AdvantageConfig)
def rloo(trees, config):
    out = []
    for i, tree in enumerate(trees):
        leaves = tree.leaves()
        reward = np.array([float(leaf.reward) for leaf in leaves])
        if len(leaves) < 2:
            baseline = reward  # nothing to leave one out from: no signal
        else:
            baseline = (reward.sum() - reward) / (len(leaves) - 1)
        for leaf, advantage in zip(leaves, reward - baseline):
            out.append(Sequence(i, leaf.id, {node.id: float(advantage) for node in tree.path(leaf.id)[1:]}))
    return out
