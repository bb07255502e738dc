"""One full TRACE RL step (allocation, tree rollouts in the sampling layout, the sharded learner) on a
(2, 2, 2) mesh of CPU devices gives the records, loss and params of one device."""

import dataclasses

import jax
import numpy as np

from configs import quickstart
from trace_jax.rl import learner
from trace_jax.run import experiment, train


def _one_step(tmp_path, mesh):
    c = quickstart.get_config("runlocal")
    c.model.preset = "tiny"
    c.budget.update(rollouts=16, prompts=4, candidates=8)
    c.learner.micro_batch = 8
    c.mesh.update(data=mesh[0], fsdp=mesh[1], tensor=mesh[2])
    setup = experiment.build(c, str(tmp_path))
    allocator = train.make_allocator(setup)
    optimizer = learner.make_optimizer(setup.run.learner)
    learn, params, opt_state = train._learner(setup, optimizer, setup.params, optimizer.init(setup.params))
    pool, _ = train._pool(experiment.train_tasks(setup), 0, allocator.pool_size, setup.run.seed)
    params, _, record = train.rl_step(setup, allocator, learn, params, opt_state, pool, step=1)
    return jax.device_get(params), record


def test_a_trace_step_on_a_mesh_matches_one_device(tmp_path):
    want_params, want = _one_step(tmp_path / "one", (1, 1, 1))
    got_params, got = _one_step(tmp_path / "mesh", (2, 2, 2))
    assert want.learner is not None and want.ledger.rollouts_started == 16
    assert got.ledger == want.ledger and got.allocation.root_counts == want.allocation.root_counts
    assert dataclasses.replace(got.trees) == want.trees
    np.testing.assert_allclose(got.learner.loss, want.learner.loss, rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5), got_params, want_params)
    assert want.cross_shard_rows == 0 and got.timings.reshard_s >= 0
