"""One RL step's optimizer updates: the step's sequences shuffled with a fixed seed, split into
`learner.mini_batches` mini-batches of about equal trained tokens, `learner.epochs` passes, one clipped
update per mini-batch (the importance ratio against the sampler's log-probs, so from the second update on
the ratio moves and the clip acts), as verl (`ppo_mini_batch_size`, `ppo_epochs`) and Tunix
(`mini_batch_size`, `num_iterations`) train. Every mini-batch of a step has one shape, so one compiled
learner step serves them all. With mini_batches = epochs = 1 the step is the single update of before,
bit for bit (same batch, same order)."""

from __future__ import annotations

import numpy as np

from trace_jax.rl import batches
from trace_jax.rl.advantages import Sequence
from trace_jax.rl.learner import LearnerConfig, LearnerMetrics
from trace_jax.rollout.tree import RolloutTree


def trained_tokens(trees: list[RolloutTree], seq: Sequence) -> int:
    return sum(len(trees[seq.tree].nodes[node].tokens) for node in seq.advantages)


def mini_batches(trees: list[RolloutTree], sequences: list[Sequence], config: LearnerConfig,
                 rng: np.random.Generator) -> list[list[int]]:
    """Indices into `sequences`, one list per mini-batch (some empty when there are fewer units than
    mini-batches). Units (a tree's sequences, or one sequence with `split_trees`) are taken in a random
    order and each goes to the mini-batch with the fewest trained tokens so far; within a unit the
    estimator's order stays (trace_tree trains a shared turn in the first path through it)."""
    if config.mini_batches == 1:
        return [list(range(len(sequences)))]
    units: dict[object, list[int]] = {}
    for i, seq in enumerate(sequences):
        units.setdefault(i if config.split_trees else seq.tree, []).append(i)
    groups: list[list[int]] = [[] for _ in range(config.mini_batches)]
    load = np.zeros(config.mini_batches)
    keys = list(units)
    for u in rng.permutation(len(keys)):
        members = units[keys[int(u)]]
        g = int(np.argmin(load))
        groups[g] += members
        load[g] += sum(trained_tokens(trees, sequences[i]) for i in members)
    return groups


def plan(trees: list[RolloutTree], sequences: list[Sequence], config: LearnerConfig, seed: int
         ) -> list[dict[str, np.ndarray]]:
    """The step's update batches in order (epoch by epoch), all of one shape ([num_micro, micro_batch, L]; the
    packed layout's entry arrays [num_micro, micro_batch, E]); empty mini-batches are left out."""
    rng = np.random.default_rng(seed)
    epochs = [mini_batches(trees, sequences, config, rng) for _ in range(config.epochs)]
    groups = [g for groups in epochs for g in groups if g]
    return batches.layout(config.layout).step_batches(trees, sequences, groups, config.micro_batch)


def full_batch(trees: list[RolloutTree], sequences: list[Sequence], config: LearnerConfig) -> dict[str, np.ndarray]:
    """Every sequence of the step in one batch of the configured layout (the gradient a study measures)."""
    return batches.layout(config.layout).build(trees, sequences, config.micro_batch)


def run(learn, params, opt_state, step_batches: list[dict[str, np.ndarray]], epochs: int = 1):
    """Applies `learn(params, opt_state, batch) -> (params, opt_state, device metrics)` to each batch in
    order (`epochs` passes over the step's sequences); returns (params, opt_state, LearnerMetrics)."""
    per_update = []
    for batch in step_batches:
        params, opt_state, metrics = learn(params, opt_state, batch)
        per_update.append(metrics)
    return params, opt_state, summarize([LearnerMetrics.from_device(m) for m in per_update], epochs)


def summarize(per_update: list[LearnerMetrics], epochs: int = 1) -> LearnerMetrics:
    """Means over the updates (one update: its own figures, exactly), the last update's clip fraction, KL and
    gradient norm; trained tokens of one pass over the step's sequences."""
    def mean(name):
        values = [getattr(m, name) for m in per_update]
        return None if values[0] is None else float(np.mean(values))

    last = per_update[-1]
    return LearnerMetrics(loss=mean("loss"), clip_fraction=mean("clip_fraction"), approx_kl=mean("approx_kl"),
                          entropy=mean("entropy"), grad_norm=mean("grad_norm"),
                          trained_tokens=sum(m.trained_tokens for m in per_update) / epochs,
                          updates=len(per_update), clip_fraction_last=last.clip_fraction, approx_kl_last=last.approx_kl,
                          grad_norm_last=last.grad_norm, is_weight_mean=mean("is_weight_mean"),
                          is_truncated_share=mean("is_truncated_share"))
