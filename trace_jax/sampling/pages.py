"""The host's book of the paged KV pool: which pages are free and how many rows hold each.

Every page a row lists is held by it (a reference, `check` tests the counts); a fork lists its parent's
prefix pages again (one more reference each), and a row about to write into a page another row holds gets
a copy of its own first (`paged.PagePool.prepare`), so no page is written while another row holds it. A
page returns to the free list with its last reference. Running out is an error naming the row, what it needs and what is
free, raised before any device work (a full pool never corrupts a row).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class PoolExhausted(RuntimeError):
    """The page pool cannot hold what a call needs (raised before the call touches the device)."""


def pages_for(length: int, page_size: int) -> int:
    """Pages that hold `length` tokens."""
    return -(-int(length) // page_size)


class PageBook:
    """Reference counts of `num_pages` pages of `page_size` slots; `take` hands out free pages."""

    def __init__(self, num_pages: int, page_size: int):
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"a page pool needs num_pages >= 1 and page_size >= 1; got {num_pages}, {page_size}")
        self.num_pages, self.page_size = int(num_pages), int(page_size)
        self.refs = np.zeros(self.num_pages, np.int32)
        self._free = list(range(self.num_pages - 1, -1, -1))  # a stack: low page ids first

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def held(self) -> int:
        """Pages held by at least one row."""
        return self.num_pages - len(self._free)

    def take(self, n: int, *, what: str = "a row") -> list[int]:
        """`n` free pages, each now held once; PoolExhausted (nothing taken) if fewer are free."""
        if n > len(self._free):
            raise PoolExhausted(f"{what} needs {n} more KV pages of {self.page_size} tokens but {len(self._free)} "
                                f"of the pool's {self.num_pages} are free")
        pages = [self._free.pop() for _ in range(n)]
        self.refs[pages] = 1
        return pages

    def grow(self, num_pages: int) -> None:
        """The pool now has `num_pages` pages (the new ones free)."""
        self.refs = np.concatenate([self.refs, np.zeros(num_pages - self.num_pages, np.int32)])
        self._free = list(range(num_pages - 1, self.num_pages - 1, -1)) + self._free
        self.num_pages = num_pages

    def hold(self, pages: Iterable[int]) -> None:
        """One more reference to each page (held already)."""
        pages = list(pages)
        if pages and (self.refs[pages] < 1).any():
            raise ValueError(f"holding free pages {[p for p in pages if self.refs[p] < 1]}")
        np.add.at(self.refs, pages, 1)

    def drop(self, pages: Iterable[int]) -> None:
        """One reference fewer to each page; a page with none left is free again."""
        pages = list(pages)
        if pages and (self.refs[pages] < 1).any():
            raise ValueError(f"dropping free pages {[p for p in pages if self.refs[p] < 1]}")
        np.add.at(self.refs, pages, -1)
        self._free.extend(p for p in dict.fromkeys(reversed(pages)) if self.refs[p] == 0)

    def check(self, pages: list[list[int]]) -> None:
        """The book's invariant over every live row (`pages[i]`: the pages row i lists): each page's count is the
        number of rows listing it. AssertionError naming the first page that differs."""
        counts = np.zeros(self.num_pages, np.int32)
        for row_pages in pages:
            np.add.at(counts, row_pages, 1)
        wrong = np.flatnonzero(counts != self.refs)
        assert not len(wrong), f"page {wrong[0]}: {self.refs[wrong[0]]} references but {counts[wrong[0]]} rows list it"
