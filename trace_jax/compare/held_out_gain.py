"""The mechanism study's second measure: what a few learner steps on a variant's batches do to expected success
on rollouts they never saw. The gradient cosine (`mechanism.py`) asks whether one step's direction points where
uniform whole rollouts point; this asks what training on an arm's batches buys, contrast reweighted or not.

From the frozen policy theta0, `window` consecutive allocation steps' batches are trained exactly as the trainer
would (its optimizer from a fresh state, its mini-batches and epochs); then, on the reference's uniform rollouts
(GRPO groups, never trained on), the importance-weighted estimate of the change in expected success:

    gain = mean over rollouts of (pi_theta(y) / pi_theta0(y) - 1) * (r - mean r of the rollout's prompt)

(generated tokens only, the model's own log-probs at the loss temperature on both sides; the group baseline
only lowers the variance, as the ratio's mean is 1). Windows restart from theta0, so S steps give S // window
paired measurements per variant (the same pools and rollout seeds for every variant).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.rl import learner, updates
from trace_jax.rl.batches import paths
from trace_jax.rl.advantages import AdvantageConfig, estimate
from trace_jax.rl.logprobs import sequence_logprobs
from trace_jax.rollout.tree import RolloutTree
from trace_jax.run.experiment import derive_seed

REFERENCE_ADVANTAGE = AdvantageConfig(name="grpo", scale="none")  # r - the prompt's mean r, as the reference's


def held_out_batch(trees: list[RolloutTree], micro_batch: int) -> dict[str, np.ndarray]:
    """One row per rollout of `trees` (plain layout), its advantage r - r_bar on every generated token."""
    return paths.build(trees, estimate(trees, REFERENCE_ADVANTAGE), micro_batch)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _row_logprobs(model_config, params, temperature: float, batch) -> jax.Array:
    """[num_micro, micro] sums of log pi over each row's trained (generated) tokens."""
    def rows(micro):
        lp, _ = sequence_logprobs(model_config, params, micro["tokens"], micro["valid"], micro["targets"], temperature)
        return jnp.sum(jnp.where(micro["mask"], lp, 0.0), axis=-1)
    return jax.lax.map(rows, batch)


def row_logprobs(setup, params, batches: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    return [np.asarray(_row_logprobs(setup.model_config, params, setup.run.loss.temperature, jax.device_put(b)),
                       np.float64) for b in batches]


def gain(batches: list[dict[str, np.ndarray]], base: list[np.ndarray], new: list[np.ndarray]) -> dict:
    """The importance-weighted success change of `new` over `base` row log-probs on the held-out `batches`:
    {"gain", "rollouts", "max_abs_log_ratio"}."""
    total, rows, largest = 0.0, 0, 0.0
    for batch, b, n in zip(batches, base, new):
        mask = batch["mask"]
        trained = mask.sum(-1)
        advantage = np.where(trained > 0, (batch["advantages"] * mask).sum(-1) / np.maximum(trained, 1), 0.0)
        log_ratio = np.where(trained > 0, n - b, 0.0)
        total += float(np.sum(np.expm1(log_ratio) * advantage))
        rows += int((trained > 0).sum())
        largest = max(largest, float(np.abs(log_ratio).max()))
    if not rows:
        raise ValueError("the held-out rollouts have no generated tokens to score")
    return {"gain": total / rows, "rollouts": rows, "max_abs_log_ratio": largest}


class WindowTrainer:
    """Trains a variant's step batches from theta0 in windows of `window` steps; after each window, the held-out
    gain. `train(step, trees)` after every allocation step; `gains` holds one figure per finished window."""

    def __init__(self, setup, run, params, held_out: list[dict[str, np.ndarray]], base: list[np.ndarray], *,
                 window: int, seed: int):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.setup, self.run, self.params0, self.window, self.seed = setup, run, params, window, seed
        self.held_out, self.base = held_out, base
        self.optimizer = learner.make_optimizer(run.learner)
        self.params, self.opt_state, self.gains = None, None, []

    def _learn(self, p, o, b):
        return learner.train_step(self.setup.model_config, self.run.loss, self.optimizer, p, o, jax.device_put(b))

    def train(self, step: int, trees: list[RolloutTree]) -> None:
        if step % self.window == 0:  # train_step donates its inputs: start each window from a copy of theta0
            self.params = jax.tree.map(jnp.copy, self.params0)
            self.opt_state = self.optimizer.init(self.params)
        sequences = estimate(trees, self.run.advantage)
        if sequences:
            batches = updates.plan(trees, sequences, self.run.learner, derive_seed(self.seed, "held-out gain", step))
            self.params, self.opt_state, metrics = updates.run(self._learn, self.params, self.opt_state, batches,
                                                               self.run.learner.epochs)
            learner.require_finite(metrics, f"held-out gain window, step {step}")
        if step % self.window == self.window - 1:
            self.gains.append(gain(self.held_out, self.base, row_logprobs(self.setup, self.params, self.held_out)))
