"""The paged cache's device side (models/paged_cache.py): a decode call's packed working copy lists each row's
blocks of its pages in order, and unpacking writes back exactly the tokens the call added. (Equality of whole
decodes on pages against the dense cache: tests/sampling/test_paged.py.)"""

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.models.paged_cache import PagedKVCache, block_size, pack, unpack, view

PAGE = 8


def test_pack_lists_each_rows_blocks_in_order_and_unpack_writes_back_only_new_tokens():
    k = (jax.random.normal(jax.random.key(0), (13, 2, 4, PAGE)),)
    v = (jax.random.normal(jax.random.key(1), (13, 2, PAGE, 4)),)
    block = block_size(PAGE)
    tables = jnp.asarray([[4, 5, 9, 2, 3, 0, 1, 6, 7, 8, 10, 11], [12] + [13] * 11],
                         jnp.int32)
    cache = PagedKVCache(k=k, v=v, page_tables=tables, lengths=jnp.asarray([70, 3], jnp.int32))
    packed = pack(cache, jnp.asarray([90, 5]), 8)
    blocks = -(-90 // block) + 1
    assert packed.row.tolist()[:blocks] == [0] * (blocks - 1) + [1] and set(packed.row.tolist()[blocks:]) == {2}
    keys, values = view(k[0], v[0], tables)
    for w in range(blocks):
        r, i = int(packed.row[w]), int(packed.index[w])
        n = min(block, keys.shape[-1] - i * block)  # the table's slots (past them: the pool's last page, unread)
        np.testing.assert_array_equal(packed.k[0][w][..., :n], keys[r, :, :, i * block:i * block + n])
        np.testing.assert_array_equal(packed.v[0][w][:, :n], values[r, :, i * block:i * block + n])
    # a decode call added 2 tokens to row 0 and 1 to row 1: exactly those slots go back to the pages
    new_k = packed.k[0].at[1, :, :, 70 - block].set(7.0).at[1, :, :, 71 - block].set(8.0)
    new_k = new_k.at[blocks - 1, :, :, 3].set(9.0)
    moved = unpack(cache, packed.replace(k=(new_k,), lengths=jnp.asarray([72, 4], jnp.int32)), steps=4)
    got, _ = view(moved.k[0], moved.v[0], tables)
    want = keys.at[0, :, :, 70].set(7.0).at[0, :, :, 71].set(8.0).at[1, :, :, 3].set(9.0)
    np.testing.assert_array_equal(got[0, :, :, :90], want[0, :, :, :90])
    np.testing.assert_array_equal(got[1, :, :, :PAGE], want[1, :, :, :PAGE])
    assert moved.lengths.tolist() == [72, 4]
