"""`Registry`: swappable pieces chosen by name from a config section (allocators, advantage
estimators, losses). Each entry declares the frozen config dataclass it reads; the registry builds
that config from a section's fields (naming any field that does not exist or does not apply) and
builds the entry from it, so run-config validation asks the registry instead of re-checking names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class RegistryError(ValueError):
    """An unknown entry name, or a section field the chosen entry does not have."""


@dataclasses.dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    build: Callable[..., T]  # build(config, **context) -> the piece (a class, or a function's binder)
    config: type  # frozen dataclass with the registry's key field (`name`, or `source` for tasks)


class Registry(Generic[T]):
    """`register(name, config=...)` decorates a class or function; `config(section)` validates a
    section dict into the entry's config; `make(config, **context)` builds the entry. `key`: the config
    field that names the entry ("name"; the task section's is "source")."""

    def __init__(self, kind: str, section: str, key: str = "name"):
        self.kind, self.section, self.key = kind, section, key
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, *, config: type):
        if self.key not in {f.name for f in dataclasses.fields(config)}:
            raise TypeError(f"{config.__name__} must have a `{self.key}` field to be a {self.kind} config")

        def wrap(obj):
            if name in self._entries:
                raise RegistryError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(name, obj, config)
            return obj

        return wrap

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def entry(self, name: str) -> Entry[T]:
        if name not in self._entries:
            raise RegistryError(f"unknown {self.kind} {name!r}; registered: {self.names()}")
        return self._entries[name]

    def default_fields(self, name: str) -> dict[str, Any]:
        """Every field that any entry's config has, with its default; the chosen entry's defaults win.
        (What a config file lists so that `--config.<section>.<field>=` works for every entry.)"""
        out: dict[str, Any] = {}
        for entry in [e for e in self._entries.values() if e.name != name] + [self.entry(name)]:
            defaults = entry.config(**{self.key: entry.name})
            out.update({f.name: getattr(defaults, f.name) for f in dataclasses.fields(entry.config)})
        out[self.key] = name
        return out

    def config(self, section: Mapping[str, Any], default_name: str):
        """The chosen entry's config from a section's fields. A field that belongs to another entry's
        config is dropped while it holds that entry's default (a config file lists every entry's
        fields) and is an error once it is set; a field of no entry is an error."""
        given = dict(section)
        name = given.pop(self.key, default_name)
        if name not in self._entries:
            raise RegistryError(f"field '{self.section}.{self.key}': unknown {self.kind} {name!r}; "
                                f"registered: {self.names()}")
        entry = self._entries[name]
        own = {f.name for f in dataclasses.fields(entry.config)}
        kept = {self.key: entry.name}
        for key, value in given.items():
            if key in own:
                kept[key] = value
                continue
            owners = [e for e in self._entries.values() if key in {f.name for f in dataclasses.fields(e.config)}]
            if not owners:
                raise RegistryError(f"field '{self.section}.{key}' does not exist for any {self.kind}; "
                                    f"{entry.name!r} has {sorted(own)}")
            if all(value != getattr(e.config(**{self.key: e.name}), key) for e in owners):
                raise RegistryError(f"field '{self.section}.{key}'={value!r} applies to "
                                    f"{sorted(e.name for e in owners)}, not to {self.kind} {entry.name!r}")
        return entry.config(**kept)

    def make(self, config, **context) -> T:
        """Builds the entry named by the config's key field from its config (and what the caller provides)."""
        return self.entry(getattr(config, self.key)).build(config, **context)
