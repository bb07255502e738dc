"""Held-out evaluation: greedy accuracy and sampled pass@k on a split, overall and per difficulty."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from trace_jax.envs.protocol import Env, Task
from trace_jax.rollout.agent_loop import Policy, RolloutEngine


def evaluate_policy(policy: Policy, env: Env, tasks: Sequence[Task], *, k: int = 1, greedy: bool = True,
                    seed: int = 0, batch: int = 64) -> dict[str, float]:
    """Greedy: accuracy of one greedy rollout per task. Sampled: pass@k over k rollouts per task."""
    if greedy:
        policy = dataclasses.replace(policy, sampling=dataclasses.replace(policy.sampling, temperature=0.0))
        k = 1
    solved, levels = [], []
    for begin in range(0, len(tasks), batch):
        chunk = list(tasks[begin:begin + batch])
        engine = RolloutEngine(policy, env, seed=seed + begin)
        trees = engine.roots(chunk)
        engine.expand(trees, [(i, 0, k) for i in range(len(trees))])
        solved += [any(leaf.success for leaf in tree.leaves()) for tree in trees]
        levels += [t.difficulty for t in chunk]
    solved, levels = np.asarray(solved, float), np.asarray(levels)
    name = "accuracy" if greedy else f"pass@{k}"
    out = {name: float(solved.mean()) if len(solved) else 0.0}
    for level in np.unique(levels):
        out[f"{name}/level_{int(level)}"] = float(solved[levels == level].mean())
    return out
