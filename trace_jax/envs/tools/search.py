"""BM25 search over a local corpus with the `bm25s` library: top-k passages within a length budget."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import numpy as np

from trace_jax.envs.protocol import DataError


@dataclasses.dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text


class SearchIndex:
    """A BM25 index; `search(query)` returns formatted passages, `retrieve` their ids and scores."""

    def __init__(self, documents: Sequence[Document], *, top_k: int = 3, max_words_per_passage: int = 60):
        if not documents:
            raise DataError("cannot index an empty corpus")
        self.documents = list(documents)
        self.top_k = top_k
        self.max_words = max_words_per_passage
        import bm25s  # here, not at import: importing bm25s starts JAX's backend, which must wait for
        # jax.distributed.initialize in multi-host runs (the launcher loads configs, hence envs, first)
        logging.getLogger("bm25s").setLevel(logging.WARNING)  # its INFO "Building index ..." line is not ours to print
        tokens = bm25s.tokenize([d.contents for d in self.documents], stopwords="en", show_progress=False)
        if not tokens.vocab:
            raise DataError(f"cannot index this corpus: none of its {len(self.documents)} documents has a word "
                            "outside the English stopwords")
        self._bm25 = bm25s.BM25()
        self._bm25.index(tokens, show_progress=False)

    def retrieve(self, query: str, k: int | None = None) -> list[tuple[int, float]]:
        k = min(k or self.top_k, len(self.documents))
        import bm25s
        words = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not words or not words[0]:
            return []
        docs, scores = self._bm25.retrieve(words, k=k, show_progress=False)
        return [(int(d), float(s)) for d, s in zip(np.asarray(docs)[0], np.asarray(scores)[0]) if s > 0]

    def search(self, query: str) -> str:
        """The search tool's observation: numbered passages, each cut to the word budget."""
        query = (query or "").strip()
        if not query:
            return "Error: empty search query"
        hits = self.retrieve(query[:500])
        if not hits:
            return f"No results for {query[:80]!r}."
        lines = []
        for rank, (doc, _) in enumerate(hits, 1):
            d = self.documents[doc]
            lines.append(passage_line(rank, d.title, d.text, self.max_words))
        return "\n".join(lines)


MAX_TITLE_WORDS = 16  # a title longer than this is cut too: the per-passage budget holds whatever the passage's shape


def _cut(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


def passage_line(rank: int, title: str, text: str, max_words: int) -> str:
    """One retrieved passage as the search tool shows it: `[rank] title: text`, the text cut to `max_words` words and
    the title to MAX_TITLE_WORDS. A passage without a title line (no text apart from it, or a text that repeats it,
    as a corpus row without a newline loads) shows as `[rank] text` under the same cap."""
    title, text = title.strip().strip('"'), text.strip()
    if not text or text == title:
        title, text = "", text or title
    return f"[{rank}] {_cut(title, MAX_TITLE_WORDS)}: {_cut(text, max_words)}" if title else f"[{rank}] {_cut(text, max_words)}"
