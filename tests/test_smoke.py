"""End to end, one full TRACE step on CPU: allocate, roll out a tree, update the predictor, compute
advantages, take a learner step."""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax import allocation
from trace_jax.allocation.predictor import SuccessPredictor, feature_width
from trace_jax.rl import learner
from trace_jax.rl.batches import paths
from trace_jax.rl.advantages import AdvantageConfig, estimate
from trace_jax.rl.losses import LossConfig
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.rollout.tree import step_statistics
from trace_jax.sampling.paged import PagePool


@pytest.mark.parametrize("kv", ["paged", "dense"])
def test_one_trace_step_end_to_end(tiny_setup, kv):
    t0 = time.perf_counter()
    policy, config = tiny_setup.policy, tiny_setup.config
    if kv == "paged":  # the default of a run on one device (rl.kv_layout)
        policy = dataclasses.replace(policy, pages=PagePool(config))
    budget = allocation.BudgetConfig(rollouts=16, prompts=4, candidates=8, m_min=2, m_max=4, rounds=2)
    allocator = allocation.make("trace", budget, seed=0,
                                predictor=SuccessPredictor(feature_width(config.hidden_size), seed=0))
    engine = RolloutEngine(policy, tiny_setup.env, seed=0)
    # No implicit transfer in the rollout or the learner step: every crossing is an explicit
    # jax.device_put / jax.device_get. (On CPU only host-to-device crossings are caught; on GPU/TPU a
    # stray float() of a device array, a per-token sync, fails here too.)
    with jax.transfer_guard("disallow"):
        outcome = allocator.step(engine, tiny_setup.source.tasks("train")[: allocator.pool_size])
    assert engine.ledger.rollouts_started == engine.ledger.rollouts_finished == budget.rollouts
    for tree in outcome.trees:
        assert tree.open_nodes() == [] and all(leaf.terminal for leaf in tree.leaves())
    assert np.isfinite(outcome.record.predictor_loss)
    sequences = estimate(outcome.trees, AdvantageConfig())
    batch = jax.device_put(paths.build(outcome.trees, sequences, micro_batch=4))
    optimizer = learner.make_optimizer(learner.LearnerConfig())
    params = jax.tree.map(jnp.array, policy.params)
    opt_state = optimizer.init(params)
    with jax.transfer_guard("disallow"):
        _, _, metrics = learner.train_step(config, LossConfig(), optimizer, params, opt_state, batch)
        metrics = learner.LearnerMetrics.from_device(metrics)
        with pytest.raises(Exception, match="Disallowed host-to-device"):  # the guard is live
            jax.jit(lambda x: x + 1)(np.ones(2))
    assert all(np.isfinite(v) for v in dataclasses.astuple(metrics)[:6])  # one update: the `_last` fields unset
    stats = step_statistics(outcome.trees)
    assert set(stats) >= {"effective_ratio", "expanded_mixed_share"}
    assert time.perf_counter() - t0 < 60
