"""The sampler on a paged KV cache: a `PagePool` owns the pages (per layer, one device), and `PagedRows` are
rows whose KV lives in it, one page table per row.

The jitted programs are the dense sampler's (`prefill._append`, `decoding._decode`, `decoding._rewind`):
they take a `SamplerState` whose cache is a `PagedKVCache` (the pool's arrays, donated and handed back, plus
the rows' page tables), and the model attends over live pages only (`models/paged_cache.py`). The host keeps
the page book (`pages.py`): before each call it gives every row the pages the call will write into, after a
decode it takes back the pages a stopped row did not fill. A fork lists its parent's prefix pages again and
copies only the page it will write next, so k branches of a long prefix hold it once; gathering, joining and
archiving rows copy no KV at all: page tables are listed again. Prompts of very different lengths prefill in
the dense sampler's length groups.

`PagedRows` reads like a `SamplerState` (`batch_size`, `capacity`, `cache.lengths`, `logits`, `hidden`,
`pooled`, `tokens`), and the sampler's functions (`start` with a pool, `extend`, `decode`, `truncate`,
`fork_rows`, `gather_rows`, `concat_states`, the continuous scheduler's `place_rows` / `copy_rows` /
`extend_rows`) take either, so the rollout code is the same for both. Rows hold their pages while the
object lives: when it is dropped (or `release`d) every page it held is dropped once (a finalizer), as a
dense state's buffers are freed with it. A consumed state (one a function returns anew) gives its pages to
the result instead. One device for now: on a mesh the dense sampler runs.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.models.config import ModelConfig
from trace_jax.models.paged_cache import PagedKVCache, block_size, copy_pages, init_pages
from trace_jax.parallel.host import to_host
from trace_jax.sampling.pages import PageBook, PoolExhausted, pages_for
from trace_jax.sampling.state import SamplerState, batch_bucket, empty_state, length_bucket, put_replicated

PAGE_SIZE = 16  # tokens per page: a fork copies at most this many tokens of its parent's
FIRST_PAGES = 256  # a pool that grows on demand starts this large, then doubles
# A decode call packs its rows' live blocks (`paged_cache.pack`) when they are less than this share of rows x the
# longest row's blocks; an alike batch decodes in a dense working copy of its pages (as fast, fewer programs).
DENSE_SHARE = 0.5


def _device(array) -> jax.Array:
    """A host array on the device, explicitly (runs under `jax.transfer_guard("disallow")`: tests/test_smoke.py)."""
    return put_replicated(array, None)


@jax.jit
def _bare(lengths, keep=None) -> PagedKVCache:
    """A stored state's cache: the lengths (0 where not `keep`, if given) and no pool (the sampler's); its page
    table, the host's, may be left from the last program (`PagePool.run` uploads the host's at every call)."""
    lengths = lengths if keep is None else jnp.where(keep, lengths, 0)
    return PagedKVCache(k=(), v=(), page_tables=jnp.zeros((lengths.shape[0], 1), jnp.int32), lengths=lengths)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _empty(config: ModelConfig, batch: int, capacity: int) -> SamplerState:
    state = empty_state(config, batch, 1, None)
    return state.replace(cache=_bare(state.cache.lengths), tokens=jnp.zeros((batch, capacity), jnp.int32))


@functools.partial(jax.jit, static_argnums=(1,))
def _take(state: SamplerState, capacity: int, rows, keep) -> SamplerState:
    """Rows `rows` of a pool-less state (lengths 0 where not `keep`, if given), token history padded or cut to
    `capacity`."""
    state = jax.tree.map(lambda x: jnp.take(x, rows, axis=0, mode="clip"), state)
    tokens = state.tokens[:, :capacity]
    tokens = jnp.pad(tokens, [(0, 0), (0, capacity - tokens.shape[1])])
    return state.replace(tokens=tokens, cache=_bare(state.cache.lengths, keep))


@functools.partial(jax.jit, donate_argnums=0)
def _put(state: SamplerState, rows, sub: SamplerState) -> SamplerState:
    """Rows of `sub` written into rows `rows` of `state` (same capacity; indices past the batch dropped)."""
    state, sub = (s.replace(cache=_bare(s.cache.lengths)) for s in (state, sub))  # page tables of any width
    return jax.tree.map(lambda x, y: x.at[rows].set(y, mode="drop"), state, sub)


@jax.jit
def _join(states: list[SamplerState]) -> SamplerState:
    states = [s.replace(cache=_bare(s.cache.lengths)) for s in states]  # page tables of any width: not kept
    return jax.tree.map(lambda *x: jnp.concatenate(x), *states)


@functools.partial(jax.jit, donate_argnums=(0, 1))
def _copy(k, v, source, target):
    return copy_pages(k, v, source, target)


@functools.partial(jax.jit, static_argnums=2)
def _enlarge(k, v, extra: int):
    pad = lambda x: jnp.pad(x, [(0, extra)] + [(0, 0)] * (x.ndim - 1))  # noqa: E731
    return tuple(map(pad, k)), tuple(map(pad, v))


def _drop_all(book: PageBook, pages: list[list[int]]) -> None:
    for row in pages:
        book.drop(row)
        row.clear()


class PagedRows:
    """Rows of a `PagePool`: the device state without the pool (`state.cache` holds the lengths) and the pages
    each row holds (padding rows, past `n`, hold none)."""

    def __init__(self, pool: PagePool, state: SamplerState, pages: list[list[int]], n: int):
        self.pool, self.state, self.pages, self.n = pool, state, pages, n
        self._finalizer = weakref.finalize(self, _drop_all, pool.book, pages)

    # reads like a SamplerState
    batch_size = property(lambda self: self.state.batch_size)
    capacity = property(lambda self: self.state.capacity)
    cache = property(lambda self: self.state.cache)
    tokens = property(lambda self: self.state.tokens)
    logits = property(lambda self: self.state.logits)
    hidden = property(lambda self: self.state.hidden)
    pooled = property(lambda self: self.state.pooled)

    def lengths(self) -> np.ndarray:
        return np.array(to_host(self.state.cache.lengths))

    def widen(self, capacity: int) -> PagedRows:
        """Room for `capacity` tokens per row (the token history; pages are taken when written)."""
        capacity = self.pool.slots(capacity)
        if capacity > self.capacity:
            self.state = _take(self.state, capacity, _device(np.arange(self.batch_size)), None)
        return self

    def _handed_on(self) -> list[list[int]]:
        """Its pages, given to a new PagedRows (this one then holds none)."""
        pages = [list(p) for p in self.pages]
        for p in self.pages:
            p.clear()
        return pages


class PagePool:
    """KV pages of `config`'s layers on one device: `num_pages` of `page_size` tokens, grown by doubling when
    a call needs more, up to `max_pages` (0: no limit; then a PoolExhausted error names what was needed)."""

    def __init__(self, config: ModelConfig, *, page_size: int = PAGE_SIZE, num_pages: int = FIRST_PAGES,
                 max_pages: int = 0):
        if max_pages and max_pages < num_pages:
            num_pages = max_pages
        self.config, self.max_pages = config, int(max_pages)
        self.book = PageBook(num_pages, page_size)
        self.k, self.v = init_pages(config, num_pages, page_size)

    @property
    def page_size(self) -> int:
        return self.book.page_size

    def slots(self, n: int) -> int:
        """A row capacity: `length_bucket`'s, rounded up to whole pages."""
        return pages_for(length_bucket(n, self.page_size), self.page_size) * self.page_size

    # --- pages --------------------------------------------------------------------------------

    def _ensure_free(self, n: int, what: str) -> None:
        """At least `n` free pages, the pool grown (doubling) if it may; PoolExhausted otherwise."""
        if n <= self.book.free:
            return
        size = self.book.num_pages
        while size - self.book.held < n:
            size *= 2
        if self.max_pages:
            size = min(size, self.max_pages)
        if size - self.book.held < n:
            raise PoolExhausted(f"{what} needs {n} more KV pages of {self.page_size} tokens but "
                                f"{self.book.free} of the pool's {self.book.num_pages} are free (its limit: "
                                f"{self.max_pages} pages): raise the limit or run fewer rows at once")
        self.k, self.v = _enlarge(self.k, self.v, size - self.book.num_pages)
        self.book.grow(size)

    def trim(self, rows: PagedRows, lengths: np.ndarray) -> None:
        """Pages past each row's `lengths[i]` tokens (reserved and not filled, or cut off) go back to the pool."""
        for i, pages in enumerate(rows.pages):
            keep = pages_for(lengths[i], self.page_size)
            self.book.drop(pages[keep:])
            del pages[keep:]

    def prepare(self, rows: PagedRows, starts: np.ndarray, ends: np.ndarray, what: str) -> None:
        """Before a program writes slots starts[i] .. ends[i] - 1 of row i (starts[i] < 0: none): the page holding
        slot starts[i], if other rows hold it too, is copied onto a fresh page the row then holds alone (copy on
        write: a fork shares its parent's last page until one of them writes), and the row gets pages up to
        ends[i] tokens. All or nothing: PoolExhausted, naming what was needed, before anything is taken."""
        ps = self.page_size
        shared = [i for i, pages in enumerate(rows.pages)
                  if 0 <= starts[i] and starts[i] // ps < len(pages) and self.book.refs[pages[starts[i] // ps]] > 1]
        need = [max(0, pages_for(ends[i], ps) - len(p)) if starts[i] >= 0 else 0 for i, p in enumerate(rows.pages)]
        longest = int(np.argmax(ends))
        self._ensure_free(len(shared) + sum(need), f"{what} (the longest row, {longest}, reaches {int(ends[longest])} "
                                                   f"tokens)")
        if shared:
            source = np.full(batch_bucket(len(shared)), self.book.num_pages, np.int32)
            target = source.copy()
            for j, i in enumerate(shared):
                index = int(starts[i]) // ps
                (target[j],) = self.book.take(1)
                source[j] = rows.pages[i][index]
                self.book.drop([source[j]])
                rows.pages[i][index] = int(target[j])
            self.k, self.v = _copy(self.k, self.v, _device(source), _device(target))
        for i, n in enumerate(need):
            rows.pages[i] += self.book.take(n)

    # --- running a program -------------------------------------------------------------------------

    def _table(self, rows: PagedRows, width: int) -> np.ndarray:
        table = np.full((rows.batch_size, width), self.book.num_pages, np.int32)
        for i, pages in enumerate(rows.pages):
            table[i, : len(pages)] = pages
        return table

    def run(self, program, rows: PagedRows, *args, blocks: int = 0, capacity: int = 0):
        """`program(state, *args)` on the rows with the pool attached (donated, taken back), page tables as
        wide as `capacity` slots (the token history grows with them); returns what the program returns."""
        capacity = self.slots(max(capacity, max(len(p) for p in rows.pages) * self.page_size, rows.capacity))
        state = rows.state
        if capacity != state.capacity:
            state = _take(state, capacity, _device(np.arange(rows.batch_size)), None)
        table = _device(self._table(rows, capacity // self.page_size))
        cache = PagedKVCache(k=self.k, v=self.v, page_tables=table, lengths=state.cache.lengths, packed_blocks=blocks)
        out = program(state.replace(cache=cache), *args)
        new = out if isinstance(out, SamplerState) else out[1]
        self.k, self.v = new.cache.k, new.cache.v
        # a row with no page (padding) stays empty, whatever the program counted
        empty = np.array([not p for p in rows.pages])
        rows.state = new.replace(cache=_bare(new.cache.lengths, _device(~empty)) if empty.any() else
                                 new.cache.replace(k=(), v=(), packed_blocks=0))
        return out

    def packed_blocks(self, reach: np.ndarray) -> int:
        """The blocks of a decode's packed working copy for rows reaching `reach` tokens (`paged_cache.pack`),
        bucketed (4 sizes an octave); 0 where they fill at least DENSE_SHARE of rows x the longest row's blocks:
        such a batch decodes as fast in a dense working copy, and that compiles fewer programs."""
        block = block_size(self.page_size)
        live = [pages_for(x, block) for x in reach]
        if sum(live) >= DENSE_SHARE * len(live) * max(live):
            return 0
        return length_bucket(sum(live), 16)

    # --- rows -------------------------------------------------------------------------------------

    def empty(self, rows: int, capacity: int = 1) -> PagedRows:
        """`rows` rows (a batch bucket) holding nothing."""
        state = _empty(self.config, batch_bucket(rows), self.slots(capacity))
        return PagedRows(self, state, [[] for _ in range(state.batch_size)], rows)

    def take(self, rows: PagedRows, index: Sequence[int], *, consume: bool = False) -> PagedRows:
        """Row i is row index[i] of `rows`, sharing its pages (an index past the batch: an empty row). With
        `consume`, `rows` gives the taken rows' pages up (to their first copy) instead of sharing them."""
        index = np.asarray(index, np.int64)
        inside = (0 <= index) & (index < rows.batch_size)
        pages = [list(rows.pages[r]) if keep else [] for r, keep in zip(index, inside)]
        owned = set()
        for r, p, keep in zip(index, pages, inside):
            if consume and keep and r not in owned:
                owned.add(r)  # the first copy takes the row's references
            else:
                self.book.hold(p)
        for r in owned:
            rows.pages[r].clear()
        state = _take(rows.state, rows.capacity, _device(index), _device(inside))
        return PagedRows(self, state, pages, len(index))

    def put(self, target: PagedRows, index: Sequence[int], sub: PagedRows) -> PagedRows:
        """Rows index[i] of `target` become row i of `sub`, whose pages they take (`sub` is consumed; indices
        past `target`'s rows are padding); the rows' old pages are dropped. Returns `target`."""
        capacity = max(target.capacity, sub.capacity)
        if target.capacity < capacity:
            target.state = _take(target.state, capacity, _device(np.arange(target.batch_size)), None)
        sub_state = sub.state if sub.capacity == capacity else _take(sub.state, capacity,
                                                                    _device(np.arange(sub.batch_size)), None)
        handed = sub._handed_on()
        for i, r in enumerate(index):
            if r < target.batch_size:
                self.book.drop(target.pages[r])
                target.pages[r][:] = handed[i]
            else:
                self.book.drop(handed[i])
        padded = np.full(sub.batch_size, target.batch_size, np.int32)
        padded[: len(index)] = index
        target.state = _put(target.state, _device(padded), sub_state)
        return target

    def concat(self, parts: Sequence[PagedRows]) -> tuple[PagedRows, list[int]]:
        """The rows of several PagedRows in one (sharing their pages) and each part's offset in it."""
        offsets = np.cumsum([0] + [p.batch_size for p in parts[:-1]]).tolist()
        capacity = max(p.capacity for p in parts)
        states = [p.state if p.capacity == capacity else _take(p.state, capacity, _device(np.arange(p.batch_size)),
                                                               None) for p in parts]
        joined = _join(states)
        total = sum(p.batch_size for p in parts)
        pages = [list(row) for p in parts for row in p.pages]
        for row in pages:
            self.book.hold(row)
        merged = PagedRows(self, joined, pages, total)
        bucket = batch_bucket(total)
        if bucket == total:
            return merged, offsets
        return self.take(merged, list(range(total)) + [total] * (bucket - total), consume=True), offsets

    def release(self, rows: PagedRows) -> None:
        """Every page of the rows goes back to the pool (the rows are then empty)."""
        _drop_all(self.book, rows.pages)
        empty = _device(np.zeros(rows.batch_size, bool))
        rows.state = rows.state.replace(cache=_bare(rows.state.cache.lengths, empty))

    def cut(self, rows: PagedRows, lengths: np.ndarray) -> None:
        """Before rows are cut back to `lengths` tokens and refed their last one (`decoding._rewind`): pages past
        them dropped, the page of that last token made the row's own."""
        self.trim(rows, lengths)
        self.prepare(rows, np.asarray(lengths) - 1, lengths, "cutting rows")

    def share(self, prefixes: PagedRows, parents: Sequence[int], lengths: np.ndarray) -> PagedRows:
        """Row i lists the pages of parent row parents[i]'s first lengths[i] tokens (copied only when written:
        `prepare`); its other fields are the parent's, its length lengths[i] (rows past the parents: empty)."""
        index = np.full(batch_bucket(len(parents)), prefixes.batch_size, np.int64)
        index[: len(parents)] = parents
        pages = [list(prefixes.pages[p][: pages_for(n, self.page_size)]) for p, n in zip(parents, lengths)]
        pages += [[] for _ in range(len(index) - len(parents))]
        for p in pages:
            self.book.hold(p)
        keep = np.arange(len(index)) < len(parents)
        state = _take(prefixes.state, prefixes.capacity, _device(index), _device(keep))
        cut = np.zeros(len(index), np.int64)
        cut[: len(parents)] = lengths
        state = state.replace(cache=_bare(_device(cut.astype(np.int32))))
        return PagedRows(self, state, pages, len(parents))
