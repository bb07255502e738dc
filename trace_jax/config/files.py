"""Config files in and out: every section's defaults as an `ml_collections.ConfigDict` for `configs/*.py`
to build on (the typed dataclasses in `schema.py` are the one home of defaults; a config file overrides only
what differs), the parser of a config file's argument (`file.py:runlocal,checkpoint=/path`), and
`from_config_dict`, the one way a config file's dict becomes a checked `RunConfig`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import ml_collections

from trace_jax.config import checks, schema


def default_config() -> ml_collections.ConfigDict:
    """Every field of every section at its default. Registry sections (allocator, advantage, loss)
    list the fields of all their entries, so `--config.allocator.prefixes=none` is a valid flag.
    `advantage.name` is "": the estimator the chosen allocator trains with (`allocation.default_advantage`)."""
    c = {"seed": 0}
    for name, cls in schema.section_classes().items():
        registry = schema.registry_of(name)
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
        raise schema.ConfigError(f"unknown argument(s) {unknown} for {config}; it takes {known or 'none'}")
    return out


def from_config_dict(config) -> schema.RunConfig:
    """The typed, checked run config of a ConfigDict (or dict): `schema.parse` (fields, types), then
    `checks` (ranges, files, cross-field conflicts). Every problem is a ConfigError naming its field."""
    run = schema.parse(config)
    checks.check_fields(run)
    checks.check_consistency(run)
    return run
