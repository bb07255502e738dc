"""The registry: entries own their configs; a section's fields are checked against the chosen entry."""

import dataclasses

import pytest

from trace_jax.registry import Registry, RegistryError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plain:
    name: str = "plain"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fancy(Plain):
    width: int = 4


def _registry():
    reg = Registry("widget", "widget")
    reg.register("plain", config=Plain)(lambda config, **context: ("plain", config, context))
    reg.register("fancy", config=Fancy)(lambda config, **context: ("fancy", config, context))
    return reg


def test_make_builds_the_named_entry_from_its_own_config():
    reg = _registry()
    config = reg.config({"name": "fancy", "width": 8}, default_name="plain")
    assert config == Fancy(name="fancy", width=8)
    assert reg.make(config, seed=3) == ("fancy", config, {"seed": 3})
    assert reg.config({}, default_name="plain") == Plain()


def test_another_entrys_field_is_dropped_at_its_default_and_refused_once_set():
    reg = _registry()
    assert reg.config({"name": "plain", "width": 4}, default_name="plain") == Plain()
    with pytest.raises(RegistryError, match=r"'widget.width'=9 applies to \['fancy'\], not to widget 'plain'"):
        reg.config({"name": "plain", "width": 9}, default_name="plain")


def test_unknown_names_and_fields_are_named():
    reg = _registry()
    with pytest.raises(RegistryError, match=r"unknown widget 'shiny'; registered: \['fancy', 'plain'\]"):
        reg.config({"name": "shiny"}, default_name="plain")
    with pytest.raises(RegistryError, match="'widget.depth' does not exist for any widget"):
        reg.config({"name": "fancy", "depth": 2}, default_name="plain")
    with pytest.raises(RegistryError, match="registered twice"):
        reg.register("plain", config=Plain)(object)
    with pytest.raises(TypeError, match="`name` field"):
        reg.register("bad", config=type("NoName", (), {"__dataclass_fields__": {}}))


def test_default_fields_list_every_entrys_options_with_the_chosen_name():
    assert _registry().default_fields("plain") == {"name": "plain", "width": 4}
