"""Text that reaches the tokenizer (issue 57, class 1): whatever a model writes, in any environment and action
format (lone surrogates as JSON escapes in tool names and argument names included), every observation and final
answer an episode returns is encodable by a Hugging Face tokenizer, cleaned in one place (`Episode.step`)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from trace_jax.envs import SOURCES
from trace_jax.envs.formats import FORMATS
from trace_jax.envs.protocol import Limits
from trace_jax.envs.react import format_action
from trace_jax.envs.text import REPLACEMENT, TRUNCATED, tokenizable
from trace_jax.models.tokenizer import build_tokenizer, load_tokenizer

SOURCE_OBJECTS = {name: SOURCES[name](0, num_questions=40) for name in sorted(SOURCES)}
PAIRS = [(name, fmt) for name in sorted(SOURCES) for fmt in sorted(FORMATS)
         if all(t in SOURCE_OBJECTS[name].make_env().tools for t in FORMATS[fmt].requires_tools)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(build_tokenizer(str(tmp_path_factory.mktemp("tok"))))


def test_tokenizable_replaces_lone_surrogates_and_bounds_the_length(tokenizer):
    with pytest.raises(TypeError):  # what happened before: the tokenizer refuses a lone surrogate
        tokenizer.encode("a\ud800b")
    assert tokenizable("a\ud800b\udfffc") == f"a{REPLACEMENT}b{REPLACEMENT}c"
    assert tokenizable("ok \U0001F600 \u202e") == "ok \U0001F600 \u202e"  # valid text is left alone
    assert tokenizable("x" * 10, 4) == "xxxx" + TRUNCATED and tokenizable("xyz", 4) == "xyz"
    tokenizer.encode(tokenizable("a\ud800b"))


_unicode = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=40)
_surrogate = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
_name = st.one_of(_unicode, _surrogate, st.tuples(_unicode, _surrogate).map("".join))


def _actions(env, fmt: str, name: str, argument: str) -> list[str]:
    """Model text calling a tool (a real one, or `name`) with `argument`, in this action format's syntax: the
    JSON forms carry surrogates as escapes, the way a model writes them."""
    tools = [*env.tools, "finish", name]
    if fmt == "hermes":
        return [f"<tool_call>{json.dumps({'name': tool, 'arguments': {name: argument, 'query': argument}})}</tool_call>"
                for tool in tools] + [argument]  # plain text: the final answer
    if fmt == "search_r1":
        return [f"<search>{argument}</search>", f"<answer>{argument}</answer>", f"<{name}>{argument}</{name}>"]
    return [format_action(tool, argument, name) for tool in tools] + [
        format_action(tool, json.dumps({name: argument}), "") for tool in env.tools]


@pytest.mark.parametrize("source,fmt", PAIRS, ids=[f"{s}-{f}" for s, f in PAIRS])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_name, argument=st.one_of(_unicode, _surrogate, st.tuples(_unicode, _surrogate, _unicode).map("".join)))
def test_no_model_text_reaches_the_tokenizer_uncleaned(tokenizer, source, fmt, name, argument):
    env = SOURCE_OBJECTS[source].make_env(Limits(max_turns=50, max_tokens=10**9))
    env.action_format = FORMATS[fmt]
    task = SOURCE_OBJECTS[source].tasks("train")[0]
    for text in _actions(env, fmt, name, argument):
        episode = env.start(task)
        result = episode.step(text, num_tokens=1)
        for shown in (result.observation, result.info.get("answer")):
            if isinstance(shown, str):
                tokenizer.encode(shown, add_special_tokens=False)  # raises on a lone surrogate
        for _, observation in episode.history:
            if observation is not None:
                tokenizer.encode(observation, add_special_tokens=False)
