"""SFT data paths and the evaluation metrics."""

import dataclasses
import json

import numpy as np
import pytest

from trace_jax.envs.oracle import run_episode
from trace_jax.run.evaluation import evaluate_policy
from trace_jax.run.sft import conversation_demonstrations, make_batch, oracle_demonstrations


def test_oracle_demonstrations_train_only_assistant_tokens(tiny_setup):
    renderer = tiny_setup.policy.renderer
    demos = oracle_demonstrations(tiny_setup.source, renderer, num=5, mistake_rate=0.0, seed=0)
    assert len(demos) == 5
    ids, mask = demos[0]
    trained = tiny_setup.tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert "Action: search[" in trained and "Observation" not in trained and "Question" not in trained
    batch = make_batch(demos, max_len=4096)
    assert batch["mask"].sum() == sum(sum(m[1:]) for _, m in demos)


def test_oracle_demonstrations_can_be_limited_to_easy_tasks(tiny_setup, tmp_path):
    """sft.max_difficulty: a warm start on the easy questions only (one search per hop, no mistakes); a config
    that also names a conversations file is refused (the cap would be ignored)."""
    renderer, tokenizer = tiny_setup.policy.renderer, tiny_setup.tokenizer
    assert {t.difficulty for t in tiny_setup.source.tasks("train")} == {1, 2, 3, 4}
    for cap, searches in ((1, {1}), (2, {1, 2}), (0, {1, 2, 3, 4})):
        demos = oracle_demonstrations(tiny_setup.source, renderer, num=30, mistake_rate=0.0, seed=0, max_difficulty=cap)
        assert {tokenizer.decode([i for i, m in zip(ids, mask) if m]).count("Action: search[")
                for ids, mask in demos} == searches
    from trace_jax.config.files import default_config, from_config_dict
    from trace_jax.config.schema import ConfigError
    c = default_config()
    path = tmp_path / "conversations.jsonl"
    path.write_text("{}\n")
    c.sft.update(max_difficulty=1, data_path=str(path))
    with pytest.raises(ConfigError, match="sft.max_difficulty"):
        from_config_dict(c.to_dict())


def test_user_conversations_jsonl(tiny_setup, tmp_path):
    renderer = tiny_setup.policy.renderer
    source = tiny_setup.source
    trajectory = run_episode(source.make_env(), source.tasks("train")[0], source.oracle(0.0))
    messages = list(trajectory.messages)
    for text, observation in trajectory.turns:
        messages.append({"role": "assistant", "content": text})
        if observation is not None:
            messages.append({"role": "tool", "content": observation})
    path = tmp_path / "conversations.jsonl"
    path.write_text(json.dumps({"messages": messages}) + "\n")
    from trace_jax.envs.render import render_trajectory
    assert conversation_demonstrations(str(path), renderer)[0] == render_trajectory(renderer, trajectory)
    path.write_text(json.dumps({"messages": messages[:2] + [{"role": "tool", "content": "x"}]}) + "\n")
    with pytest.raises(ValueError, match=r"conversations\.jsonl:1"):
        conversation_demonstrations(str(path), renderer)



@pytest.mark.parametrize("content,message", [
    (b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ["x"]}]}\n',
     r"data\.jsonl:2: message 1 should be \{role, content\} with string role and content"),
    (b'{"messages": [{"role": "user", "content": "hi"}]}\n', r"data\.jsonl:2: .* no assistant message"),
    (b'{"messages": "hi"}\n', r"data\.jsonl:2: 'messages' should be a non-empty list"),
    (b'{"messages": [{"role": "user", "content": "\xff"}]}\n', r"data\.jsonl:2: not UTF-8"),
])
def test_bad_user_conversations_are_named_before_any_is_rendered(tiny_setup, tmp_path, content, message):
    from trace_jax.envs.loaders import DataError
    good = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Answer: 1"}]}\n'
    path = tmp_path / "data.jsonl"
    path.write_bytes(good + content)
    with pytest.raises(DataError, match=message):
        conversation_demonstrations(str(path), tiny_setup.policy.renderer)
    path.write_bytes(b"")
    with pytest.raises(DataError, match=r"data\.jsonl: the file has no rows"):
        conversation_demonstrations(str(path), tiny_setup.policy.renderer)

