"""Results computed once per setting: a JSON file that records the settings (`key`) its value was
computed under, so a comparison's workdir can hold `:runlocal` and full results side by side and
an interrupted study resumes where it stopped."""

from __future__ import annotations

import json
import os

import jax


def cached(path: str, key: dict, compute):
    """`compute()`, stored at `path` with the settings `key` it ran under; a stored value computed
    under other settings (say a `:runlocal` evaluation, in the full comparison's workdir) is redone."""
    key = json.loads(json.dumps(key))  # compared as stored: tuples come back as lists
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if stored.get("key") == key:
            return stored["value"]
    value = compute()
    if jax.process_index() == 0:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"key": key, "value": value}, f)
        os.replace(path + ".tmp", path)
    return value
