"""The sampler against full forward passes: generate, extend, tree_expand, batching, stops, recompiles."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax.models import forward, init_cache, init_params
from trace_jax.models.presets import get_preset
from trace_jax.sampling import SamplingParams, decode, extend, generate, start, tree_expand
from trace_jax.sampling import decoding, prefill

CONFIG = get_preset("tiny")
PARAMS = init_params(CONFIG, 0)
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=10)


def _prompts(lengths, seed=0):
    rng = np.random.RandomState(seed)
    return [rng.randint(3, CONFIG.vocab_size, n).tolist() for n in lengths]


PAD_TO = 128  # every reference pass runs at this length (causal: padding after a sequence changes nothing in it)


@jax.jit
def _reference_pass(tokens):
    """A full no-cache forward pass and a one-chunk cached pass over [1, PAD_TO] tokens, compiled once."""
    positions = jnp.arange(PAD_TO)[None]
    out = forward(CONFIG, PARAMS, tokens, positions)
    one_chunk = forward(CONFIG, PARAMS, tokens, positions, init_cache(CONFIG, 1, PAD_TO))
    return jax.nn.log_softmax(out.logits[0], -1), out.hidden[0], one_chunk.middle[0]


def _padded(sequence):
    if len(sequence) > PAD_TO:
        raise ValueError(f"reference sequences are at most {PAD_TO} tokens, got {len(sequence)}")
    return np.pad(np.asarray(sequence, np.int32), (0, PAD_TO - len(sequence)))[None]


def _full_logprobs(sequence):
    """log softmax of a full no-cache forward pass over one sequence: [len, V], and the sampler's features
    at the last token from a one-chunk cached pass (final hidden state, then the middle layer's): [2D]."""
    log_p, hidden, middle = (np.asarray(x) for x in _reference_pass(_padded(sequence)))
    last = len(sequence) - 1
    return log_p[: len(sequence)], np.concatenate([hidden[last], middle[last]])


def _full_hidden(sequence):
    """Final hidden states of a full no-cache pass over one sequence: [len, D]."""
    return np.asarray(_reference_pass(_padded(sequence))[1])[: len(sequence)]


def _check_against_full_pass(prefix, tokens, logprobs, entropy=None, hidden=None):
    log_p, full_hidden = _full_logprobs(list(prefix) + list(tokens))
    steps = np.arange(len(tokens)) + len(prefix) - 1
    np.testing.assert_allclose(logprobs[: len(tokens)], log_p[steps, tokens], atol=1e-4, rtol=0)
    if entropy is not None:
        np.testing.assert_allclose(entropy[: len(tokens)], -(np.exp(log_p[steps]) * log_p[steps]).sum(-1),
                                   atol=1e-4, rtol=0)
    if hidden is not None:
        np.testing.assert_allclose(hidden, full_hidden, atol=1e-4, rtol=0)


def test_generate_logprobs_entropy_and_hidden_match_full_forward():
    prompts = _prompts([5, 11, 2, 7])
    gen, _ = generate(CONFIG, PARAMS, prompts, SamplingParams(max_new_tokens=9, return_entropy=True), seed=3)
    assert (gen.lengths == 9).all()
    for i, prompt in enumerate(prompts):
        _check_against_full_pass(prompt, gen.row(i), gen.logprobs[i], gen.entropy[i], gen.hidden[i])


@pytest.mark.slow  # 12 s; the default tier keeps test_generate_logprobs_entropy_and_hidden_match_full_forward
def test_multi_turn_extend_continues_without_reprefill():
    prompts = _prompts([6, 3, 9], seed=1)
    gen, state = generate(CONFIG, PARAMS, prompts, SAMPLING, seed=0)
    observations = _prompts([4, 0, 13], seed=2)  # row 1 gets no observation this turn
    state = extend(CONFIG, PARAMS, state, observations)
    gen2, state = decode(CONFIG, PARAMS, state, SAMPLING, seed=0, row_ids=[10, 11, 12])
    for i in range(3):
        history = prompts[i] + gen.row(i) + observations[i]
        _check_against_full_pass(history, gen2.row(i), gen2.logprobs[i], hidden=gen2.hidden[i])
    np.testing.assert_array_equal(np.asarray(state.cache.lengths[:3]),
                                  [len(prompts[i]) + 20 + len(observations[i]) for i in range(3)])


@pytest.mark.slow
def test_extend_in_several_chunks_matches_one_pass():
    prompts = _prompts([3, 5])
    long_obs = _prompts([70, 33], seed=4)
    state = start(CONFIG, PARAMS, prompts)
    state = extend(CONFIG, PARAMS, state, long_obs, max_chunk=16)  # 5 chunks of 16
    gen, _ = decode(CONFIG, PARAMS, state, SAMPLING, seed=1, row_ids=[0, 1])
    for i in range(2):
        _check_against_full_pass(prompts[i] + long_obs[i], gen.row(i), gen.logprobs[i], hidden=gen.hidden[i])


def test_pooled_state_sums_the_prefilled_tokens_hidden_states_only():
    """`pooled` after a chunked prompt prefill = the sum of a full pass's hidden states over the prompt
    (the predictor's mean-pooled prompt state); decoding leaves it alone, an observation adds its own."""
    prompts = _prompts([40, 7], seed=5)
    state = start(CONFIG, PARAMS, prompts, max_chunk=16)
    for i, prompt in enumerate(prompts):
        np.testing.assert_allclose(np.asarray(state.pooled[i]), _full_hidden(prompt).sum(0), atol=2e-3, rtol=1e-4)
    gen, state = decode(CONFIG, PARAMS, state, SAMPLING, seed=0, row_ids=[0, 1])
    observations = _prompts([5, 0], seed=6)
    after = extend(CONFIG, PARAMS, state, observations)
    for i, prompt in enumerate(prompts):
        full = _full_hidden(prompt + gen.row(i) + observations[i])
        prefilled = list(range(len(prompt))) + list(range(len(prompt) + len(gen.row(i)), len(full)))
        np.testing.assert_allclose(np.asarray(after.pooled[i]), full[prefilled].sum(0), atol=2e-3, rtol=1e-4)


def test_tree_expand_equals_generate_on_copies_of_each_prefix():
    prefixes = _prompts([7, 12], seed=5)
    parents = [0, 0, 0, 1, 1, 1, 1]
    row_ids = [40, 41, 42, 43, 44, 45, 46]
    tree, _ = tree_expand(CONFIG, PARAMS, prefixes, parents, SAMPLING, seed=9, row_ids=row_ids)
    copies, _ = generate(CONFIG, PARAMS, [prefixes[p] for p in parents], SAMPLING, seed=9, row_ids=row_ids)
    np.testing.assert_array_equal(tree.tokens, copies.tokens)
    np.testing.assert_array_equal(tree.lengths, copies.lengths)
    np.testing.assert_allclose(tree.logprobs, copies.logprobs, atol=1e-5, rtol=0)
    assert len({tuple(tree.row(i)) for i in range(3)}) > 1  # branches of one prefix differ


def test_tree_expand_from_a_turn_boundary_of_a_live_state():
    """Fork rows of existing rollouts at an earlier length: the same as generating from that prefix."""
    prompts = _prompts([5, 8], seed=6)
    gen, state = generate(CONFIG, PARAMS, prompts, SAMPLING, seed=2)
    boundary = [len(prompts[0]) + 4, len(prompts[1]) + 7]  # inside each rollout's first turn
    parents, forks, row_ids = [0, 0, 1], [boundary[0], boundary[0], boundary[1]], [7, 8, 9]
    tree, _ = tree_expand(CONFIG, PARAMS, state, parents, SAMPLING, seed=4, row_ids=row_ids, fork_lengths=forks)
    full = [prompts[p] + gen.row(p) for p in range(2)]
    fresh, _ = generate(CONFIG, PARAMS, [full[p][:f] for p, f in zip(parents, forks)], SAMPLING, seed=4,
                        row_ids=row_ids)
    np.testing.assert_array_equal(tree.tokens, fresh.tokens)
    np.testing.assert_allclose(tree.logprobs, fresh.logprobs, atol=1e-5, rtol=0)
    # the parent state is left intact and can be forked again
    again, _ = tree_expand(CONFIG, PARAMS, state, [1], SAMPLING, seed=4, row_ids=[9], fork_lengths=[boundary[1]])
    np.testing.assert_array_equal(again.tokens[0], tree.tokens[2])


def test_a_row_is_the_same_alone_and_in_a_mixed_batch():
    prompts = _prompts([3, 14, 6, 9, 1], seed=7)
    batch, _ = generate(CONFIG, PARAMS, prompts, SAMPLING, seed=5, row_ids=[0, 1, 2, 3, 4])
    alone, _ = generate(CONFIG, PARAMS, [prompts[3]], SAMPLING, seed=5, row_ids=[3])
    np.testing.assert_array_equal(alone.tokens[0], batch.tokens[3])
    np.testing.assert_allclose(alone.logprobs[0], batch.logprobs[3], atol=1e-5, rtol=0)


def test_stop_ids_end_rows_and_max_new_tokens_caps_them():
    prompts = _prompts([4, 6], seed=8)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    free, _ = generate(CONFIG, PARAMS, prompts, greedy, seed=0)
    stop = int(free.tokens[0, 2])  # row 0 emits this token at step 3
    stopped, _ = generate(CONFIG, PARAMS, prompts, SamplingParams(temperature=0.0, max_new_tokens=8,
                                                                   stop_ids=(stop, 1)), seed=0)
    first = int(np.argmax(free.tokens[0] == stop))
    assert stopped.lengths[0] == first + 1 and stopped.stopped[0]
    assert stopped.row(0) == free.row(0)[: first + 1]  # the stop token is kept
    if stop not in free.row(1) and 1 not in free.row(1):
        assert stopped.lengths[1] == 8 and not stopped.stopped[1]
    assert (stopped.tokens[0, first + 1:] == 0).all()


def test_inactive_rows_are_not_decoded():
    state = start(CONFIG, PARAMS, _prompts([4, 5, 6]))
    gen, state = decode(CONFIG, PARAMS, state, SAMPLING, seed=0, row_ids=[0, 1, 2], active=[True, False, True])
    assert gen.lengths.tolist() == [10, 0, 10]
    np.testing.assert_array_equal(np.asarray(state.cache.lengths[:3]), [14, 5, 16])


def test_no_recompilation_inside_the_buckets():
    """Rows 3-4 (bucket 4), prompts <= 16 tokens (chunk 16), capacity bucket 64: one program each."""
    sampling = SamplingParams(max_new_tokens=6)
    generate(CONFIG, PARAMS, _prompts([9, 3, 12]), sampling, seed=0)
    tree_expand(CONFIG, PARAMS, _prompts([5, 7]), [0, 1, 1], sampling, seed=0, row_ids=[0, 1, 2])
    programs = (prefill._append, decoding._rewind, decoding._decode)
    before = [p._cache_size() for p in programs]  # compiled variants per jitted program
    for step, lengths in enumerate([[16, 2, 8], [1, 1, 1, 1], [10, 15, 3, 4]]):
        generate(CONFIG, PARAMS, _prompts(lengths, seed=step), sampling, seed=step)
        parents = [1, 0, 0, 1][: 3 + step % 2]
        tree_expand(CONFIG, PARAMS, _prompts([4, 14], seed=step), parents, sampling, seed=step,
                    row_ids=range(len(parents)))
    assert [p._cache_size() for p in programs] == before


def test_bad_calls_are_named():
    with pytest.raises(ValueError, match="at least one token"):
        generate(CONFIG, PARAMS, [[1, 2], []], SAMPLING, seed=0)
    state = start(CONFIG, PARAMS, _prompts([4]))
    with pytest.raises(ValueError, match="fork_lengths"):
        tree_expand(CONFIG, PARAMS, state, [0], SAMPLING, seed=0, row_ids=[0], fork_lengths=[9])
    with pytest.raises(ValueError, match="row ids"):
        decode(CONFIG, PARAMS, state, SAMPLING, seed=0, row_ids=[0, 1, 2])


def test_a_turn_cut_at_a_stop_string_continues_as_if_the_cut_tokens_were_never_sampled():
    """`truncate` (search_r1's stop at `</search>`): cut each row's turn to k tokens, append an observation,
    decode on: the continuation equals a full pass over prompt + kept tokens + observation."""
    from trace_jax.sampling import truncate
    prompts = _prompts([6, 9])
    state = start(CONFIG, PARAMS, prompts)
    gen, state = decode(CONFIG, PARAMS, state, SAMPLING, seed=3, row_ids=[0, 1])
    keep = [3, max(1, len(gen.row(1)) - 2)]
    state = truncate(CONFIG, PARAMS, state, [len(p) + k for p, k in zip(prompts, keep)])
    observations = _prompts([4, 2], seed=8)
    state = extend(CONFIG, PARAMS, state, observations)
    after, _ = decode(CONFIG, PARAMS, state, SAMPLING, seed=4, row_ids=[2, 3])
    for i in range(2):
        _check_against_full_pass(prompts[i] + gen.row(i)[: keep[i]] + observations[i], after.row(i), after.logprobs[i],
                                 hidden=after.hidden[i])
    with pytest.raises(ValueError, match="truncate lengths must lie in"):
        truncate(CONFIG, PARAMS, start(CONFIG, PARAMS, prompts), [0, 3])
