"""The worked extension examples of docs/extending.md, each registered and run the way the doc says."""

import numpy as np
import pytest

import examples.reverse_env  # noqa: F401  (registers task.source="reverse")
import examples.rloo_advantage  # noqa: F401  (registers advantage.name="rloo")
import examples.uncertainty_allocator  # noqa: F401  (registers allocator.name="uncertainty")
import examples.xml_format  # noqa: F401  (registers task.action_format="xml")
from configs import compare_multihop, quickstart
from trace_jax.envs import SOURCES
from trace_jax.envs.formats import FORMATS
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.protocol import Limits
from trace_jax.rl.advantages import AdvantageConfig, estimate
from trace_jax.run import train


def _tiny(c):
    c.model.preset = "tiny"
    c.sft.steps, c.sft.num_demos, c.sft.batch_size = 6, 16, 4
    c.rl.steps, c.rl.eval_every, c.rl.max_new_tokens = 2, 0, 16
    c.budget.update(rollouts=8, prompts=2, candidates=4)
    c.eval.num_tasks, c.checkpoint.every = 4, 1
    return c


@pytest.mark.slow
def test_the_allocator_runs_through_the_comparison_at_an_audited_equal_budget(tmp_path):
    from trace_jax.compare.runner import run_comparison
    c = _tiny(compare_multihop.get_config("runlocal"))
    c.task.num_questions = 200
    c.compare.allocators, c.compare.seeds, c.compare.generalization_steps = ("grpo", "uncertainty"), (0,), 0
    c.rl.steps = 1
    head = run_comparison(c, str(tmp_path))  # raises BudgetAuditError if a ledger strays from the budget
    assert set(head["heldout_acc"]) == {"grpo", "uncertainty"}


@pytest.mark.slow
def test_the_allocator_checkpoints_its_counts_and_resumes(tmp_path):
    c = _tiny(quickstart.get_config("runlocal"))
    c.allocator.name = "uncertainty"
    first = train.train_and_evaluate(c, str(tmp_path))
    from trace_jax.run.checkpointing import Checkpointer
    chosen = Checkpointer(str(tmp_path / "checkpoints")).read_record(2)["allocator"]["chosen"]
    assert sum(chosen.values()) == 2 * 2  # B prompts per step, counted in the checkpointed host state
    c.rl.steps = 3
    resumed = train.train_and_evaluate(c, str(tmp_path))  # resumes at step 2 with the stored counts
    assert first["steps"] == 2 and resumed["steps"] == 3
    assert sum(Checkpointer(str(tmp_path / "checkpoints")).read_record(3)["allocator"]["chosen"].values()) == 6


def test_the_estimator_leaves_one_out():
    from trace_jax.rollout.tree import RolloutTree
    tree = RolloutTree(task=None, prompt=[1, 2])
    for reward in (1.0, 0.0, 0.0, 1.0):
        tree.add(0, tokens=[3], terminal=True, reward=reward, success=reward > 0)
    sequences = estimate([tree], AdvantageConfig(name="rloo"))
    advantages = [next(iter(s.advantages.values())) for s in sequences]
    np.testing.assert_allclose(advantages, [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])


@pytest.mark.slow
def test_the_estimator_trains(tmp_path):
    c = _tiny(quickstart.get_config("runlocal"))
    c.allocator.name, c.advantage.name = "grpo", "rloo"
    assert train.train_and_evaluate(c, str(tmp_path))["steps"] == 2


@pytest.mark.slow
def test_the_environment_is_solved_by_its_oracle_and_trains(tmp_path):
    source = examples.reverse_env.ReverseTasks(0, num_questions=60)
    env = source.make_env()
    assert all(run_episode(env, t, source.oracle()).success for t in source.tasks("train")[:10])
    assert env.start(source.tasks("train")[0]).step("Action: reverse[" + "x" * 100 + "]").observation.startswith("Error")
    c = _tiny(quickstart.get_config("runlocal"))
    c.task.source, c.task.max_difficulty, c.task.num_questions = "reverse", 0, 120
    assert train.train_and_evaluate(c, str(tmp_path))["steps"] == 2


@pytest.mark.parametrize("name", ["multihop", "math", "reverse"])
def test_the_action_format_rewrites_demonstrations_that_still_succeed(name):
    source = (examples.reverse_env.ReverseTasks if name == "reverse" else SOURCES[name])(0, num_questions=60)
    env = source.make_env(Limits(max_turns=10))
    env.action_format = FORMATS["xml"]
    for task in source.tasks("train")[:5]:
        trajectory = run_episode(env, task, source.oracle(0.0))
        assert trajectory.success and all("Action:" not in text for text, _ in trajectory.turns)
    episode = env.start(source.tasks("train")[0])
    assert episode.step("<action tool=\"browse\">x</action>").info["error"] == "unknown_tool"
    assert episode.step("no tags at all").info["error"] == "no_action"


@pytest.mark.slow
def test_the_action_format_trains_with_the_bundled_tokenizer(tmp_path):
    c = _tiny(quickstart.get_config("runlocal"))
    c.task.action_format = "xml"
    assert train.train_and_evaluate(c, str(tmp_path))["steps"] == 2
