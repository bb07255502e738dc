"""`Episode.step` is total: no model text ends a run. Fuzzed at the environment boundary for every
task source (random text, actions with hostile arguments: deep nesting, huge numbers, odd unicode),
plus the reproductions of the crashes found by probing (overflow, recursion, huge ints), and the
last-resort catch for a tool or scorer that raises anyway."""

import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from trace_jax.envs import SOURCES
from trace_jax.envs.protocol import ERROR_KINDS, Env, Limits, StepResult
from trace_jax.envs.react import format_action
from trace_jax.envs.tools.calculator import calculate
from trace_jax.envs.tools.functions import CallError, check_call, parse_call
from trace_jax.envs.tasks.funcall import FUNCTIONS

SMALL = {"multihop": dict(num_questions=60), "math": dict(num_questions=60), "funcall": dict(num_questions=60)}
SOURCE_OBJECTS = {name: SOURCES[name](0, **SMALL[name]) for name in sorted(SOURCES)}
ENVS = {name: source.make_env(Limits(max_turns=50, max_tokens=10**9)) for name, source in SOURCE_OBJECTS.items()}

HOSTILE = [
    "0.001**-200", "9" * 400, "1e308*1e308", "[" * 3000, "{" * 3000, '{"name": "get_user_id", "arguments": "'
    + "[" * 1500 + '"}', 'convert_currency(amount=' + "9" * 400 + ', from_currency="USD", to_currency="EUR")',
    '{"name": "convert_currency", "arguments": {"amount": 1e400, "from_currency": "USD", "to_currency": "EUR"}}',
    '{"name": "convert_currency", "arguments": {"amount": NaN, "from_currency": "USD", "to_currency": "EUR"}}',
    "\udcff\ud800", "\u202e\u0000\ufeff", "👩‍👩‍👧‍👦" * 50, "\n" * 500, "Action: search[" * 40,
]


def _check_total(env: Env, text: str) -> StepResult:
    task = SOURCE_OBJECTS[env.name].tasks("train")[0]
    episode = env.start(task)
    result = episode.step(text, num_tokens=1)
    assert isinstance(result, StepResult)
    if not result.done:
        assert isinstance(result.observation, str) and len(result.observation) <= env.limits.max_observation_chars + 20
    assert result.info.get("error") in (None, *ERROR_KINDS)
    return result


@pytest.mark.parametrize("name", sorted(ENVS))
@pytest.mark.parametrize("argument", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_arguments_become_observations(name, argument):
    env = ENVS[name]
    for tool in (*env.tools, "finish"):
        _check_total(env, format_action(tool, argument, "try"))


_argument = st.one_of(
    st.text(max_size=200),
    st.integers(min_value=-10**500, max_value=10**500).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                 max_leaves=20).map(lambda v: json.dumps({"name": "get_user_id", "arguments": v})),
    st.integers(1, 80).map(lambda depth: "(" * depth + "1" + ")" * depth),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(ENVS)), tool=st.sampled_from(["search", "calculate", "call", "finish", "x"]),
       argument=_argument, prefix=st.text(max_size=40))
def test_any_action_is_a_step_result(name, tool, argument, prefix):
    _check_total(ENVS[name], f"{prefix}\nAction: {tool}[{argument}]")


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(sorted(ENVS)), text=st.text(max_size=400))
def test_any_text_is_a_step_result(name, text):
    _check_total(ENVS[name], text)


def test_power_bound_respects_the_exponent_sign():
    assert calculate("0.001**-200").startswith("Error: power too large")  # was OverflowError
    assert float(calculate("2**-200")) == pytest.approx(2.0 ** -200)  # was wrongly refused
    assert calculate("(-0.25)**-150").startswith("Error: power too large")
    assert float(calculate("0.5**199")) == pytest.approx(0.5 ** 199)


def test_deeply_nested_json_arguments_are_a_call_error():
    with pytest.raises(CallError, match="nested"):  # was RecursionError
        parse_call('{"name": "f", "arguments": "' + "[" * 1500 + '"}')


@pytest.mark.parametrize("amount", ["9" * 400, "1e400", "float('inf')"])
def test_huge_amounts_are_refused_not_converted(amount):
    env = ENVS["funcall"]
    text = f'convert_currency(amount={amount}, from_currency="USD", to_currency="EUR")'
    result = _check_total(env, format_action("call", text))
    assert result.observation.startswith("Error") and result.info["error"] == "tool_error"
    with pytest.raises(CallError):
        check_call(parse_call(text) if "inf" not in amount else parse_call(text.replace(amount, "1e400")), FUNCTIONS)


class _Broken(Env):
    name = "broken"
    tools = ("boom",)

    def system_prompt(self, task):
        return ""

    def run_tool(self, task, action, episode):
        raise ZeroDivisionError("a tool bug")

    def score(self, task, answer, episode):
        raise KeyError("gold")


def test_a_raising_tool_or_scorer_is_caught_logged_once_and_observed(caplog):
    env, task = _Broken(), SOURCE_OBJECTS["math"].tasks("train")[0]
    with caplog.at_level(logging.WARNING, logger="trace_jax.envs.protocol"):
        first = env.start(task).step("Action: boom[1]")
        second = env.start(task).step("Action: boom[2]")
        final = env.start(task).step("Action: finish[3]")
    assert first.observation.startswith("Error: the boom tool failed") and first.info["error"] == "tool_crash"
    assert second.info["error"] == "tool_crash" and not second.done
    assert final.done and final.reward == 0.0 and final.info["error"] == "score_crash"
    logged = [r for r in caplog.records if "ZeroDivisionError" in r.getMessage()]
    assert len(logged) == 1 and task.id in logged[0].getMessage()
