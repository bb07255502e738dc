"""Ragged prefill (sampling/prefill.py): prompts of very different lengths are prefilled in length groups and
merged, and the merged state is the padded batch's: every row's tokens and length exactly, its first logits,
features and pooled prompt state within 1e-5 (f32), and greedy decoding from it the same tokens with log-probs
within 1e-5, on one device and on a (2, 4) mesh; alike lengths stay one batch."""

import jax
import numpy as np
import pytest

from trace_jax.models import init_params
from trace_jax.models.presets import get_preset
from trace_jax.parallel.mesh import make_mesh
from trace_jax.parallel.rules import to_sampling_layout
from trace_jax.sampling import SamplingParams, decode, start
from trace_jax.sampling.prefill import GROUP_SAVING, _start_padded, length_groups
from trace_jax.sampling.state import mesh_of

CONFIG = get_preset("tiny")
PARAMS = init_params(CONFIG, 0)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)
LENGTHS = [9, 300, 5, 12, 7, 150, 11]  # prompt order mixes the groups: rows must come back in this order


def _prompts(lengths, seed=0):
    rng = np.random.RandomState(seed)
    return [rng.randint(3, CONFIG.vocab_size, n).tolist() for n in lengths]


def test_length_groups_split_only_where_it_saves_and_keep_alike_lengths_together():
    assert length_groups([128] * 15 + [3000], reserve=64) == [list(range(15)), [15]]
    assert length_groups([100, 130, 180, 200] * 4, reserve=64) == [list(range(16))]  # an octave apart, alike cost
    assert length_groups([7], reserve=0) == [[0]]
    groups = length_groups(LENGTHS, reserve=12)
    assert sorted(i for g in groups for i in g) == list(range(len(LENGTHS))) and len(groups) > 1
    for g in groups:
        assert g == sorted(g)  # each group in prompt order
    assert 0 < GROUP_SAVING < 1


def _assert_same_state(got, want, n):
    assert got.batch_size == want.batch_size and got.capacity == want.capacity
    np.testing.assert_array_equal(np.asarray(got.cache.lengths)[:n], np.asarray(want.cache.lengths)[:n])
    lengths = np.asarray(want.cache.lengths)
    for i in range(n):
        np.testing.assert_array_equal(np.asarray(got.tokens)[i, :lengths[i]], np.asarray(want.tokens)[i, :lengths[i]])
    for field in ("logits", "hidden", "pooled"):
        np.testing.assert_allclose(np.asarray(getattr(got, field))[:n], np.asarray(getattr(want, field))[:n],
                                   atol=1e-5, rtol=1e-5, err_msg=field)


@pytest.mark.parametrize("shape", [None, (2, 4, 1)])
def test_a_ragged_prefill_is_the_padded_batch_and_decodes_the_same_tokens(shape):
    params = PARAMS if shape is None else to_sampling_layout(PARAMS, make_mesh(*shape))
    prompts = _prompts(LENGTHS)
    assert len(length_groups(LENGTHS, GREEDY.max_new_tokens)) > 1
    ragged = start(CONFIG, params, prompts, reserve=GREEDY.max_new_tokens)
    padded = _start_padded(CONFIG, params, prompts, GREEDY.max_new_tokens, 512, mesh_of(params))
    _assert_same_state(ragged, padded, len(prompts))
    active = np.arange(ragged.batch_size) < len(prompts)
    got, _ = decode(CONFIG, params, ragged, GREEDY, seed=0, row_ids=list(range(ragged.batch_size)), active=active)
    want, _ = decode(CONFIG, params, padded, GREEDY, seed=0, row_ids=list(range(padded.batch_size)), active=active)
    for i in range(len(prompts)):
        assert got.row(i) == want.row(i)
        np.testing.assert_allclose(got.logprobs[i, :got.lengths[i]], want.logprobs[i, :want.lengths[i]], atol=1e-5)
    if shape is not None:
        assert jax.tree.leaves(ragged)[0].sharding == jax.tree.leaves(padded)[0].sharding
