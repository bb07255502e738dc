"""Text on its way to a tokenizer. Every observation, tool result, error text, user turn and final answer an
episode produces passes `tokenizable` in `Episode.step` (the one place), before any renderer sees it: a model can
write a JSON escape for a lone surrogate ("\\ud800") into a tool name or argument that an environment then
echoes, and Hugging Face tokenizers raise on such a string; that must become text, not end a run."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
TRUNCATED = " ...(truncated)"


def tokenizable(text: str, limit: int | None = None) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (the only code points a str holds that UTF-8 cannot
    encode), cut to `limit` characters (marked "...(truncated)") when given."""
    text = _SURROGATE.sub(REPLACEMENT, text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + TRUNCATED
    return text
