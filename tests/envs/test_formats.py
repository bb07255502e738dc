"""Action formats: hermes tool calls parse (several per turn, think blocks, malformed text as errors, never
raising), oracle demonstrations are rewritten in the format and still succeed, and under a Qwen3-style
chat template (tools, tool_call, tool_response, think) the ids trained are the ids sampled plus the
observation deltas, whatever the template does when it re-renders history."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trace_jax.envs import SOURCES
from trace_jax.envs.formats import FORMATS, HermesFormat
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.protocol import Limits
from trace_jax.envs.react import Action, ParseError
from trace_jax.envs.render import ChatRenderer, render_trajectory
from trace_jax.testing.checkpoints import write_qwen3_style_tokenizer

HERMES = FORMATS["hermes"]


@pytest.fixture(scope="module")
def qwen3_tokenizer_dir(tmp_path_factory):
    return write_qwen3_style_tokenizer(str(tmp_path_factory.mktemp("qwen3_style")))


@pytest.fixture(scope="module")
def sources():
    return {name: SOURCES[name](0, num_questions=80) for name in SOURCES}


def _env(source, action_format="hermes"):
    env = source.make_env(Limits(max_turns=10))
    env.action_format = FORMATS[action_format]
    return env


def test_hermes_parses_calls_thinking_and_answers(sources):
    env = _env(sources["multihop"])
    call = '<tool_call>\n{"name": "search", "arguments": {"query": "Ensa Works"}}\n</tool_call>'
    assert HERMES.parse("<think>find it</think>\n" + call, env) == Action("search", "Ensa Works")
    two = HERMES.parse(call + "\n" + call.replace("Ensa", "Oslo"), env)
    assert two == [Action("search", "Ensa Works"), Action("search", "Oslo Works")]
    assert HERMES.parse("<think>so</think>\nKalomi Corp", env) == Action("finish", "Kalomi Corp")
    assert HERMES.parse('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>', env) == \
        Action("search", "x")
    for text, kind in (("<tool_call>{oops}</tool_call>", "format"), ("<tool_call>{\"name\": \"search\"", "format"),
                       ('<tool_call>{"name": "browse", "arguments": {}}</tool_call>', "unknown_tool"),
                       ('<tool_call>{"name": "search", "arguments": {"q": 1}}</tool_call>', "format"),
                       ("<think>only thinking</think>", "empty"), (call * 9, "too_long")):
        parsed = HERMES.parse(text, env)
        assert isinstance(parsed, ParseError) and parsed.kind == kind, (text, parsed)
    funcall = _env(sources["funcall"])
    action = HERMES.parse('<tool_call>{"name": "get_user_id", "arguments": {"name": "Ada Park"}}</tool_call>', funcall)
    assert action.tool == "call" and json.loads(action.argument) == {"name": "get_user_id",
                                                                     "arguments": {"name": "Ada Park"}}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('<>/{}":, []tool_callthinkname argumentsquery\n\\x')), max_size=200))
def test_hermes_and_search_r1_never_raise(text):
    env = _env(SOURCES["math"](0, num_questions=20))
    parsed = HERMES.parse(text, env)
    assert isinstance(parsed, (Action, ParseError, list))
    env.start(SOURCES["math"](0, num_questions=20).tasks("train")[0]).step(text)
    assert isinstance(FORMATS["search_r1"].parse(text.replace("tool_call", "search"), env), (Action, ParseError))


def test_several_calls_in_one_turn_run_in_order(sources):
    source = sources["math"]
    env = _env(source)
    episode = env.start(source.tasks("train")[0])
    result = episode.step('<tool_call>{"name": "calculate", "arguments": {"expression": "2+3"}}</tool_call>'
                          '<tool_call>{"name": "calculate", "arguments": {"expression": "2**-1"}}</tool_call>')
    assert result.observation.split("\n") == ["5", "0.5"] and episode.tool_calls == 2


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_oracle_demonstrations_are_rewritten_and_still_succeed(sources, name):
    source = sources[name]
    env = _env(source)
    for task in source.tasks("train")[:5]:
        trajectory = run_episode(env, task, source.oracle(0.0))
        assert trajectory.success, (task.id, trajectory.turns)
        assert all("Action:" not in text for text, _ in trajectory.turns)
        assert trajectory.tools == env.tool_schemas(task) and trajectory.tools
        assert any("<tool_call>" in text for text, _ in trajectory.turns)


def test_the_trained_ids_are_the_sampled_ids_under_a_qwen3_style_template(sources, qwen3_tokenizer_dir):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
    renderer = ChatRenderer.for_format(tokenizer, "hermes")
    source = sources["multihop"]
    env = _env(source)
    task = next(t for t in source.tasks("train") if t.difficulty == 2)
    trajectory = run_episode(env, task, source.oracle(0.0))
    ids, mask = render_trajectory(renderer, trajectory)
    prompt = renderer.prompt(trajectory.messages, trajectory.tools)
    assert '"name": "search"' in tokenizer.decode(prompt) and "<tools>" in tokenizer.decode(prompt)
    expected = list(prompt)
    for text, observation in trajectory.turns:  # what the policy generated, then the observation delta
        expected += renderer.assistant(text)
        if observation is not None:
            delta = renderer.observation(observation)
            assert tokenizer.decode(delta).startswith("<|im_start|>user<tool_response>\n" + observation[:20])
            assert tokenizer.decode(delta).endswith("</tool_response><|im_end|><|im_start|>assistant\n")
            expected += delta
    assert ids == expected and sum(mask) == sum(len(renderer.assistant(t)) for t, _ in trajectory.turns)
    # re-rendering the whole conversation drops the earlier turns' <think> blocks: not what was sampled
    messages = trajectory.messages + [m for text, obs in trajectory.turns for m in
                                      ([{"role": "assistant", "content": text}] +
                                       ([{"role": "tool", "content": obs}] if obs is not None else []))]
    rerendered = tokenizer.apply_chat_template(messages, tools=trajectory.tools, tokenize=False)
    assert "<think>" in tokenizer.decode(ids) and rerendered.count("<think>") < tokenizer.decode(ids).count("<think>")


def test_thinking_off_opens_every_assistant_turn_with_an_empty_think_block(sources, qwen3_tokenizer_dir):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
    renderer = ChatRenderer.for_format(tokenizer, "hermes", {"enable_thinking": False})
    default = ChatRenderer.for_format(tokenizer, "hermes")
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    empty_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert tokenizer.decode(renderer.prompt(messages)).endswith(empty_think)
    assert not tokenizer.decode(default.prompt(messages)).endswith(empty_think)
    assert tokenizer.decode(renderer.observation("5")).endswith("</tool_response><|im_end|>" + empty_think)


def test_hermes_needs_a_template_with_tools(tmp_path):
    from transformers import AutoTokenizer

    from trace_jax.models.tokenizer import build_tokenizer
    tokenizer = AutoTokenizer.from_pretrained(build_tokenizer(str(tmp_path)))  # the bundled template: no tools
    with pytest.raises(ValueError, match="needs a chat template that renders tools"):
        ChatRenderer.for_format(tokenizer, "hermes")


@pytest.mark.slow
def test_two_rl_steps_with_hermes_on_a_qwen3_style_template(qwen3_tokenizer_dir, tmp_path):
    from configs import quickstart
    from trace_jax.run import train
    c = quickstart.get_config("runlocal")
    c.task.source, c.task.action_format = "math", "hermes"
    c.model.tokenizer = qwen3_tokenizer_dir
    c.sft.steps, c.sft.num_demos, c.sft.batch_size, c.sft.max_len = 4, 8, 4, 1024
    c.rl.steps, c.rl.eval_every, c.rl.max_new_tokens = 2, 0, 24
    c.budget.update(rollouts=8, prompts=2, candidates=4)
    c.eval.num_tasks, c.checkpoint.every = 4, 2
    summary = train.train_and_evaluate(c, str(tmp_path))
    assert summary["steps"] == 2


SEARCH_R1 = FORMATS["search_r1"]


def test_search_r1_parses_its_tags_and_rewrites_demonstrations(sources):
    env = _env(sources["multihop"], "search_r1")
    assert SEARCH_R1.parse("<think>who?</think>\n<search> Ensa Works </search> and then", env) == \
        Action("search", "Ensa Works")
    assert SEARCH_R1.parse("<think>so</think><answer> Kalomi </answer>", env) == Action("finish", "Kalomi")
    assert SEARCH_R1.parse("<answer>x</answer><search>y</search>", env) == Action("finish", "x")  # the first tag
    for text, kind in (("no tags", "no_action"), ("<search>unclosed", "no_action"), ("<think>hm</think>", "empty")):
        assert SEARCH_R1.parse(text, env).kind == kind
    for task in sources["multihop"].tasks("train")[:5]:
        trajectory = run_episode(env, task, sources["multihop"].oracle(0.0))
        assert trajectory.success and trajectory.turns[0][0].endswith("</search>")
    from trace_jax.envs.formats import cut_at_stop
    from trace_jax.rollout.turns import tokens_to_stop
    assert cut_at_stop("<search> a </search> junk", SEARCH_R1.stop_strings) == len("<search> a </search>")
    words = ["<search>", " a ", "</search>", " junk", " more"]
    assert tokens_to_stop(list(range(5)), lambda ids: "".join(words[i] for i in ids), SEARCH_R1.stop_strings) == 3
    assert tokens_to_stop(list(range(2)), lambda ids: "".join(words[i] for i in ids), SEARCH_R1.stop_strings) == 2


def test_search_r1_renders_results_in_the_stream_and_turns_without_an_end_token(tiny_setup):
    from trace_jax.envs.render import ReactRenderer
    renderer = ReactRenderer(tiny_setup.tokenizer, SEARCH_R1)
    tokenizer = tiny_setup.tokenizer
    assert tokenizer.decode(renderer.observation("[1] A: b")) == "\n\n<information>[1] A: b</information>\n\n"
    assert renderer.assistant("<search> q </search>")[-1] != renderer.end_of_turn
    assert renderer.assistant("<answer> q </answer>")[-1] != renderer.end_of_turn
    assert renderer.assistant("not a tag")[-1] == renderer.end_of_turn


def test_search_r1_needs_a_search_tool(tmp_path):
    from configs import quickstart
    from trace_jax.config.schema import ConfigError
    from trace_jax.run import experiment
    c = quickstart.get_config("runlocal")
    c.task.source, c.task.action_format = "math", "search_r1"
    with pytest.raises(ConfigError, match=r"written for the tool\(s\) \['search'\], which task.source='math'"):
        experiment.build(c, str(tmp_path))


@pytest.mark.slow
def test_two_rl_steps_with_search_r1_and_every_kept_turn_ends_at_its_stop_string(tmp_path):
    from configs import quickstart
    from trace_jax.envs.formats import cut_at_stop
    from trace_jax.rollout.agent_loop import RolloutEngine
    from trace_jax.run import experiment, train
    c = quickstart.get_config("runlocal")
    c.task.action_format = "search_r1"
    c.sft.steps, c.sft.num_demos, c.sft.batch_size = 30, 32, 8
    c.rl.steps, c.rl.eval_every, c.rl.max_new_tokens = 2, 0, 40
    c.budget.update(rollouts=8, prompts=2, candidates=4)
    c.eval.num_tasks, c.checkpoint.every = 4, 2
    assert train.train_and_evaluate(c, str(tmp_path))["steps"] == 2
    setup = experiment.build(c, str(tmp_path))
    _, params, _ = train.restore_policy(setup.run, str(tmp_path))
    engine = RolloutEngine(setup.policy(params), setup.env, seed=0)
    trees = engine.roots(setup.source.tasks("train")[:4])
    engine.expand(trees, [(i, 0, 2) for i in range(4)])
    kept = sum(len(n.tokens) for t in trees for n in t.nodes[1:])
    assert engine.ledger.tokens_generated >= kept  # cut tokens were generated, and are counted
    for tree in trees:
        for node in tree.nodes[1:]:
            text = setup.renderer.decode_turn(node.tokens)
            assert cut_at_stop(text, SEARCH_R1.stop_strings) in (None, len(text)) or node.terminal, text


def test_formats_are_a_registry():
    assert {"react", "hermes", "search_r1"} <= set(FORMATS) and isinstance(FORMATS["hermes"], HermesFormat)
    assert not FORMATS["react"].needs_chat_template and FORMATS["hermes"].needs_chat_template


_TAGGED = st.lists(st.sampled_from(["<think>", "</think>", "<tool_call>", "</tool_call>", "<search>", "</search>",
                                    "<answer>", "</answer>", "a", " ", "{}"]), max_size=14).map("".join)


@given(_TAGGED)
@settings(max_examples=400, deadline=None)
def test_the_linear_tag_scanners_find_what_the_lazy_regexes_find(text):
    import re

    from trace_jax.envs.formats import first_of_tags, tag_contents, without_blocks
    assert tag_contents(text, "tool_call") == re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)
    assert without_blocks(text, "think") == re.sub(r"<think>(.*?)</think>", "", text, flags=re.DOTALL)
    m = re.search(r"<(search|answer)>(.*?)</\1>", text, re.DOTALL)
    assert first_of_tags(text, ("search", "answer")) == (None if m is None else (m.group(1), m.group(2)))


@pytest.mark.parametrize("name", ["hermes", "search_r1", "react"])
@pytest.mark.parametrize("tag", ["<tool_call>", "<think>", "<search>", "<answer>", "Action: search["])
def test_a_megabyte_of_unclosed_tags_parses_in_linear_time(sources, name, tag):
    import time

    env = sources["multihop"].make_env(Limits(max_turns=4))
    text = tag * (1_000_000 // len(tag))
    t0 = time.perf_counter()
    result = FORMATS[name].parse(text, env)
    assert time.perf_counter() - t0 < 0.5 and isinstance(result, (Action, ParseError, list))