def test_greedy_accuracy_and_pass_at_k_by_level(tiny_setup):
    tasks = tiny_setup.source.tasks("validation")[:6]
    greedy = evaluate_policy(tiny_setup.policy, tiny_setup.env, tasks, greedy=True)
    sampled = evaluate_policy(tiny_setup.policy, tiny_setup.env, tasks, greedy=False, k=2)
    assert set(greedy) >= {"accuracy"} and set(sampled) >= {"pass@2"}
    levels = {t.difficulty for t in tasks}
    assert {f"pass@2/level_{lv}" for lv in levels} <= set(sampled)
    assert all(0.0 <= v <= 1.0 for v in list(greedy.values()) + list(sampled.values()))
    assert np.isfinite(sampled["pass@2"])


def test_per_task_outcomes_round_trip_and_mean_of_k(tiny_setup, tmp_path):
    from trace_jax.run.evaluation import TaskOutcomes, mean_of_k, read_outcomes, task_outcomes, write_outcomes

    tasks = tiny_setup.source.tasks("validation")[:5]
    sampled = task_outcomes(tiny_setup.policy, tiny_setup.env, tasks, greedy=False, k=3, seed=7)
    assert sampled.task_ids == tuple(t.id for t in tasks) and sampled.k == 3 and len(sampled.successes) == 5
    # common random numbers: the same seed and task list draw the same samples in any run
    assert task_outcomes(tiny_setup.policy, tiny_setup.env, tasks, greedy=False, k=3, seed=7) == sampled
    path = str(tmp_path / "eval" / "step_3.json")
    write_outcomes(path, {"sampled": sampled})
    assert read_outcomes(path) == {"sampled": sampled}
    fake = TaskOutcomes(task_ids=("a", "b", "c"), difficulty=(1, 1, 2), successes=(3, 0, 1), k=4)
    assert mean_of_k(fake) == {"mean@4": pytest.approx(1 / 3), "mean@4/level_1": 0.375, "mean@4/level_2": 0.25}


def test_a_warm_start_that_fails_its_easiest_level_is_reported(capsys):
    from configs import quickstart
    from trace_jax.config.files import from_config_dict
    from trace_jax.run.sft import log_after_sft

    run = from_config_dict(quickstart.get_config())
    weak = {"accuracy": 0.021, "accuracy/level_1": 0.071, "accuracy/level_2": 0.0, "accuracy/level_10": 0.9}
    log_after_sft(weak, run)
    assert "WARNING: the warm start solves 0.071 of the easiest level's (level 1)" in capsys.readouterr().out
    log_after_sft({"accuracy": 0.32, "accuracy/level_1": 0.97, "accuracy/level_4": 0.0}, run)
    log_after_sft(weak, dataclasses.replace(run, sft=dataclasses.replace(run.sft, steps=0)))  # no SFT: no verdict
    assert "WARNING" not in capsys.readouterr().out


@pytest.mark.parametrize("eval_chunk,rl_chunk,want", [(16, 0, 16), (0, 8, 8), (0, 0, 0)])
def test_evaluations_decode_with_their_own_schedule(tiny_setup, monkeypatch, eval_chunk, rl_chunk, want):
    """eval.decode_chunk: the evaluations' continuous-scheduler chunk (0: the RL one); the schedule changes
    speed, not outcomes (the same trees token for token: tests/rollout/test_continuous.py)."""
    import dataclasses
    import types

    from configs import quickstart
    from trace_jax.config.files import from_config_dict
    from trace_jax.rollout.continuous import Batching
    from trace_jax.run import evaluation

    c = quickstart.get_config("runlocal")
    c.eval.decode_chunk, c.rl.decode_chunk = eval_chunk, rl_chunk
    run = from_config_dict(c)
    policy = dataclasses.replace(tiny_setup.policy, batching=Batching(chunk=rl_chunk))
    setup = types.SimpleNamespace(run=run, policy=lambda params: policy, eval_groups=[])
    seen = []

    def grouped(p, groups, **kwargs):
        seen.append(p.batching.chunk)
        return evaluation.TaskOutcomes((), (), (), 1)

    monkeypatch.setattr(evaluation, "grouped_outcomes", grouped)
    evaluation.held_out(setup, None)
    assert seen and set(seen) == {want}
