"""Deterministic train/validation/test assignment by question text, so splits never share a question."""

from __future__ import annotations

import hashlib

SPLITS = ("train", "validation", "test")


def split_of(question: str, validation: float = 0.1, test: float = 0.1) -> str:
    h = int.from_bytes(hashlib.sha256(question.strip().lower().encode()).digest()[:8], "big") / 2.0 ** 64
    return "test" if h < test else ("validation" if h < test + validation else "train")


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return split
