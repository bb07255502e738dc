"""The page book (sampling/pages.py): reference counts, a shared page freed with its last holder, growth, and
the misuse it refuses (dropping or holding a free page)."""

import pytest

from trace_jax.sampling.pages import PageBook


def test_the_book_counts_references_and_frees_a_shared_page_with_its_last_holder():
    book = PageBook(4, 16)
    a = book.take(2)
    book.hold(a)
    book.drop(a)
    assert book.held == 2
    book.drop(a)
    assert book.held == 0 and book.free == 4
    with pytest.raises(ValueError, match="dropping free pages"):
        book.drop([a[0]])
    with pytest.raises(ValueError, match="holding free pages"):
        book.hold([a[0]])
    with pytest.raises(ValueError, match="num_pages >= 1"):
        PageBook(0, 16)
    book.grow(6)
    assert book.free == 6 and len(book.take(6)) == 6 and book.held == 6
    book.check([list(range(6))])
