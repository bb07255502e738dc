"""The loss and the learner step: masks, clipping, agreement with the sampler, accumulation."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax import allocation
from trace_jax.rl import learner
from trace_jax.rl.batches import paths
from trace_jax.rl.advantages import AdvantageConfig, Sequence, estimate
from trace_jax.rl.logprobs import sequence_logprobs, token_logprobs
from trace_jax.rl.losses import LossConfig, ppo_clip
from trace_jax.models import forward
from trace_jax.rollout.agent_loop import RolloutEngine


def _batch(rng, n=2, length=6, vocab=11):
    return {"targets": jnp.asarray(rng.integers(0, vocab, (n, length))),
            "mask": jnp.asarray(rng.random((n, length)) < 0.5),
            "advantages": jnp.asarray(rng.normal(size=(n, length)), jnp.float32),
            "old_logprobs": jnp.asarray(-rng.random((n, length)) * 3, jnp.float32)}


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_masked_tokens_get_no_gradient(aggregation):
    rng = np.random.default_rng(0)
    batch = _batch(rng)
    logits = jnp.asarray(rng.normal(size=(2, 6, 11)), jnp.float32)
    config = LossConfig(aggregation=aggregation)
    grad = jax.grad(lambda lg: ppo_clip(*token_logprobs(lg, batch["targets"], 1.0), batch, config, 4.0)[0])(logits)
    per_position = np.abs(np.asarray(grad)).sum(-1)
    assert (per_position[~np.asarray(batch["mask"])] == 0).all()
    assert (per_position[np.asarray(batch["mask"])] > 0).any()


def test_clipped_tokens_get_no_gradient():
    logits = jnp.zeros((1, 1, 4))
    new_logprob = float(token_logprobs(logits, jnp.zeros((1, 1), jnp.int32), 1.0)[0][0, 0])
    batch = {"targets": jnp.zeros((1, 1), jnp.int32), "mask": jnp.ones((1, 1), bool),
             "advantages": jnp.ones((1, 1)), "old_logprobs": jnp.full((1, 1), new_logprob - 1.0)}  # ratio e > 1.28
    grad = jax.grad(lambda lg: ppo_clip(*token_logprobs(lg, batch["targets"], 1.0), batch, LossConfig(),
                                        1.0)[0])(logits)
    assert np.abs(np.asarray(grad)).max() == 0.0
    _, metrics = ppo_clip(*token_logprobs(logits, batch["targets"], 1.0), batch, LossConfig(), 1.0)
    assert float(metrics["clip_fraction"]) == 1.0


@pytest.fixture(scope="module")
def rollouts(tiny_setup):
    budget = allocation.BudgetConfig(rollouts=8, prompts=2, candidates=2, m_min=2, m_max=4)
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=1)
    trees = allocation.make("treepo", budget).step(engine, tiny_setup.source.tasks("train")[:2]).trees
    return trees


def test_learner_logprobs_equal_the_samplers(tiny_setup, rollouts):
    policy = tiny_setup.policy
    seqs = estimate(rollouts, AdvantageConfig())
    batch = paths.build(rollouts, seqs, micro_batch=4)
    flat = {k: v.reshape(-1, v.shape[-1]) for k, v in batch.items()}
    positions = np.broadcast_to(np.arange(flat["tokens"].shape[1]), flat["tokens"].shape)
    logits = forward(policy.config, policy.params, flat["tokens"], positions, attention_mask=flat["valid"]).logits
    new, _ = token_logprobs(logits, flat["targets"], 1.0)
    mask = flat["mask"]
    assert mask.sum() == sum(len(n.tokens) for t in rollouts for n in t.nodes[1:])  # each turn once
    np.testing.assert_allclose(np.asarray(new)[mask], flat["old_logprobs"][mask], atol=1e-4)


@pytest.mark.parametrize("remat", ["dots", "layer"])
def test_the_blocked_lm_head_and_either_remat_give_the_plain_passes_logprobs_and_gradients(tiny_setup, rollouts,
                                                                                         monkeypatch, remat):
    """Logits in blocks of positions (a scan, recomputed in the backward pass) and either remat policy: the
    log-probs, entropies and parameter gradients of the one-block pass with the default policy."""
    from trace_jax.models import memory

    config = tiny_setup.policy.config
    params = tiny_setup.policy.params
    batch = paths.build(rollouts, estimate(rollouts, AdvantageConfig()), micro_batch=4)
    micro = {k: jnp.asarray(v[0]) for k, v in batch.items()}
    N, L = micro["tokens"].shape
    assert L > 8

    def objective(p, config):
        new, entropy = sequence_logprobs(config, p, micro["tokens"], micro["valid"], micro["targets"], 1.0)
        return jnp.sum(new * micro["mask"]) + 0.1 * jnp.sum(entropy * micro["mask"]), (new, entropy)

    (want, (want_lp, want_ent)), want_grad = jax.value_and_grad(objective, has_aux=True)(params, config)
    monkeypatch.setattr(memory, "LOGITS_BYTES", N * config.vocab_size * 4 * 8)  # blocks of 8 positions
    assert memory.logits_block(config, N) == 8
    (got, (got_lp, got_ent)), got_grad = jax.value_and_grad(objective, has_aux=True)(params,
                                                                                      config.replace(remat=remat))
    np.testing.assert_allclose(got_lp, want_lp, atol=1e-5)
    np.testing.assert_allclose(got_ent, want_ent, atol=1e-5)
    chex.assert_trees_all_close(got_grad, want_grad, atol=1e-5, rtol=1e-4)


def test_observation_and_prompt_tokens_are_never_trained(rollouts):
    seqs = estimate(rollouts, AdvantageConfig(name="grpo"))
    batch = paths.build(rollouts, seqs, micro_batch=2)
    tree, seq = rollouts[seqs[0].tree], seqs[0]
    path = tree.path(seq.leaf)
    prompt = len(path[0].tokens)
    mask = batch["mask"].reshape(-1, batch["mask"].shape[-1])[0]
    assert not mask[: prompt - 1].any()
    offset = prompt
    for node in path[1:]:
        assert mask[offset - 1: offset - 1 + len(node.tokens)].all()
        assert not mask[offset - 1 + len(node.tokens): offset - 1 + len(node.tokens) + len(node.observation)].any()
        offset += len(node.tokens) + len(node.observation)


def _step(tiny_setup, rollouts, micro_batch):
    policy = tiny_setup.policy
    seqs = [Sequence(s.tree, s.leaf, {n: 1.0 - 0.3 * i for i, n in enumerate(s.advantages)})
            for s in estimate(rollouts, AdvantageConfig())]
    batch = paths.build(rollouts, seqs, micro_batch=micro_batch)
    optimizer = learner.make_optimizer(learner.LearnerConfig(learning_rate=1e-3))
    params = jax.tree.map(jnp.array, policy.params)
    new, _, metrics = learner.train_step(policy.config, LossConfig(), optimizer, params, optimizer.init(params),
                                         batch)
    return new, metrics


def test_gradient_accumulation_matches_one_big_batch(tiny_setup, rollouts):
    a, ma = _step(tiny_setup, rollouts, micro_batch=2)
    b, mb = _step(tiny_setup, rollouts, micro_batch=8)
    assert float(ma["grad_norm"]) > 0 and float(ma["approx_kl"]) < 1e-6
    np.testing.assert_allclose(float(ma["loss"]), float(mb["loss"]), rtol=1e-5)
    np.testing.assert_allclose(float(ma["grad_norm"]), float(mb["grad_norm"]), rtol=1e-4)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-5), a, b)  # Adam magnifies fp noise


def test_the_learner_step_compiles_once_per_batch_bucket(tiny_setup, rollouts):
    """Batches of 5..8 sequences pad to one [2, 4, L] bucket: chex counts one trace for all of them."""
    policy = tiny_setup.policy
    seqs = estimate(rollouts, AdvantageConfig(name="grpo"))  # one sequence per leaf: 8
    step = jax.jit(chex.assert_max_traces(learner._train_step, n=1), static_argnums=(0, 1, 2), donate_argnums=(3, 4))
    optimizer = learner.make_optimizer(learner.LearnerConfig())
    params = jax.tree.map(jnp.array, policy.params)
    opt_state = optimizer.init(params)
    length = paths.build(rollouts, seqs, micro_batch=4)["tokens"].shape[-1]
    for n in (8, 7, 5):
        batch = paths.build(rollouts, seqs[:n], micro_batch=4)
        batch = {k: np.pad(v, [(0, 0), (0, 0), (0, length - v.shape[-1])]) for k, v in batch.items()}
        params, opt_state, _ = step(policy.config, LossConfig(), optimizer, params, opt_state, batch)
    with pytest.raises(AssertionError, match="traced > 1 times"):  # a new bucket is a new trace
        step(policy.config, LossConfig(), optimizer, params, opt_state,
             paths.build(rollouts, seqs[:2], micro_batch=2))


def test_a_non_finite_step_leaves_params_and_optimizer_state_unchanged(tiny_setup, rollouts):
    policy = tiny_setup.policy
    seqs = estimate(rollouts, AdvantageConfig(name="grpo"))
    batch = paths.build(rollouts, seqs, micro_batch=4)
    batch["advantages"] = np.where(batch["mask"], np.nan, 0.0).astype(np.float32)  # a poisoned batch
    optimizer = learner.make_optimizer(learner.LearnerConfig(learning_rate=1e-3))
    params = jax.tree.map(jnp.array, policy.params)
    opt_state = optimizer.init(params)
    keep_params, keep_opt = jax.tree.map(np.asarray, (params, opt_state))
    new, new_opt, metrics = learner.train_step(policy.config, LossConfig(), optimizer, params, opt_state, batch)
    assert not np.isfinite(float(metrics["loss"]))
    jax.tree.map(np.testing.assert_array_equal, (new, new_opt), (keep_params, keep_opt))
    with pytest.raises(learner.NonFiniteError, match=r"RL step 7: loss nan"):
        learner.require_finite(learner.LearnerMetrics.from_device(metrics), "RL step 7")
    learner.require_finite(None, "no update")  # a step that trained nothing is fine


@pytest.mark.slow
def test_micro_batch_gradients_are_summed_in_float32_for_bf16_params(tiny_setup, rollouts):
    """Paper configs keep bf16 params and sum a step's gradient over many micro-batches: the sum is taken in
    float32 and rounded to bf16 once. 64 copies of one micro-batch: each copy's gradient is the single one's
    / 64 exactly (the loss normaliser grows by a power of two), so the float32 sum gives the single
    micro-batch's gradient bit for bit; summed in bf16 it would not (k x g needs more than 8 mantissa bits)."""
    import dataclasses

    config = dataclasses.replace(tiny_setup.policy.config, param_dtype="bfloat16", dtype="bfloat16")
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), tiny_setup.policy.params)
    seqs = [Sequence(s.tree, s.leaf, {n: 1.0 - 0.3 * i for i, n in enumerate(s.advantages)})
            for s in estimate(rollouts, AdvantageConfig())]
    one = jax.tree.map(lambda x: x[:1], paths.build(rollouts, seqs, micro_batch=1))
    single, _ = learner.gradients(config, LossConfig(), params, one)
    summed, _ = learner.gradients(config, LossConfig(), params, jax.tree.map(lambda x: np.concatenate([x] * 64), one))
    assert any(np.abs(np.asarray(x, np.float32)).max() > 0 for x in jax.tree.leaves(single))
    for got, want in zip(jax.tree.leaves(summed), jax.tree.leaves(single)):
        assert got.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))

