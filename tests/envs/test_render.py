"""Renderers: per-turn deltas reproduce a full rendering; only assistant tokens are trained."""

import pytest

from trace_jax.envs import MultiHopQA
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.render import ChatRenderer, ReactRenderer, render_trajectory
from trace_jax.models.tokenizer import build_tokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(build_tokenizer(str(tmp_path_factory.mktemp("tok"))))


@pytest.fixture(scope="module")
def trajectory():
    source = MultiHopQA(0, num_questions=50)
    task = next(t for t in source.tasks("train") if t.difficulty == 2)
    return run_episode(source.make_env(), task, source.oracle(0.0))


def test_chat_deltas_equal_the_template_of_the_whole_conversation(tokenizer, trajectory):
    renderer = ChatRenderer(tokenizer)
    ids, mask = render_trajectory(renderer, trajectory)
    messages = list(trajectory.messages)
    for text, observation in trajectory.turns:
        messages.append({"role": "assistant", "content": text})
        if observation is not None:
            messages.append({"role": "user", "content": f"Observation: {observation}"})
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    assert tokenizer.decode(ids) == full.rstrip("\n")
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert "Observation" not in trained and "Action: finish[" in trained


def test_react_rendering_masks_observations(tokenizer, trajectory):
    renderer = ReactRenderer(tokenizer)
    ids, mask = render_trajectory(renderer, trajectory)
    text = tokenizer.decode(ids)
    assert text.count("\nObservation: ") == len(trajectory.turns) - 1
    assert sum(mask) == sum(len(renderer.assistant(t)) for t, _ in trajectory.turns)
    assert renderer.decode_turn(renderer.assistant(trajectory.turns[0][0])) == trajectory.turns[0][0]


def test_chat_renderer_needs_a_template(tokenizer):
    class NoTemplate:
        chat_template = None
        unk_token_id = None
        eos_token_id = 0

        def convert_tokens_to_ids(self, token):
            return 2

    with pytest.raises(ValueError, match="chat template"):
        ChatRenderer(NoTemplate())
