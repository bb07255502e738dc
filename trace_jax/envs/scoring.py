"""Answer checking shared by the tasks: SQuAD-style normalization, exact match, token F1, numbers."""

from __future__ import annotations

import collections
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b")
# A number as people and our tools write it: signs, thousands separators ("1,234,567.5"), leading or
# trailing dots (".5", "42."), exponents ("2.5e-07", "1e+16"); units or currency around it are ignored.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def normalize(text: str) -> str:
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers) -> float:
    p = normalize(prediction)
    return float(any(p == normalize(a) for a in answers))


def f1(prediction: str, answers) -> float:
    best = 0.0
    p = normalize(prediction).split()
    for a in answers:
        g = normalize(a).split()
        common = sum((collections.Counter(p) & collections.Counter(g)).values())
        if common:
            precision, recall = common / len(p), common / len(g)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def parse_number(text: str) -> float | None:
    """The last number in a text ("$1,234.50" -> 1234.5, "2.5e-07" -> 2.5e-07, "12 km" -> 12), or None."""
    found = _NUMBER.findall(str(text))
    return float(found[-1].replace(",", "")) if found else None


def numeric_match(prediction: str, answers, tolerance: float = 1e-6) -> float:
    value = parse_number(prediction)
    if value is None:
        return 0.0
    for a in answers:
        gold = parse_number(a)
        if gold is not None and abs(value - gold) <= tolerance * max(1.0, abs(gold)):
            return 1.0
    return 0.0
