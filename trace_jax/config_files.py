"""What `configs/*.py` build on: every section's defaults as an `ml_collections.ConfigDict` (the
typed dataclasses in `run_config` are the one home of defaults; a config file overrides only what
differs), and the parser of a config file's argument (`file.py:runlocal,checkpoint=/path`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import ml_collections

from trace_jax import run_config


def default_config() -> ml_collections.ConfigDict:
    """Every field of every section at its default. Registry sections (allocator, advantage, loss)
    list the fields of all their entries, so `--config.allocator.prefixes=none` is a valid flag.
    `advantage.name` is "": the estimator the chosen allocator trains with (`allocation.default_advantage`)."""
    c = {"seed": 0}
    for name, cls in run_config.section_classes().items():
        registry = run_config.registry_of(name)
        c[name] = registry.default_fields(cls().name) if registry else dataclasses.asdict(cls())
    c["advantage"]["name"] = ""
    return ml_collections.ConfigDict(c)


def config_args(arg: str | None, *, flags: Sequence[str] = (), values: Mapping[str, str] | None = None,
                config: str = "this config") -> dict[str, object]:
    """Parses `runlocal,checkpoint=/x` into {"runlocal": True, "checkpoint": "/x"}: every flag is
    present (False unless given), every value too (its default unless given). A part that is neither
    a known flag nor `known=value` is a ConfigError naming it and what `config` accepts."""
    values = dict(values or {})
    out: dict[str, object] = {**{f: False for f in flags}, **values}
    unknown = []
    for part in filter(None, (p.strip() for p in (arg or "").split(","))):
        key, eq, value = part.partition("=")
        if eq and key in values:
            out[key] = value
        elif not eq and key in flags:
            out[key] = True
        else:
            unknown.append(part)
    if unknown:
        known = list(flags) + [f"{k}=..." for k in values]
        raise run_config.ConfigError(f"unknown argument(s) {unknown} for {config}; it takes {known or 'none'}")
    return out
