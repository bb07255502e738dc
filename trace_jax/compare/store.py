"""Results computed once per setting: a JSON file that records the settings (`key`) its value was
computed under, so a comparison's workdir can hold `:runlocal` and full results side by side and
an interrupted study resumes where it stopped."""

from __future__ import annotations

import json
import os

import jax


def cached(path: str, key: dict, compute, relevant=lambda key: key):
    """`compute()`, stored at `path` with the settings `key` it ran under; a stored value computed
    under other settings (say a `:runlocal` evaluation, in the full comparison's workdir) is redone.
    `relevant(key)`: the part of a key the value depends on (what two keys are compared by)."""
    key = json.loads(json.dumps(key))  # compared as stored: tuples come back as lists
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if "key" in stored and relevant(stored["key"]) == relevant(key):
            return stored["value"]
    value = compute()
    if jax.process_index() == 0:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"key": key, "value": value}, f)
        os.replace(path + ".tmp", path)
    return value
