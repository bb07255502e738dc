"""The sampler on KV pages (sampling/paged.py, models/paged_cache.py) against the dense one: greedy tokens
identical and log-probs within 1e-5 (f32) through start, decode, forks at lengths that are not page multiples,
truncate and multi-turn extend; the page book's invariant holds after every call (each page counted once per
row listing it, the page a row writes next its own) and every page is free again once the rows are released
or dropped. A full pool is an error naming what was needed, raised with nothing taken; a pool without a
limit grows. (The continuous scheduler on pages: tests/rollout/test_continuous.py.)"""

import numpy as np
import pytest

from trace_jax.models import init_params
from trace_jax.models.presets import get_preset
from trace_jax.sampling import SamplingParams, decode, extend, gather_rows, start, tree_expand, truncate
from trace_jax.sampling.decoding import fork_rows
from trace_jax.sampling.fork import plan_fork
from trace_jax.sampling import paged
from trace_jax.sampling.paged import PagePool
from trace_jax.sampling.pages import PoolExhausted

CONFIG = get_preset("tiny")
PARAMS = init_params(CONFIG, 0)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=11)
PAGE = 8
LENGTHS = [9, 70, 5, 23, 16, 3]  # not page multiples (but one), an octave apart: two prefill groups


def _prompts(lengths, seed=0):
    rng = np.random.RandomState(seed)
    return [rng.randint(3, CONFIG.vocab_size, n).tolist() for n in lengths]


def _same(got, want):
    np.testing.assert_array_equal(got.lengths, want.lengths)
    for i in range(len(want.lengths)):
        np.testing.assert_array_equal(got.row(i), want.row(i))
        n = want.lengths[i]
        np.testing.assert_allclose(got.logprobs[i, :n], want.logprobs[i, :n], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got.hidden, want.hidden, atol=1e-5, rtol=1e-5)


