"""Parsers of model text: ReAct actions and function calls. Malformed text never raises."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from trace_jax.envs.react import Action, ParseError, parse_action
from trace_jax.envs.tools.functions import Call, CallError, check_call, matches, parse_call
from trace_jax.envs.tasks.funcall import FUNCTIONS

TOOLS = ("search", "calculate", "call")


def test_parses_the_last_action():
    text = "Thought: try.\nAction: search[first]\nThought: better\nAction: search[ Kalo Miran ]"
    assert parse_action(text, TOOLS) == Action("search", "Kalo Miran")


@pytest.mark.parametrize("text,kind", [
    ("", "empty"), ("   \n", "empty"), ("Thought: hmm", "no_action"), ("Action: search Kalo", "format"),
    ("Action: search[Kalo", "format"), ("Action: fly[home]", "unknown_tool"), ("Action: " + "x" * 5000, "too_long"),
    ("Action: [x]", "format"),
])
def test_malformed_actions_are_explained(text, kind):
    result = parse_action(text, TOOLS)
    assert isinstance(result, ParseError) and result.kind == kind and result.message


def test_non_utf8_bytes_decoded_with_replacement_parse():
    text = b"Action: search[\xff\xfe caf\xc3\xa9]".decode("utf-8", errors="replace")
    assert isinstance(parse_action(text, TOOLS), Action)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=400))
def test_parse_action_never_raises(text):
    assert isinstance(parse_action(text, TOOLS), (Action, ParseError))


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_parse_call_never_raises_anything_but_call_error(text):
    try:
        call = parse_call(text)
        check_call(call, FUNCTIONS)
    except CallError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                    max_leaves=10))
def test_random_json_calls_never_raise(obj):
    try:
        check_call(parse_call(json.dumps(obj)), FUNCTIONS)
    except CallError:
        pass


def test_json_and_python_syntax_agree():
    a = parse_call('{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}')
    b = parse_call("get_weather(city='Oslo', unit='celsius')")
    assert a == b == Call("get_weather", {"city": "Oslo", "unit": "celsius"})
    check_call(a, FUNCTIONS)


@pytest.mark.parametrize("text,reason", [
    ("get_weather(city='Oslo')", "missing required"),
    ("get_weather(city='Oslo', unit='kelvin')", "one of"),
    ("get_weather(city=3, unit='celsius')", "type string"),
    ("get_weather(city='Oslo', unit='celsius', extra=1)", "unexpected argument"),
    ("launch_rockets(n=1)", "unknown function"),
    ("get_weather('Oslo', 'celsius')", "keyword"),
    ("get_weather(city=__import__('os'), unit='celsius')", "literal"),
    ('{"name": "get_weather", "arguments": {]', "bad JSON"),
    ("[1, 2]", "expected name"),
])
def test_bad_calls_are_explained(text, reason):
    with pytest.raises(CallError, match=reason):
        check_call(parse_call(text), FUNCTIONS)


def test_ast_match_with_allowed_values_and_optional_args():
    gold = {"city": ["Oslo", "oslo"], "unit": ["celsius", ""]}
    assert matches(Call("get_weather", {"city": "OSLO"}), gold, "get_weather")
    assert not matches(Call("get_weather", {"city": "Riga"}), gold, "get_weather")
    assert not matches(Call("get_weather", {"city": "Oslo", "x": 1}), gold, "get_weather")
    assert not matches(Call("get_time", {"city": "Oslo"}), gold, "get_weather")
