"""Programs on some rows of a live state: a sub-batch padded to its bucket computes the chosen rows only and
leaves every other row as it was."""

import jax
import numpy as np
import pytest

from trace_jax.models import init_params
from trace_jax.models.presets import get_preset
from trace_jax.sampling import extend, start
from trace_jax.sampling.rows import extend_rows, sub_batch_bucket

CONFIG = get_preset("tiny")
PARAMS = init_params(CONFIG, 0)


@pytest.mark.parametrize("rows,table,bucket", [(1, 4, 4), (3, 8, 8), (1, 64, 16), (16, 64, 16), (17, 64, 64),
                                               (17, 512, 64), (65, 512, 256), (300, 512, 512)])
def test_sub_batches_are_powers_of_four_from_16_and_at_most_the_table(rows, table, bucket):
    assert sub_batch_bucket(rows, table) == bucket


def test_extend_rows_on_two_of_four_rows_is_extend_with_the_others_left_alone():
    """2 rows padded to a sub-batch of 4, the whole table (the padding gathers a clipped row and is never written back); one
    of them cut back 2 tokens first, as after a stop string."""
    rng = np.random.RandomState(0)
    prompts = [rng.randint(3, CONFIG.vocab_size, n).tolist() for n in (5, 9, 3, 7)]
    observations = {1: rng.randint(3, CONFIG.vocab_size, 6).tolist(), 3: rng.randint(3, CONFIG.vocab_size, 4).tolist()}
    got = extend_rows(CONFIG, PARAMS, start(CONFIG, PARAMS, prompts), [1, 3], [observations[1], observations[3]],
                      cut=[None, 5])
    want = extend(CONFIG, PARAMS, start(CONFIG, PARAMS, [prompts[0], prompts[1], prompts[2], prompts[3][:5]]),
                  [[], observations[1], [], observations[3]])
    untouched = start(CONFIG, PARAMS, prompts)
    lengths = np.asarray(got.cache.lengths)
    np.testing.assert_array_equal(lengths[:4], [5, 15, 3, 9])
    for row in range(4):
        mine = jax.tree.map(lambda x: np.asarray(x[row]), got)
        reference = jax.tree.map(lambda x: np.asarray(x[row]), want if row in observations else untouched)
        np.testing.assert_array_equal(mine.tokens[: lengths[row]], reference.tokens[: lengths[row]])
        np.testing.assert_allclose(mine.hidden, reference.hidden, atol=1e-5, rtol=0)