def _check(pool, *rows_list, written=None):
    """Counts match the rows; the pages holding the last token of the `written` rows are theirs alone."""
    pool.book.check([p for rows in rows_list for p in rows.pages])
    if written is not None:
        for pages, length in zip(written.pages, written.lengths()):
            if length:
                assert pool.book.refs[pages[(length - 1) // PAGE]] == 1


def _fork(rows, parents, fork_lengths=None):
    return fork_rows(CONFIG, PARAMS, rows, plan_fork(parents, rows.batch_size, None), fork_lengths)


def _decode(rows, sampling, seed, row_ids):
    gen, rows = decode(CONFIG, PARAMS, rows, sampling, seed=seed, row_ids=row_ids)
    return gen


@pytest.fixture(params=["packed", "dense-copy"])
def decoding_mode(request, monkeypatch):
    """A decode call reads a packed working copy of its rows' live blocks, or a dense one (`DENSE_SHARE` picks
    per call by how alike the rows' lengths are; here forced each way)."""
    monkeypatch.setattr(paged, "DENSE_SHARE", 2.0 if request.param == "packed" else 0.0)
    return request.param


def test_start_and_decode_match_the_dense_sampler_and_release_every_page(decoding_mode):
    prompts = _prompts(LENGTHS)
    pool = PagePool(CONFIG, num_pages=64, page_size=PAGE)
    rows = start(CONFIG, PARAMS, prompts, reserve=GREEDY.max_new_tokens, pool=pool)
    _check(pool, rows)
    assert pool.book.held == sum(-(-n // PAGE) for n in LENGTHS)  # prompts' pages only, no reserve held
    got = _decode(rows, GREEDY, 0, list(range(len(prompts))))
    _check(pool, rows, written=rows)
    dense = start(CONFIG, PARAMS, prompts, reserve=GREEDY.max_new_tokens)
    want, _ = decode(CONFIG, PARAMS, dense, GREEDY, seed=0, row_ids=list(range(len(prompts))))
    _same(got, want)
    _check(pool, rows)
    assert pool.book.held == sum(-(-(n + m) // PAGE) for n, m in zip(LENGTHS, want.lengths))
    copies = gather_rows(rows, [2, 0, 2])  # share every page
    assert pool.book.held == sum(-(-(n + m) // PAGE) for n, m in zip(LENGTHS, want.lengths))
    pool.release(rows)
    assert pool.book.held == sum(-(-(LENGTHS[i] + want.lengths[i]) // PAGE) for i in (0, 2))
    del copies  # dropped rows give their pages back
    assert pool.book.held == 0 and (pool.book.refs == 0).all()


@pytest.mark.parametrize("fork_lengths", [None, [5, 17, 16, 9, 40]])
def test_forks_share_prefix_pages_and_decode_as_dense_forks(fork_lengths, decoding_mode):
    prompts = _prompts([21, 45, 3, 9])
    parents = [1, 1, 0, 3, 1]
    pool = PagePool(CONFIG, num_pages=96, page_size=PAGE)
    roots = start(CONFIG, PARAMS, prompts, reserve=GREEDY.max_new_tokens, pool=pool)
    _decode(roots, GREEDY, 3, [0, 1, 2, 3])
    held = pool.book.held
    branches = _fork(roots, parents, fork_lengths)
    _check(pool, roots, branches)
    parent_lengths = roots.lengths()[parents]
    cut = parent_lengths if fork_lengths is None else np.asarray(fork_lengths)
    # shared whole until written: a branch cut short of its parent refeeds its last token, into a copied page
    assert pool.book.held - held == (0 if fork_lengths is None else len(parents))
    got = _decode(branches, GREEDY, 5, [10, 11, 12, 13, 14])
    _check(pool, roots, branches, written=branches)

    dense = start(CONFIG, PARAMS, prompts, reserve=GREEDY.max_new_tokens)
    _, dense = decode(CONFIG, PARAMS, dense, GREEDY, seed=3, row_ids=[0, 1, 2, 3])
    want, _ = tree_expand(CONFIG, PARAMS, dense, parents, GREEDY, seed=5, row_ids=[10, 11, 12, 13, 14],
                          fork_lengths=None if fork_lengths is None else list(cut))
    _same(got, want)
    pool.release(branches)
    assert pool.book.held == held  # the roots' pages, still held by the roots
    pool.release(roots)
    assert pool.book.held == 0


def test_truncate_and_multi_turn_extend_match_the_dense_sampler(decoding_mode):
    prompts = _prompts([13, 30, 7])
    observations = _prompts([6, 17, 9], seed=1)
    pool = PagePool(CONFIG, num_pages=64, page_size=PAGE)
    rows = start(CONFIG, PARAMS, prompts, reserve=GREEDY.max_new_tokens, pool=pool)
    first = _decode(rows, GREEDY, 1, [0, 1, 2])
    keep = [13 + 4, 30 + 8, 7 + 1]  # cut inside the first turn, at a page boundary for row 1
    branches = _fork(rows, [0, 1, 2])  # the cut rows' pages are shared with these: copied on write
    rows = truncate(CONFIG, PARAMS, rows, keep)
    _check(pool, rows, branches)
    rows = extend(CONFIG, PARAMS, rows, observations)
    got = _decode(rows, GREEDY, 2, [0, 1, 2])
    _check(pool, rows, branches, written=rows)
    untouched = _decode(branches, GREEDY, 2, [0, 1, 2])

    dense = start(CONFIG, PARAMS, prompts, reserve=GREEDY.max_new_tokens)
    want_first, dense = decode(CONFIG, PARAMS, dense, GREEDY, seed=1, row_ids=[0, 1, 2])
    _same(first, want_first)
    copy, _ = tree_expand(CONFIG, PARAMS, dense, [0, 1, 2], GREEDY, seed=2, row_ids=[0, 1, 2])
    dense = extend(CONFIG, PARAMS, truncate(CONFIG, PARAMS, dense, keep), observations)
    want, _ = decode(CONFIG, PARAMS, dense, GREEDY, seed=2, row_ids=[0, 1, 2])
    _same(got, want)
    _same(untouched, copy)  # the forks never saw their parents' cut and new turn
    pool.release(rows)
    pool.release(branches)
    assert (pool.book.refs == 0).all()


def test_a_full_pool_is_an_error_before_any_work_and_takes_nothing():
    pool = PagePool(CONFIG, num_pages=6, page_size=PAGE, max_pages=6)
    rows = start(CONFIG, PARAMS, _prompts([20, 9]), pool=pool)  # 3 + 2 pages
    held = pool.book.held
    with pytest.raises(PoolExhausted, match=r"needs 2 more KV pages .* 1 of the pool's 6 are free"):
        _decode(rows, GREEDY, 0, [0, 1])
    assert pool.book.held == held
    with pytest.raises(PoolExhausted, match="pool's 6"):
        start(CONFIG, PARAMS, _prompts([60]), pool=pool)
    assert pool.book.held == held
    got = _decode(rows, SamplingParams(temperature=0.0, max_new_tokens=3), 0, [0, 1])
    assert got.lengths.tolist() == [3, 3]  # what fits runs, on the same rows


def test_a_pool_without_a_limit_grows_and_keeps_what_it_held():
    pool = PagePool(CONFIG, num_pages=2, page_size=PAGE)
    prompts = _prompts([20, 9, 33])
    rows = start(CONFIG, PARAMS, prompts, reserve=GREEDY.max_new_tokens, pool=pool)
    got = _decode(rows, GREEDY, 0, [0, 1, 2])
    assert pool.book.num_pages >= pool.book.held > 2
    want, _ = decode(CONFIG, PARAMS, start(CONFIG, PARAMS, prompts, reserve=GREEDY.max_new_tokens), GREEDY, seed=0,
                     row_ids=[0, 1, 2])
    _same(got, want)
