"""Config files in and out: every section's defaults as an `ml_collections.ConfigDict` for `configs/*.py`
to build on (the typed dataclasses in `schema.py` are the one home of defaults; a config file overrides only
what differs), the parser of a config file's argument (`file.py:runlocal,checkpoint=/path`), and
`from_config_dict`, the one way a config file's dict becomes a checked `RunConfig`; `use_source` points a
config's task section at another task source."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

import ml_collections

from trace_jax.config import checks, schema
from trace_jax.envs.sources import TASK_SOURCES


def default_config() -> ml_collections.ConfigDict:
    """Every field of every section at its default. Registry sections (allocator, advantage, loss)
    list the fields of all their entries, so `--config.allocator.prefixes=none` is a valid flag.
    `advantage.name` is "": the estimator the chosen allocator trains with (`allocation.default_advantage`)."""
    c = {"seed": 0}
    for name, cls in schema.section_classes().items():
        registry = schema.registry_of(name)
        c[name] = registry.default_fields(getattr(cls(), registry.key)) if registry else dataclasses.asdict(cls())
    c["advantage"]["name"] = ""
    return ml_collections.ConfigDict(c)


def use_source(c: ml_collections.ConfigDict, source: str, **fields) -> ml_collections.ConfigDict:
    """Points `c.task` at `source` with `fields` set: every task field the source does not have goes back to
    its default first (a field of another source that a base config set, say the synthetic generator's
    num_questions, would otherwise be refused by name). Returns `c`."""
    own = {f.name for f in dataclasses.fields(TASK_SOURCES.entry(source).config)}
    defaults = TASK_SOURCES.default_fields(source)
    for key in list(c.task.keys()):
        if key not in own:
            c.task[key] = defaults[key]
    c.task.source = source
    c.task.update(fields)
    return c


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


def load_config_file(spec: str) -> ml_collections.ConfigDict:
    """A config from "path/to/file.py[:args]" (a `configs/*.py`-style file with `get_config(arg)`), as the
    launchers' --config reads it."""
    import importlib.util

    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise schema.ConfigError(f"config file {path!r} not found")
    module_spec = importlib.util.spec_from_file_location(f"config_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg or None)

