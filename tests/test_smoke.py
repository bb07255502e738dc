"""End to end, one full TRACE step on CPU: allocate, roll out a tree, update the predictor, compute
advantages, take a learner step."""

import time

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.allocation import strategies
from trace_jax.allocation.predictor import NUM_SCALARS
from trace_jax.rl import learner
from trace_jax.rl.advantages import AdvantageConfig, estimate
from trace_jax.rl.losses import LossConfig
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.rollout.tree import step_statistics


def test_one_trace_step_end_to_end(tiny_setup):
    t0 = time.perf_counter()
    policy, config = tiny_setup["policy"], tiny_setup["config"]
    budget = strategies.BudgetConfig(rollouts=16, prompts=4, candidates=8, m_min=2, m_max=4, rounds=2)
    allocator = strategies.make("trace", budget, seed=0, feature_dim=config.hidden_size + NUM_SCALARS)
    engine = RolloutEngine(policy, tiny_setup["env"], seed=0)
    outcome = allocator.step(engine, tiny_setup["source"].tasks("train")[: allocator.pool_size])
    assert engine.ledger.rollouts_started == engine.ledger.rollouts_finished == budget.rollouts
    for tree in outcome.trees:
        assert tree.open_nodes() == [] and all(leaf.terminal for leaf in tree.leaves())
    assert np.isfinite(outcome.stats["predictor_loss"])
    sequences = estimate(outcome.trees, AdvantageConfig())
    batch = learner.build_batch(outcome.trees, sequences, micro_batch=4)
    optimizer = learner.make_optimizer(learner.LearnerConfig())
    params = jax.tree.map(jnp.array, policy.params)
    _, _, metrics = learner.train_step(config, LossConfig(), optimizer, params, optimizer.init(params), batch)
    assert all(np.isfinite(float(v)) for v in metrics.values())
    stats = step_statistics(outcome.trees)
    assert set(stats) >= {"effective_ratio", "expanded_mixed_share"}
    assert time.perf_counter() - t0 < 60
